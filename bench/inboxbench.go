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

// runInbox runs one settle App with one inbox.Postgres mount at Concurrency(workers) and
// no inbox option, on N rows published (and ANALYZEd) before the timer starts.
func runInbox(ctx context.Context, rc *runCtx, sc scenario) (*sample, error) {
	db, err := rc.pg.db()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	table := rc.schema + ".jobs"
	if _, err := db.ExecContext(ctx, fmt.Sprintf(inboxSchema, table)); err != nil {
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
	ib := inbox.New(db, inbox.Postgres, inbox.Table{
		Name: table, ID: "id", Group: "name", Attempt: "attempt",
		RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload",
	})
	b := newAppBench(rc.n)
	app, err := b.app()
	if err != nil {
		return nil, err
	}
	app.Mount(ib.Queue(inboxGroup), settleHandler(sc, b.late, make([]atomic.Bool, rc.n)), settle.Concurrency(sc.workers))
	return b.run(ctx, rc, sc, app)
}
