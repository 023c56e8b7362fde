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
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// summary is the parsed last line of a run.
type summary struct{ n, acked, dropped, dead, delayed int }

var summaryRE = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+), delayed ([0-9]+)$`)

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

// expected plays the endpoint's answers for calls 1..n: 200 acks, 410 drops, 429 waits
// (delayed) and 503 retries until the fifth attempt, whose failure dead-letters. It
// also returns the ids of the dead calls and the longest total wait any one call asked
// for, in Retry-After seconds.
func expected(n int, seed uint64) (s summary, dead map[uint64]bool, longest int) {
	e := Endpoint{Seed: seed}
	dead = map[uint64]bool{}
	s.n = n
	for id := uint64(1); id <= uint64(n); id++ {
		waited := 0
	attempts:
		for attempt := 1; attempt <= maxAttempts; attempt++ {
			r := e.Post(id, attempt)
			switch {
			case r.Status == StatusOK:
				s.acked++
				break attempts
			case r.Status == StatusGone:
				s.dropped++
				break attempts
			case attempt == maxAttempts:
				s.dead++
				dead[id] = true
			case r.Status == StatusTooManyRequests:
				s.delayed++
				waited += r.RetryAfter
			}
		}
		longest = max(longest, waited)
	}
	return s, dead, longest
}

// backend is one database a test runs the command on.
type backend struct{ name, dsn string }

// backends returns a fresh SQLite file always, and Postgres and MariaDB/MySQL when
// SETTLE_POSTGRES_URL / SETTLE_MYSQL_DSN are set.
func backends(t *testing.T) []backend {
	bs := []backend{{"SQLite", "file:" + filepath.Join(t.TempDir(), "webhooks.db")}}
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
		for _, name := range []string{prefix + tableJobs, prefix + tableDead} {
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

func TestWebhooksDelayTooManyRequestsAndDeadLetterAtTheCap(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := uniquePrefix(t, b)
			const n, seed = 80, 11
			got := runCmd(t, "-dsn", b.dsn, "-prefix", prefix, "-n", strconv.Itoa(n), "-seed", strconv.Itoa(seed), "-second", "5ms")
			want, deadIDs, _ := expected(n, seed)
			if got != want {
				t.Fatalf("got %+v, want %+v", got, want)
			}
			if got.acked+got.dropped+got.dead != got.n || want.dead == 0 || want.delayed == 0 {
				t.Fatalf("got %+v: want A + D + X = N, with some delays and dead letters", got)
			}

			db, d, err := openSQL("", b.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if left := count(t, db, d, prefix+tableJobs); left != 0 {
				t.Fatalf("%s holds %d rows after the run, want 0", prefix+tableJobs, left)
			}
			rows, err := db.Query(`SELECT id, attempt, locked_until IS NULL, payload FROM ` + quote(d, prefix+tableDead))
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
				var c Call
				if err := settle.Msgpack.Unmarshal(payload, &c); err != nil {
					t.Fatalf("row %d: payload not kept: %v", id, err)
				}
				if attempt != maxAttempts || !unleased {
					t.Fatalf("row %d (call %d): attempt %d, lease cleared %v; want attempt %d and no lease", id, c.ID, attempt, unleased, maxAttempts)
				}
				if !deadIDs[c.ID] || c.URL != fmt.Sprintf("https://hooks.example.com/%d", c.ID) {
					t.Fatalf("row %d holds call %+v: not one that failed five times, or not as published", id, c)
				}
				seen[c.ID] = true
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(seen) != len(deadIDs) {
				t.Fatalf("%s holds calls %v, want %v", prefix+tableDead, seen, deadIDs)
			}
		})
	}
}

func TestWebhooksTooManyRequestsWaitsTheRetryAfterTheEndpointAnswered(t *testing.T) {
	t.Parallel()
	const n, seed, second = 20, 5, 50 * time.Millisecond
	_, _, longest := expected(n, seed)
	if longest < 3 {
		t.Fatalf("seed %d: the longest wait is %d Retry-After seconds; pick a seed with a longer one", seed, longest)
	}
	start := time.Now()
	runCmd(t, "-dsn", "file:"+filepath.Join(t.TempDir(), "webhooks.db"), "-n", strconv.Itoa(n), "-seed", strconv.Itoa(seed), "-second", second.String())
	// No call settles before the waits it was answered have passed: a row waits in the
	// table until its retry_after comes.
	if took, least := time.Since(start), time.Duration(longest)*second; took < least {
		t.Fatalf("the run took %s, less than the %s one call was told to wait", took, least)
	}
}

func TestWebhooksRefusesAnUnknownDriver(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-driver", "oracle"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `-driver "oracle"`) {
		t.Fatalf("run -driver oracle: got %v, want an error naming the driver", err)
	}
}
