package main

import (
	"strings"
	"testing"

	"github.com/settlekit/settle/admin"
)

// settle pause sets the control key the mounts read, settle resume deletes it; both say
// so in JSON, and running either twice changes nothing more.
func TestPauseSetsTheControlKeyAndResumeDeletesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	list := b.key("jobs")
	for _, tt := range []struct {
		name string
		args []string
		key  string
		grp  string
	}{
		{"StreamGroup", []string{b.in, b.group}, b.in, b.group},
		{"List", []string{list}, list, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			control := admin.ControlKey(tt.key, tt.grp)
			for range 2 {
				var out pauseJSON
				decode(t, b.ok(t, nil, append([]string{"pause", "--json"}, tt.args...)...).stdout, &out)
				if want := (pauseJSON{ControlKey: control, Group: tt.grp, Key: tt.key, Paused: true}); out != want {
					t.Fatalf("pause --json: %+v, want %+v", out, want)
				}
				if n, err := b.rdb.Exists(b.ctx, control).Result(); err != nil || n != 1 {
					t.Fatalf("after pause the control key %s: exists %d, %v; want 1", control, n, err)
				}
			}
			for range 2 {
				var out pauseJSON
				decode(t, b.ok(t, nil, append([]string{"resume", "--json"}, tt.args...)...).stdout, &out)
				if out.Paused || out.ControlKey != control {
					t.Fatalf("resume --json: %+v, want paused false naming %s", out, control)
				}
				if n, err := b.rdb.Exists(b.ctx, control).Result(); err != nil || n != 0 {
					t.Fatalf("after resume the control key %s: exists %d, %v; want 0", control, n, err)
				}
			}
		})
	}
	if r := b.ok(t, nil, "pause", b.in, b.group); !strings.Contains(r.stdout, "paused "+b.in+" group "+b.group) {
		t.Errorf("pause on a terminal says %q, want it to name the stream and group", r.stdout)
	}
}

// Bad input exits 1 naming it and writes no control key; a wrong number of arguments
// is a usage error.
func TestPauseRefusesBadInputWithExitCode1(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.rdb.XGroupCreateMkStream(b.ctx, b.in, b.group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	str := b.key("a-string")
	if err := b.rdb.Set(b.ctx, str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b.fails(t, exitError, []string{b.in, "name the consumer group"}, "pause", b.in)
	b.fails(t, exitError, []string{`"nobody"`}, "pause", b.in, "nobody")
	b.fails(t, exitError, []string{str, "string"}, "pause", str)
	b.fails(t, exitUsage, []string{"--help"}, "pause")
	b.fails(t, exitUsage, []string{"--help"}, "resume", "a", "b", "c")
	for _, control := range []string{admin.ControlKey(b.in, ""), admin.ControlKey(b.in, "nobody"), admin.ControlKey(str, "")} {
		if n, _ := b.rdb.Exists(b.ctx, control).Result(); n != 0 {
			t.Fatalf("a refused pause wrote %s", control)
		}
	}
}
