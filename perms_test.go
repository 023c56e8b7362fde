package settle_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/sourcetest"
)

// runRefused runs app until Run returns (it must, at once: the server answered) and
// returns its error.
func runRefused(t *testing.T, app *settle.App) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sourcetest.WaitBound)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	select {
	case err := <-errc:
		return err
	case <-time.After(sourcetest.WaitBound):
		t.Fatal("Run did not return: a missing permission must fail it at once")
		return nil
	}
}

// TestRunNamesEveryMissingPermissionOfEveryMountAtOnce: a mount whose Redis user may
// not run a command it needs does not start and loop on NOPERM: Run returns at once
// with one error naming, for each mount, every command refused, on a server of the
// test's own (ACL users are never made on the shared one).
func TestRunNamesEveryMissingPermissionOfEveryMountAtOnce(t *testing.T) {
	t.Parallel()
	r := redistest.Private(t)
	for _, tc := range []struct {
		name  string
		rules []string
		mount func(app *settle.App, rdb *redis.Client)
		want  []string // what the error names, each mount's line included
		never []string
	}{{
		name:  "StreamWithDurableZsetWithoutScripts",
		rules: []string{"+@all", "-eval", "-evalsha"},
		mount: func(app *settle.App, rdb *redis.Client) {
			app.Mount(settle.Stream(rdb, r.Key("s1"), "g"), sourcetest.Ack, settle.DelayIn(delayed.DurableZset{Key: r.Key("s1:delayed")}))
		},
		want:  []string{"EVALSHA", "EVAL"},
		never: []string{"XACK", "ZADD"},
	}, {
		name:  "WithoutScriptsNorACL",
		rules: []string{"+@all", "-eval", "-evalsha", "-acl"},
		mount: func(app *settle.App, rdb *redis.Client) {
			app.Mount(settle.Stream(rdb, r.Key("s2"), "g"), sourcetest.Ack)
		},
		want: []string{"EVALSHA", "EVAL"},
	}, {
		name:  "StreamWithoutXACKAndXAUTOCLAIM",
		rules: []string{"+@all", "-xack", "-xautoclaim"},
		mount: func(app *settle.App, rdb *redis.Client) {
			app.Mount(settle.Stream(rdb, r.Key("s3"), "g"), sourcetest.Ack)
		},
		want:  []string{"XACK " + r.Key("s3"), "XAUTOCLAIM " + r.Key("s3")},
		never: []string{"EVAL"},
	}, {
		name:  "DeadLetterKeyNotWritable",
		rules: []string{"+@all", "resetkeys", "~" + r.Key("s4") + "*"},
		mount: func(app *settle.App, rdb *redis.Client) {
			app.Mount(settle.Stream(rdb, r.Key("s4"), "g"), sourcetest.Ack, settle.DeadLetter(r.Key("dead4")), settle.MaxAttempts(3))
		},
		want: []string{"XADD " + r.Key("dead4")},
	}, {
		name:  "TwoMountsEachNamed",
		rules: []string{"+@all", "-lrem", "-set"},
		mount: func(app *settle.App, rdb *redis.Client) {
			app.Mount(settle.ReliableList(rdb, r.Key("l1")), sourcetest.Ack, settle.Name("first"))
			app.Mount(settle.ReliableList(rdb, r.Key("l2")), sourcetest.Ack, settle.Name("second"))
		},
		want: []string{"mount first", "mount second", "LREM", "SET"},
	}, {
		name:  "WaitReplicasWithoutWAIT",
		rules: []string{"+@all", "-wait"},
		mount: func(app *settle.App, rdb *redis.Client) {
			app.Mount(settle.Stream(rdb, r.Key("s5"), "g"), sourcetest.Ack, settle.WaitReplicas(1, time.Second))
		},
		want:  []string{"WAIT"},
		never: []string{"XACK", "EVAL"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			user := r.User(t, "settle-"+strings.ToLower(tc.name), tc.rules...)
			app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			tc.mount(app, user)
			err = runRefused(t, app)
			t.Log(err)
			if !errors.Is(err, settle.ErrPermission) {
				t.Fatalf("Run: %v, want ErrPermission", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Run: %v, want it to name %q", err, w)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(err.Error(), n+" ") {
					t.Fatalf("Run: %v names %q, which the user may run", err, n)
				}
			}
		})
	}
}
