package settle

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Run waits out only the errors that say the server cannot serve yet (unreachable,
// loading, out of memory), not those that say what was asked is wrong.
func TestOpenRetriesOnlyWhileTheServerIsUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{fmt.Errorf("stream %q: create group: %w", "k", io.EOF), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{syscall.ECONNRESET, true},
		{driver.ErrBadConn, true},
		{errors.New("LOADING Redis is loading the dataset in memory"), true},
		{fmt.Errorf("stream %q: create group: %w", "k", errors.New("LOADING Redis is loading the dataset in memory")), true},
		{errors.New("CLUSTERDOWN The cluster is down"), true},
		// At maxmemory Redis refuses writes until memory is freed: create group fails.
		{fmt.Errorf("stream %q: create group: %w", "k", errors.New("OOM command not allowed when used memory > 'maxmemory'.")), true},
		{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{errors.New("NOPERM this user has no permissions to run the 'xgroup' command"), false},
		{errors.New(`pq: relation "jobs" does not exist`), false},
		{redis.Nil, false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
