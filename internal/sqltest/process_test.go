package sqltest

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// Environment of a consumer process started by TestFourProcessesSettleEveryRowExactlyOnce.
const (
	envChildTable   = "SETTLE_INBOX_CHILD_TABLE"
	envChildDialect = "SETTLE_INBOX_CHILD_DIALECT"
	envChildDSN     = "SETTLE_INBOX_CHILD_DSN"
)

func TestFourProcessesSettleEveryRowExactlyOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const rows = 5000
		db := b.open(t)
		var dsn string
		switch b.d {
		case inbox.SQLite:
			// No busy timeout: the inbox's own retries must keep SQLITE_BUSY from the user.
			dsn = "file:" + filepath.Join(t.TempDir(), "shared.db") + "?_pragma=journal_mode(WAL)"
			var err error
			if db, err = sql.Open("sqlite", dsn); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
		case inbox.Postgres:
			dsn = os.Getenv("SETTLE_POSTGRES_URL")
		case inbox.MySQL:
			dsn = mysqlDSN(os.Getenv("SETTLE_MYSQL_DSN"))
		}
		tb := createTable(t, b, db, cols{})
		bulkInsert(t, b, db, tb, "load", rows)
		var mu sync.Mutex
		handled := map[string]int{}
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), envChildTable+"="+tb.Name, envChildDialect+"="+b.d.String(), envChildDSN+"="+dsn)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if err := cmd.Wait(); err != nil {
					t.Errorf("consumer process: %v\n%s\n%s", err, out.String(), errb.String())
					return
				}
				sc := bufio.NewScanner(&out)
				mu.Lock()
				defer mu.Unlock()
				for sc.Scan() {
					if p, ok := strings.CutPrefix(sc.Text(), "handled "); ok {
						handled[p]++
					}
				}
			})
		}
		wg.Wait()
		if len(handled) != rows {
			t.Fatalf("got %d distinct rows handled, want %d", len(handled), rows)
		}
		for p, n := range handled {
			if n != 1 {
				t.Fatalf("row %s handled %d times, want once", p, n)
			}
		}
		if left := readRows(t, b, db, tb); len(left) != 0 {
			t.Fatalf("got %d rows left, want none", len(left))
		}
	})
}

// TestConsumerProcess is the consumer process of the test above; it does nothing
// unless started by it.
func TestConsumerProcess(t *testing.T) {
	table := os.Getenv(envChildTable)
	if table == "" {
		t.Skip("helper process: runs only when started by TestFourProcessesSettleEveryRowExactlyOnce")
	}
	d, driver := inbox.Postgres, "pgx"
	switch os.Getenv(envChildDialect) {
	case inbox.MySQL.String():
		d, driver = inbox.MySQL, "mysql"
	case inbox.SQLite.String():
		d, driver = inbox.SQLite, "sqlite"
	}
	db, err := sql.Open(driver, os.Getenv(envChildDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tb := cols{}.spec(table)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var lines []string
	app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
	// A long lease: this test proves claims never hand one row to two processes. With the
	// default lease, a machine loaded enough to starve inbox.SQLite's single writer for longer
	// than the lease would let a lease pass legitimately (at-least-once) and blur that.
	app.Mount(inbox.New(db, d, tb).Queue("load", inbox.Poll(20*time.Millisecond), inbox.Lease(5*time.Minute)), settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
		mu.Lock()
		lines = append(lines, "handled "+string(m.Payload))
		mu.Unlock()
		return nil
	}), settle.Concurrency(16))
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	// Stop once the table is empty: every row has been settled by some process.
	q := quoteFor(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for left := -1; left != 0; {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the table was not drained in 2 minutes")
		}
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+q(table)).Scan(&left); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(strings.Join(lines, "\n"))
}
