package settle_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every goroutine an
// App starts must have returned before its Run does.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
