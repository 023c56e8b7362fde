package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// inboxGroup is the group (the name column) every benchmark row waits in.
const inboxGroup = "bench"

// inboxSchema is examples/mailer's Postgres table, in the run's schema: the table a user
// of the inbox makes (no index but the primary key).
const inboxSchema = `CREATE TABLE %s (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL)`

// inboxIndexedSchema is the README's recommended PostgreSQL table: inboxSchema, the
// optional last_error and dead_at columns, and the index on the group's due rows.
const inboxIndexedSchema = `CREATE TABLE %[1]s (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL,
    attempt SMALLINT NOT NULL DEFAULT 1,
    retry_after TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until TIMESTAMPTZ,
    payload BYTEA NOT NULL,
    last_error TEXT,
    dead_at TIMESTAMPTZ);
CREATE INDEX jobs_due ON %[1]s (name, retry_after, id)`

// runInbox runs one settle App with one inbox.Postgres mount at Concurrency(workers) and
// no inbox option, on N rows published (and ANALYZEd) before the timer starts, in
// examples/mailer's table.
func runInbox(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
	return inboxRun(ctx, rc, sc, false)
}

// runInboxIndexed is runInbox on the README's recommended table (inboxIndexedSchema).
func runInboxIndexed(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
	return inboxRun(ctx, rc, sc, true)
}

func inboxRun(ctx context.Context, rc *runCtx, sc scenario, indexed bool) (*sample, error) {
	db, err := rc.pg.db()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	table := rc.schema + ".jobs"
	schema := fmt.Sprintf(inboxSchema, table)
	if indexed {
		schema = fmt.Sprintf(inboxIndexedSchema, table)
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	// The payloads are payload(i): the index in 8 digits, then filler.
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s (name, payload)
		SELECT $1, convert_to(lpad(i::text, 8, '0') || repeat('x', %d), 'UTF8') FROM generate_series(0, $2::bigint - 1) AS i`,
		table, payloadSize-8), inboxGroup, rc.n); err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE "+table); err != nil {
		return nil, err
	}
	t := inbox.Table{
		Name: table, ID: "id", Group: "name", Attempt: "attempt",
		RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload",
	}
	if indexed {
		t.LastError, t.DeadAt = "last_error", "dead_at"
	}
	ib := inbox.New(db, inbox.Postgres, t)
	b := newAppBench(rc.n)
	app, err := b.app()
	if err != nil {
		return nil, err
	}
	app.Mount(ib.Queue(inboxGroup), settleHandler(sc, b.late, make([]atomic.Bool, rc.n)), settle.Concurrency(sc.workers))
	return b.run(ctx, rc, sc, app)
}
