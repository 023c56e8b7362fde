package faults_test

import (
	"testing"

	"github.com/settlekit/settle/internal/leakcheck"
)

// TestMain fails the package when a goroutine outlives the tests: the proxy's, or one an
// App started and did not wait for before its Run returned.
func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
