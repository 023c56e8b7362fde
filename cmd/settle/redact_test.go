package main

import (
	"strings"
	"testing"
)

// TestNoPasswordInAnyErrorOfTheCommand is rule 4 of issue 23 through the binary: each
// shape of URL or DSN, refused or unreachable, is named without its password, whether
// it came from a flag or the environment.
func TestNoPasswordInAnyErrorOfTheCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		env    []string
		args   []string
		secret string
		says   string
	}{
		{"redis unparseable percent", nil, []string{"--redis", "redis://app:Pw-a%zz@127.0.0.1:1/0", "dlq", "ls", "k"}, "Pw-a", "127.0.0.1:1"},
		{"redis space", nil, []string{"--redis", "redis://app:Pw-b with space@127.0.0.1:1/0", "dlq", "ls", "k"}, "Pw-b", "127.0.0.1:1"},
		{"redis unreachable", nil, []string{"--redis", "redis://app:Pw-c@127.0.0.1:1/0", "dlq", "ls", "k"}, "Pw-c", "127.0.0.1:1"},
		{"multi-node second password", nil, []string{"--redis", "redis://app:Pw-d1@127.0.0.1:1,redis://app:Pw-d2%zz@127.0.0.1:2", "dlq", "ls", "k"}, "Pw-d", "127.0.0.1:1,redis://"},
		{"environment", []string{EnvRedisURL + "=redis://app:Pw-e%zz@127.0.0.1:1/0"}, []string{"dlq", "ls", "k"}, "Pw-e", "127.0.0.1:1"},
		{"keyword DSN", nil, []string{"inbox", "--dsn", "host=127.0.0.1 port=1 user=app password=Pw-f dbname=app connect_timeout=2", "--table", "t", "view"}, "Pw-f", "host=127.0.0.1"},
		{"mysql at in password", nil, []string{"inbox", "--dsn", "root:Pw-g@x@tcp(127.0.0.1:1)/app", "--table", "t", "view"}, "Pw-g", "127.0.0.1:1"},
		{"postgres URL percent", nil, []string{"inbox", "--dsn", "postgres://app:Pw-h%zz@127.0.0.1:1/app", "--table", "t", "view"}, "Pw-h", "127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runSettle(t, tc.env, nil, tc.args...)
			if r.code == 0 {
				t.Fatalf("exit 0, want a refusal:\n%s", r.stdout)
			}
			out := r.stdout + r.stderr
			if strings.Contains(out, tc.secret) {
				t.Fatalf("the output shows the password %q:\n%s", tc.secret, out)
			}
			if !strings.Contains(out, tc.says) {
				t.Fatalf("the output does not name %q:\n%s", tc.says, out)
			}
		})
	}
}
