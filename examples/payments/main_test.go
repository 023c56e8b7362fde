package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// summary is the parsed last line of a run.
type summary struct{ n, acked, dropped, dead, failedRows int }

var summaryRE = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+), failed rows ([0-9]+)$`)

// runCmd runs the command with args and returns its parsed last line.
func runCmd(t *testing.T, args ...string) summary {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	m := summaryRE.FindStringSubmatch(last)
	if m == nil {
		t.Fatalf("last line %q does not match %s", last, summaryRE)
	}
	var v [5]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return summary{v[0], v[1], v[2], v[3], v[4]}
}

// expected plays the network's answers for payments 1..n: the first approval acks, an
// invalid card drops, the third decline dead-letters. It returns the counts and the ids
// of the dead payments.
func expected(n int, seed uint64) (s summary, dead map[uint64]bool) {
	network := Network{Seed: seed}
	dead = map[uint64]bool{}
	s.n = n
	for id := uint64(1); id <= uint64(n); id++ {
		for attempt := 1; attempt <= maxAttempts; attempt++ {
			a := network.Authorize(id, attempt)
			if a == Approved {
				s.acked++
				break
			}
			if a == Invalid {
				s.dropped++
				break
			}
			if attempt == maxAttempts {
				s.dead++
				dead[id] = true
			}
		}
	}
	s.failedRows = s.dead
	return s, dead
}

// backend is one database a test runs the command on.
type backend struct{ name, dsn string }

// backends returns a fresh SQLite file always, and Postgres and MariaDB/MySQL when
// SETTLE_POSTGRES_URL / SETTLE_MYSQL_DSN are set.
func backends(t *testing.T) []backend {
	bs := []backend{{"SQLite", "file:" + filepath.Join(t.TempDir(), "payments.db")}}
	if url := os.Getenv("SETTLE_POSTGRES_URL"); url != "" {
		bs = append(bs, backend{"Postgres", url})
	} else {
		t.Log("SETTLE_POSTGRES_URL not set: Postgres skipped")
	}
	if dsn := os.Getenv("SETTLE_MYSQL_DSN"); dsn != "" {
		bs = append(bs, backend{"MySQL", dsn})
	} else {
		t.Log("SETTLE_MYSQL_DSN not set: MySQL/MariaDB skipped")
	}
	return bs
}

// uniquePrefix returns a table-name prefix no other run uses, and drops the two tables
// a run creates with it after the test.
func uniquePrefix(t *testing.T, b backend) string {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	prefix := "t" + hex.EncodeToString(r[:]) + "_"
	t.Cleanup(func() {
		db, d, err := openSQL("", b.dsn)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer db.Close()
		for _, name := range []string{prefix + tableJobs, prefix + tableFailed} {
			if _, err := db.Exec(`DROP TABLE IF EXISTS ` + quote(d, name)); err != nil {
				t.Errorf("cleanup: drop %s: %v", name, err)
			}
		}
	})
	return prefix
}

func quote(d inbox.Dialect, name string) string {
	if d == inbox.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// count returns the number of rows of table.
func count(t *testing.T, db *sql.DB, d inbox.Dialect, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + quote(d, table)).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestPaymentsDeadLetterDeclinedChargesIntoTheFailedTableAtTheCap(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t, b)
			const n, seed = 80, 7
			got := runCmd(t, "-dsn", b.dsn, "-prefix", prefix, "-n", strconv.Itoa(n), "-seed", strconv.Itoa(seed))
			want, deadIDs := expected(n, seed)
			if got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
			if got.acked+got.dropped+got.dead != got.n || want.dead == 0 {
				t.Fatalf("got %+v: want A + D + X = N with some dead letters", got)
			}

			db, d, err := openSQL("", b.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if left := count(t, db, d, prefix+tableJobs); left != 0 {
				t.Fatalf("%s holds %d rows after the run, want 0", prefix+tableJobs, left)
			}
			rows, err := db.Query(`SELECT id, attempt, locked_until IS NULL, payload FROM ` + quote(d, prefix+tableFailed))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			seen := map[uint64]bool{}
			for rows.Next() {
				var id int64
				var attempt int
				var unleased bool
				var payload []byte
				if err := rows.Scan(&id, &attempt, &unleased, &payload); err != nil {
					t.Fatal(err)
				}
				var p Payment
				if err := settle.Msgpack.Unmarshal(payload, &p); err != nil {
					t.Fatalf("row %d: payload not kept: %v", id, err)
				}
				if attempt != maxAttempts || !unleased {
					t.Fatalf("row %d (payment %d): attempt %d, lease cleared %v; want attempt %d and no lease", id, p.ID, attempt, unleased, maxAttempts)
				}
				if !deadIDs[p.ID] || p.Card != fmt.Sprintf("4000-0000-0000-%04d", p.ID) || p.AmountCents != 100*p.ID {
					t.Fatalf("row %d holds payment %+v: not one the network declined three times, or not as published", id, p)
				}
				seen[p.ID] = true
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(seen) != len(deadIDs) {
				t.Fatalf("%s holds payments %v, want %v", prefix+tableFailed, seen, deadIDs)
			}
		})
	}
}

func TestPaymentsSecondRunOnTheSameTablesCountsOnlyItsOwnRows(t *testing.T) {
	t.Parallel()
	dsn := "file:" + filepath.Join(t.TempDir(), "payments.db")
	first := runCmd(t, "-dsn", dsn, "-n", "40", "-seed", "3")
	second := runCmd(t, "-dsn", dsn, "-n", "40", "-seed", "3")
	want, _ := expected(40, 3)
	if first != want || second != want {
		t.Fatalf("runs got %+v and %+v, want %+v each", first, second, want)
	}
	db, d, err := openSQL("", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The second run's dead rows got new ids: none collided with the first run's.
	if got := count(t, db, d, tableFailed); got != 2*want.dead {
		t.Fatalf("%s holds %d rows after two runs, want %d", tableFailed, got, 2*want.dead)
	}
}

func TestPaymentsRefusesAnUnknownDriver(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-driver", "oracle"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `-driver "oracle"`) {
		t.Fatalf("run -driver oracle: got %v, want an error naming the driver", err)
	}
}

func TestOpenSQLPicksTheDialectFromTheDriverOrTheDSN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, driver, dsn string
		want              inbox.Dialect
	}{
		{name: "EmptyIsSQLite", want: inbox.SQLite},
		{name: "FileIsSQLite", dsn: "file:/tmp/x.db", want: inbox.SQLite},
		{name: "PostgresURL", dsn: "postgres://root@127.0.0.1:5432/test", want: inbox.Postgres},
		{name: "PostgresqlURL", dsn: "postgresql://root@127.0.0.1:5432/test", want: inbox.Postgres},
		{name: "OtherIsMySQL", dsn: "root@tcp(127.0.0.1:3306)/test", want: inbox.MySQL},
		{name: "DriverWins", driver: "mysql", dsn: "root@tcp(127.0.0.1:3306)/x.db", want: inbox.MySQL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db, d, err := openSQL(tt.driver, tt.dsn) // opening connects to nothing yet
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			if d != tt.want {
				t.Fatalf("dialect %v, want %v", d, tt.want)
			}
		})
	}
	if _, _, err := openSQL("oracle", "x"); err == nil {
		t.Fatal("an unknown driver was accepted")
	}
}
