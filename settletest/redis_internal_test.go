package settletest

import (
	"testing"

	"github.com/settlekit/settle/internal/redistest"
)

// EnvRedisURL shows its value in the docs; it must stay the variable the test kit reads.
func TestEnvRedisURLIsTheTestKitsVariable(t *testing.T) {
	t.Parallel()
	if EnvRedisURL != redistest.EnvURL {
		t.Fatalf("EnvRedisURL = %q, redistest.EnvURL = %q", EnvRedisURL, redistest.EnvURL)
	}
}
