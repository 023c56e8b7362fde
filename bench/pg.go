package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", as settle's inbox uses it
)

// pgServer is the PostgreSQL the SQL rows run against.
type pgServer struct {
	admin      *sql.DB // creates and drops the runs' schemas
	conns      int     // every row's pool size
	dsn        string
	postmaster int // 0: not local (no database CPU figures)
	version    string
}

// connectPG connects to dsn and finds the postmaster when the server is local.
func connectPG(ctx context.Context, dsn string, conns int) (*pgServer, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2)
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var version string
	var backend int
	if err := db.QueryRowContext(qctx, `SELECT current_setting('server_version'), pg_backend_pid()`).Scan(&version, &backend); err != nil {
		_ = db.Close()
		return nil, err
	}
	return &pgServer{admin: db, conns: conns, dsn: dsn, postmaster: localPostmaster(dsn, backend), version: version}, nil
}

func (pg *pgServer) close() { _ = pg.admin.Close() }

// localPostmaster is the parent of the backend serving us when the server runs on this
// machine (a loopback or socket address, and a parent named postgres), else 0.
func localPostmaster(dsn string, backend int) int {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return 0
	}
	if ip := net.ParseIP(cfg.Host); cfg.Host != "localhost" && !strings.HasPrefix(cfg.Host, "/") && (ip == nil || !ip.IsLoopback()) {
		return 0
	}
	st, err := readProcStat(backend)
	if err != nil {
		return 0
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", st.ppid))
	if err != nil || !strings.Contains(string(comm), "postgres") {
		return 0
	}
	return st.ppid
}

// cpu is the database server's CPU so far: the postmaster and every process it forked.
func (pg *pgServer) cpu() (time.Duration, error) {
	if pg.postmaster == 0 {
		return 0, fmt.Errorf("server not local")
	}
	return treeCPU(pg.postmaster)
}

// db opens a database/sql pool of the row's size (idle connections kept: a pool that
// closes its idle ones reconnects on every burst).
func (pg *pgServer) db() (*sql.DB, error) {
	db, err := sql.Open("pgx", pg.dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(pg.conns)
	db.SetMaxIdleConns(pg.conns)
	return db, nil
}

// createSchema creates the run's own schema; dropSchema drops it with what the run put
// in it. Nothing else is ever dropped: CREATE SCHEMA fails on a name that exists.
func (pg *pgServer) createSchema(ctx context.Context, name string) error {
	_, err := pg.admin.ExecContext(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	return err
}

func (pg *pgServer) dropSchema(ctx context.Context, name string) error {
	_, err := pg.admin.ExecContext(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	return err
}

// runSQL runs the PostgreSQL scenarios, or prints why it skips them.
func runSQL(ctx context.Context, cfg config, plans []plan, res *results) error {
	pg, err := connectPG(ctx, cfg.pg, cfg.pgConns)
	if err != nil {
		fmt.Printf("== SQL rows skipped: the PostgreSQL at -pg %s does not connect: %v\n\n", redactDSN(cfg.pg), err)
		return nil
	}
	defer pg.close()
	printSQLHeader(cfg, pg)
	for _, p := range plans {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		*res = append(*res, runRows(ctx, cfg, cfg.sqlRuns, p.systems, p.sc, func() (*runCtx, func(), error) {
			tok := token()
			rc := &runCtx{
				capAfter: cfg.sqlCap, meter: &meter{serverCPU: pg.cpu}, n: cfg.sqlN, pg: pg,
				schema: tok, timeout: cfg.timeout, tok: tok,
			}
			if err := pg.createSchema(ctx, tok); err != nil {
				return nil, nil, fmt.Errorf("create schema %s: %w", tok, err)
			}
			return rc, func() {
				if err := pg.dropSchema(context.WithoutCancel(ctx), tok); err != nil {
					fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", tok, err)
				}
			}, nil
		})...)
		res.printScenario(os.Stdout, p.sc)
	}
	return nil
}

func printSQLHeader(cfg config, pg *pgServer) {
	cpuNote := fmt.Sprintf("database CPU: the postmaster (pid %d) and every process it forked, from /proc (other clients of this server count too)", pg.postmaster)
	if pg.postmaster == 0 {
		cpuNote = "database CPU unknown (server not local)"
	}
	fmt.Printf("settle inbox bench: N=%d rows of %d bytes, median of %d runs, a run ending at N rows done or after %s (then rated on the rows done); PostgreSQL %s (%s); %s\n",
		cfg.sqlN, payloadSize, cfg.sqlRuns, cfg.sqlCap, pg.version, redactDSN(cfg.pg), cpuNote)
	fmt.Printf("machine: %s\n", machine())
	fmt.Printf("settle-inbox: inbox.Postgres on examples/mailer's table (no index but the primary key), 1 mount, Concurrency(c), no inbox option; settle-inbox-indexed: the same on the README's recommended table (index on name, retry_after, id; last_error, dead_at); "+
		"River v0.51.2 (riverpgxv5, pgx v5): one client, MaxWorkers c, a retry policy retrying at once, a job counted on its JobCompleted event; "+
		"every run in a schema of its own, rows published and ANALYZEd before the timer starts; pools of %d connections (database/sql MaxOpenConns and MaxIdleConns, pgxpool MaxConns)\n\n",
		cfg.pgConns)
}

// redactDSN hides a password in a PostgreSQL URL for printing.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "(a DSN)"
	}
	return u.Redacted()
}
