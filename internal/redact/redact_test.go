package redact_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/settlekit/settle/internal/redact"
)

// TestNoPasswordSurvivesInAnyShape is rule 4 of issue 23: each shape of URL or DSN the
// operator tools take, printed as is, quoted, and inside the errors the parsers write
// (url.Parse repeats the whole URL), shows none of its passwords, and still shows its
// host.
func TestNoPasswordSurvivesInAnyShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw string
		secrets   []string // each must be gone
		host      string   // must stay
	}{
		{"redis password only", "redis://:Pw1-only@cache:6379/0", []string{"Pw1-only"}, "cache:6379"},
		{"redis user and password", "redis://app:Pw2-user@cache:6379/0", []string{"Pw2-user"}, "cache:6379"},
		{"rediss escaped at", "rediss://app:p%40Pw3@cache:6380", []string{"p%40Pw3", "p@Pw3"}, "cache:6380"},
		{"redis raw at", "redis://app:p@Pw4@cache:6379", []string{"p@Pw4", "Pw4"}, "cache:6379"},
		{"redis unparseable percent", "redis://app:Pw5%zz@cache:6379", []string{"Pw5%zz"}, "cache:6379"},
		{"redis space", "redis://app:Pw6 with space@cache:6379", []string{"Pw6 with space", "Pw6"}, "cache:6379"},
		{"multi-node second password", "redis://app:Pw7-first@n1:7001,redis://app:Pw7-second@n2:7002", []string{"Pw7-first", "Pw7-second"}, "@n1:7001,redis://"},
		{"cluster addresses and a URL", "10.0.0.1:7001,redis://app:Pw8@n2:7002", []string{"Pw8"}, "10.0.0.1:7001"},
		{"postgres URL", "postgres://app:Pw9-pg@db:5432/app?sslmode=disable", []string{"Pw9-pg"}, "db:5432"},
		{"postgres escaped slash", "postgres://app:Pw10%2Fx@db:5432/app", []string{"Pw10%2Fx", "Pw10/x"}, "db:5432"},
		{"postgres keyword DSN", "host=db port=5432 user=app password=Pw11-kw dbname=app", []string{"Pw11-kw"}, "host=db"},
		{"keyword DSN quoted", `host=db password='Pw12 q\'x' dbname=app`, []string{`Pw12 q\'x`, `Pw12 q'x`, "Pw12"}, "host=db"},
		{"keyword DSN upper case", "host=db PASSWORD=Pw13-UP dbname=app", []string{"Pw13-UP"}, "host=db"},
		{"mysql tcp", "root:Pw14-my@tcp(127.0.0.1:3306)/test?parseTime=true", []string{"Pw14-my"}, "127.0.0.1:3306"},
		{"mysql at in password", "root:Pw15@at@tcp(db:3306)/test", []string{"Pw15@at", "Pw15"}, "db:3306"},
		{"mysql unix socket", "app:Pw16-sock@unix(/run/mysqld.sock)/app", []string{"Pw16-sock"}, "/run/mysqld.sock"},
		{"mysql no protocol", "app:Pw17-plain@/app", []string{"Pw17-plain"}, "/app"},
		{"redis quote in password", `redis://app:Pw18"q@cache:6379`, []string{`Pw18"q`, `Pw18\"q`}, "cache:6379"},
		{"mysql percent and space", "app:Pw19 %x@tcp(db:3306)/app", []string{"Pw19 %x"}, "db:3306"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, perr := url.Parse(tc.raw)
			outputs := map[string]string{
				"DSN":          redact.DSN(tc.raw),
				"error":        redact.Text(fmt.Sprintf("cannot connect to %s (%q): %v: dial %s", tc.raw, tc.raw, perr, tc.raw), redact.Secrets(tc.raw)...),
				"escaped form": redact.Text("GET "+url.QueryEscape(tc.raw), redact.Secrets(tc.raw)...),
			}
			for what, out := range outputs {
				for _, s := range tc.secrets {
					if strings.Contains(out, s) {
						t.Errorf("%s shows %q: %s", what, s, out)
					}
				}
			}
			if !strings.Contains(outputs["DSN"], tc.host) {
				t.Errorf("DSN %q lost the host %q", outputs["DSN"], tc.host)
			}
		})
	}
}

// TestAURLInAnyTextHasItsPasswordHidden: a URL the tools never saw (in a driver's
// error) still has its userinfo password hidden.
func TestAURLInAnyTextHasItsPasswordHidden(t *testing.T) {
	t.Parallel()
	got := redact.Text(`dial "redis://u:unseen@h:1/0" and postgres://a:other@db/x: refused`)
	if strings.Contains(got, "unseen") || strings.Contains(got, "other") || !strings.Contains(got, "h:1/0") {
		t.Fatalf("Text = %q", got)
	}
}
