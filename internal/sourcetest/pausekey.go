package sourcetest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
)

// PauseByKey gives s the Pause and Resume of an operator: SET and DEL of the control
// key of key and group (group "" for a list), as settle/admin writes it.
func PauseByKey(s *Subject, rdb redis.UniversalClient, key, group string) {
	control := keys.Paused(key, group)
	s.Pause = func(t testing.TB) {
		t.Helper()
		if err := rdb.Set(context.Background(), control, "1", 0).Err(); err != nil {
			t.Fatalf("pause: set %s: %v", control, err)
		}
	}
	s.Resume = func(t testing.TB) {
		t.Helper()
		if err := rdb.Del(context.Background(), control).Err(); err != nil {
			t.Fatalf("resume: del %s: %v", control, err)
		}
	}
}
