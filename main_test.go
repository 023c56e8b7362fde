package settle_test

import (
	"testing"

	"github.com/settlekit/settle/internal/leakcheck"
)

// TestMain fails the package when a goroutine outlives the tests: every goroutine an
// App starts must have returned before its Run does.
func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
