package sqltest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle/inbox"
)

// privateMariaDB starts a MariaDB server of the test's own, with extra server options,
// on a free loopback port in a temporary directory, and returns a DSN of its database
// test (root, no password); the server is stopped by its pid after the test. It skips
// the test without SETTLE_MYSQL_DSN (the real-server pass) or without mariadbd and
// mariadb-install-db on the machine.
func privateMariaDB(t *testing.T, extra ...string) string {
	t.Helper()
	if os.Getenv("SETTLE_MYSQL_DSN") == "" {
		t.Skip("SETTLE_MYSQL_DSN is not set: the MariaDB tests run on the real-server pass")
	}
	install, err1 := exec.LookPath("mariadb-install-db")
	server, err2 := exec.LookPath("mariadbd")
	if err2 != nil {
		server, err2 = exec.LookPath("/usr/sbin/mariadbd")
	}
	if err1 != nil || err2 != nil {
		t.Skip("mariadb-install-db or mariadbd is not installed")
	}
	dir := t.TempDir()
	var user []string
	if os.Geteuid() == 0 {
		user = []string{"--user=root"}
	}
	data := filepath.Join(dir, "data")
	args := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal"}, user...)
	if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	args = append([]string{"--no-defaults", "--datadir=" + data, fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "sock"), "--pid-file=" + filepath.Join(dir, "pid"), "--skip-name-resolve"}, user...)
	cmd := exec.Command(server, append(args, extra...)...)
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mariadbd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
	})
	root := openPool(t, "mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port))
	const startup = time.Minute // a loaded machine starts it in seconds
	deadline := time.Now().Add(startup)
	for root.PingContext(context.Background()) != nil {
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("mariadbd on port %d did not answer within %s:\n%s", port, startup, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := root.ExecContext(context.Background(), "CREATE DATABASE IF NOT EXISTS test"); err != nil {
		t.Fatal(err)
	}
	return mysqlDSN(fmt.Sprintf("root@tcp(127.0.0.1:%d)/test", port))
}

// TestOpenRefusesAMySQLServerThatLogsStatements: on a MariaDB server writing its binary
// log in STATEMENT format, which refuses every write of the READ COMMITTED transactions a
// queue claims in (error 1665), Run stops at once with an error naming binlog_format and
// what to set; on the same server, a pool whose sessions log rows (binlog_format=ROW in
// the DSN) opens and delivers.
func TestOpenRefusesAMySQLServerThatLogsStatements(t *testing.T) {
	t.Parallel()
	dsn := privateMariaDB(t, "--log-bin=binlog", "--binlog-format=STATEMENT", "--server-id=1")
	b := backend{d: inbox.MySQL, name: "MySQL"}
	db := openPool(t, "mysql", dsn)
	tb := createTable(t, b, db, cols{})
	if _, err := inbox.New(db, b.d, tb).PublishBytes(context.Background(), "jobs", []byte("p")); err != nil {
		t.Fatal(err)
	}

	logs := newOpenLog()
	_, ran := openedApp(t, b, db, tb, logs)
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "binlog_format=STATEMENT") || !strings.Contains(err.Error(), "ROW or MIXED") {
			t.Fatalf("Run returned %v, want the statement-logging server refused, naming binlog_format", err)
		}
		t.Logf("refused: %v", err)
	case <-time.After(waitLong):
		t.Fatal("Run did not stop on a server that logs statements")
	}

	rows := openPool(t, "mysql", dsn+"&binlog_format=%27ROW%27")
	delivered, ran := openedApp(t, b, rows, tb, newOpenLog())
	awaitDelivery(t, delivered, ran)
	var format string
	if err := rows.QueryRowContext(context.Background(), "SELECT @@binlog_format").Scan(&format); err != nil || format != "ROW" {
		t.Fatalf("the pool's sessions log %q (err %v), want ROW", format, err)
	}
}
