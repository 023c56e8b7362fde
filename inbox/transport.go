package inbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/source"
)

// transport is one mount's consumer of a queue.
type transport struct {
	d            dialect
	env          source.Env
	q            *Queue
	s            *statements
	replyStmts   *statements  // from Open: the statements of the ReplyTo table (a table without a group column)
	leases       *leaseKeeper // from Open: the rows held and their heartbeat
	redo         *redoer      // from Open: re-applies settlements that failed (see redo.go)
	live         liveWorker   // from Open: its place among the live workers of its test clock
	takeover     *takeover    // from Open: its takeover of rows whose lease passed, in lots (nil: a FIFO queue)
	unlistenFunc func()       // stops listening for notifications (nil: the queue polls only)
	idle         idleState    // Fetch's own: what it knows of the queue being idle
	origin       time.Time    // under a test clock: its time when it met the database's (see testSkew)
	attemptMax   int64        // from Open: the attempt column's largest value (see attempt.go)
	maxOnce      sync.Once    // logs the first row claimed at attemptMax (see atMax)
	warnOnce     sync.Once
	limitOps     atomic.Uint64 // flow limit takes, toward the next cleanup (see flowCleanupEvery)
	markOps      atomic.Uint64 // acks that wrote Dedupe marks, toward the next cleanup
}

// newTransport returns the transport of q for the mount of env.
func newTransport(q *Queue, env source.Env) *transport {
	t := &transport{env: env, q: q}
	if q.ib != nil {
		t.d, _ = q.ib.dialect.(dialect)
	}
	if env.TestClock != nil {
		t.origin = testOrigin(env.TestClock)
	}
	return t
}

func (t *transport) Info() source.Info {
	info := source.Info{
		Batch: t.q.cfg.batch,
		// Moves writes a batch of put-backs, parks or dead letters in one statement.
		BatchesMoves: true,
		// The longest one Fetch waits for a due row (it also bounds how long a shutdown
		// waits for a Fetch in progress).
		Block: min(time.Second, 2*t.q.cfg.poll),
		Caps:  source.Caps{Parks: true, Releases: true, RetriesInPlace: true, RetryWithoutCap: source.ActionPutBack, WritesErrors: true},
		Group: t.q.group,
		Kind:  source.KindTable,
	}
	if t.q.ib != nil {
		info.Key = t.q.ib.table.Name
		// A claim of a row whose lease passed adds one attempt (see claimCount).
		info.Caps.CountsUnsettled = t.q.ib.table.Attempt != ""
		// A reply is a row of another group of the table, or of another table (see reply).
		info.Caps.Replies = true
	}
	return info
}

func (t *transport) Validate(p source.Policy) []error {
	q := t.q
	if q.ib == nil || q.ib.db == nil {
		return []error{errors.New("inbox: the queue is not bound to a table (nil Inbox or *sql.DB): it can neither claim nor take MaxAttempts/DeadLetter")}
	}
	var errs []error
	if t.d == nil {
		errs = append(errs, errors.New("inbox: no dialect: use inbox.SQLite, inbox.Postgres or inbox.MySQL"))
	}
	tb := q.ib.table
	errs = append(errs, tb.problems()...)
	switch {
	case tb.Group == "" && q.group != "":
		errs = append(errs, fmt.Errorf("inbox: table %s has no group column, so the queue must read the whole table: Queue(\"\"), not Queue(%q)", tb.Name, q.group))
	case tb.Group != "" && q.group == "":
		errs = append(errs, fmt.Errorf("inbox: table %s has a group column (%s): name the group the queue reads", tb.Name, tb.Group))
	}
	if p.Delay != nil && p.Delay.Durable() {
		errs = append(errs, fmt.Errorf("inbox: DelayIn(%T): an inbox keeps RetryAfter delays in its own retry_after column; remove the option", p.Delay))
	}
	if p.MaxAttempts > 0 && p.DeadLetter == "" {
		errs = append(errs, fmt.Errorf("inbox: MaxAttempts(%d) without DeadLetter: an inbox declares both (the row at the cap moves to the dead letter)", p.MaxAttempts))
	}
	if p.DeadLetter != "" && p.MaxAttempts == 0 {
		errs = append(errs, fmt.Errorf("inbox: DeadLetter(%q) without MaxAttempts: an inbox declares both", p.DeadLetter))
	}
	if p.MaxAttempts > 0 && tb.Attempt == "" {
		errs = append(errs, fmt.Errorf("inbox: MaxAttempts(%d) on table %s, which has no attempt column: the cap cannot be counted", p.MaxAttempts, tb.Name))
	}
	if p.DeadLetter != "" {
		if tb.Group != "" && p.DeadLetter == q.group {
			errs = append(errs, fmt.Errorf("inbox: DeadLetter(%q) is the group the queue reads: dead rows would be read again", p.DeadLetter))
		}
		if tb.Group == "" && p.DeadLetter == tb.Name {
			errs = append(errs, fmt.Errorf("inbox: DeadLetter(%q) is the table the queue reads: dead rows would be read again", p.DeadLetter))
		}
		if tb.Group == "" && strings.ContainsAny(p.DeadLetter, "\"`'\x00;") {
			errs = append(errs, fmt.Errorf("inbox: DeadLetter(%q): the table name contains a quote or ';'", p.DeadLetter))
		}
	}
	errs = append(errs, t.replyProblems(p)...)
	errs = append(errs, t.flowProblems(p)...)
	if q.cfg.batch < 1 {
		errs = append(errs, fmt.Errorf("inbox: Batch(%d): must be at least 1", q.cfg.batch))
	}
	if q.cfg.lease < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("inbox: Lease(%s): must be at least 10ms", q.cfg.lease))
	}
	if q.cfg.poll <= 0 {
		errs = append(errs, fmt.Errorf("inbox: Poll(%s): must be positive", q.cfg.poll))
	}
	return errs
}

// deadTable is the dead-letter table of a table without a group column.
func (t *transport) deadTable() string {
	if t.q.ib.table.Group != "" || t.q.cfg.deadLetter != nil {
		return ""
	}
	return t.env.Policy.DeadLetter
}

// Open checks the table (and the dead-letter and reply tables) and starts the queue's
// heartbeat. An error that waiting may fix is returned as an openError, which App.Run
// logs before it opens the mount again after a backoff; any other stops Run at once.
func (t *transport) Open(ctx context.Context) error {
	err := t.open(ctx)
	if err != nil && (t.d.unready(err) || t.d.retryable(err)) {
		return openError{err}
	}
	return err
}

// openError is an error of Open that waiting may fix: a connection that failed or was
// killed while Open read the table, a server starting, shutting down or out of
// connections, a database locked. It matches driver.ErrBadConn ("retry on a new
// connection"), which App.Run takes for a server it could not reach.
type openError struct{ err error }

func (e openError) Error() string        { return e.err.Error() }
func (e openError) Is(target error) bool { return target == driver.ErrBadConn }
func (e openError) Unwrap() error        { return e.err }

func (t *transport) open(ctx context.Context) error {
	tb := t.q.ib.table
	spec := queueSpec{deadTable: t.deadTable(), fifo: t.q.cfg.fifo}
	t.build(spec)

	var errs []error
	want := tb.columnNames()
	if err := t.checkColumns(ctx, tb.Name, want); err != nil {
		errs = append(errs, err)
	}
	if dt := t.deadTable(); dt != "" {
		if err := t.checkColumns(ctx, dt, want); err != nil {
			errs = append(errs, err)
		}
	}
	if rt := t.replyTable(); rt != "" {
		t.buildReplyStatements(rt)
		if err := t.checkColumns(ctx, rt, want); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = t.d.checkTimes(ctx, t.q.ib.db, tb)
	}
	if err := t.d.checkServer(ctx, t.q.ib.db); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, t.checkFlowTables(ctx, t.env.Policy)...)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	attemptMax, err := t.readAttemptMax(ctx)
	if err != nil {
		return err
	}
	t.attemptMax, spec.attemptMax = attemptMax, attemptMax
	t.build(spec)
	if tb.RetryAfter != "" && !t.q.cfg.fifo && t.dueIndexed(ctx) {
		spec.dueOrder = true
		t.build(spec)
	}
	if !t.q.cfg.fifo {
		t.takeover = newTakeover(1, takeoverPoll(t.q.cfg.poll, t.q.cfg.lease), t.env.TestClock != nil, func() { t.q.ib.notify(t.q.group) })
	}
	t.leases = newLeaseKeeper(t.env, t.q.cfg.lease, t.extendLeases)
	t.leases.start(ctx)
	t.redo = newRedoer(t.env, t.reapply)
	t.redo.start(ctx)
	t.live = newLiveWorker(t.env, t.q.ib.db, tb.Name, t.leases)
	t.live.join()
	if _, pg := t.d.(postgres); pg && !t.q.cfg.pollOnly {
		t.unlistenFunc = t.q.ib.listen(ctx, t.env)
	}
	return nil
}

// build compiles the queue's statements.
func (t *transport) build(spec queueSpec) {
	tb := t.q.ib.table
	t.s = t.d.build(tb, spec)
	t.s.group = t.q.group
	h := fnv.New64a()
	_, _ = h.Write([]byte("settle-inbox\x00" + tb.Name + "\x00" + t.q.group))
	t.s.lockKey = fmt.Sprintf("settle:%x", h.Sum64())
}

// dueIndexed reports whether the table has an index led by (group, retry_after), with
// which a plain queue claims the earliest due rows first (see claimOrder); without one
// it warns once that claims take rows in id order.
func (t *transport) dueIndexed(ctx context.Context) bool {
	tb := t.q.ib.table
	indexes, err := t.d.indexes(ctx, t.q.ib.db, tb.Name)
	if err == nil && tb.dueIndex(indexes) {
		return true
	}
	lead := tb.RetryAfter
	if tb.Group != "" {
		lead = tb.Group + ", " + tb.RetryAfter
	}
	attrs := []any{slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, tb.Name), slog.String("index", "("+lead+", "+tb.ID+")")}
	if err != nil {
		attrs = append(attrs, slog.Any(source.AttrError, err))
	}
	t.env.Logger.WarnContext(ctx, "settle: inbox: the table has no index led by its group and retry_after columns: claims take rows in id order, reading past the rows parked for later; add the index to claim the earliest due first without reading them (see the README's schema)", attrs...)
	return false
}

// checkColumns returns one error naming every column of want that table lacks.
func (t *transport) checkColumns(ctx context.Context, table string, want []string) error {
	return checkColumns(ctx, t.q.ib.db, t.s, table, want)
}

// skew is how far the statements move the database's clock: nothing in production, how
// far the test clock has moved under a test (see testSkew).
func (t *transport) skew() time.Duration {
	if t.env.TestClock == nil {
		return 0
	}
	return testSkew(t.env.TestClock, t.origin)
}

// extendLeases moves the leases of hs forward in one statement (see
// leaseKeeper.extendFunc).
func (t *transport) extendLeases(ctx context.Context, hs []*held) (map[string]any, time.Duration, error) {
	skew := t.skew()
	vals := map[string]any{"lease": t.d.durArg(t.q.cfg.lease), "skew": t.d.skewArg(skew)}
	bindFences(vals, hs)
	db := t.q.ib.db
	leases, err := retry(ctx, t.d, db, func() (map[string]any, error) { return t.d.extendMany(ctx, db, t.s, len(hs), vals) })
	return leases, skew, err
}

// fenced applies one fenced write to d's row and forgets the row; a write that failed
// is handed to redo, when given, its row kept held (see keepForRedo).
func (t *transport) fenced(ctx context.Context, d *source.Delivery, what string, redo func(), write func(h *held) (bool, error)) error {
	h, ok := d.Raw.(*held)
	if !ok {
		return fmt.Errorf("inbox: %s: delivery %s is not an inbox row", what, d.ID)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	db := t.q.ib.db
	ok, err := retry(ctx, t.d, db, func() (bool, error) { return write(h) })
	if err != nil && redo != nil && t.keepForRedo(ctx, h, err) {
		redo()
		return fmt.Errorf("inbox: table %s: %s row %s (%w): %w", t.q.ib.table.Name, what, d.ID, source.ErrKeptForRedo, err)
	}
	t.forget(h)
	if err != nil {
		return fmt.Errorf("inbox: table %s: %s row %s: %w", t.q.ib.table.Name, what, d.ID, err)
	}
	if !ok {
		return fmt.Errorf("inbox: table %s: %s row %s: %w", t.q.ib.table.Name, what, d.ID, ErrLeaseLost)
	}
	return nil
}

// forget marks h settled and drops it from the rows held; h.mu is held.
func (t *transport) forget(h *held) {
	h.settled = true
	t.leases.forget(h)
}

// Ack deletes the rows (Ack and Drop), each fenced by its lease, in batches.
func (t *transport) Ack(ctx context.Context, ds []*source.Delivery) error {
	var errs []error
	for len(ds) > 0 {
		n := min(len(ds), maxBatchRows)
		if err := t.ackBatch(ctx, ds[:n]); err != nil {
			errs = append(errs, err)
		}
		ds = ds[n:]
	}
	return errors.Join(errs...)
}

func (t *transport) ackBatch(ctx context.Context, ds []*source.Delivery) error {
	hs := make([]*held, 0, len(ds))
	for _, d := range ds {
		h, ok := d.Raw.(*held)
		if !ok {
			return fmt.Errorf("inbox: ack: delivery %s is not an inbox row", d.ID)
		}
		h.mu.Lock()
		hs = append(hs, h)
	}
	var kept map[*held]bool // rows whose failed delete the redoer applies again
	defer func() {
		for _, h := range hs {
			if !kept[h] {
				t.forget(h)
			}
			h.mu.Unlock()
		}
	}()
	n, err := t.ackRows(ctx, hs, t.dedupKeys(ds))
	if err != nil {
		kept = map[*held]bool{}
		for i, h := range hs {
			if t.keepForRedo(ctx, h, err) {
				kept[h] = true
				t.redo.ack(ds[i])
			}
		}
		return fmt.Errorf("inbox: table %s: delete %d rows: %w", t.q.ib.table.Name, len(hs), err)
	}
	if int(n) != len(hs) {
		return fmt.Errorf("inbox: table %s: deleted %d of %d rows: %w", t.q.ib.table.Name, n, len(hs), ErrLeaseLost)
	}
	return nil
}

// Moves applies the moves in as few statements as it can: the put-backs (Retry, and a
// retry under a cap, which a table writes in place), the parks (RetryAfter), the
// releases and the moves to a dead-letter group each go in one UPDATE per up to
// maxBatchRows rows, each row fenced by its own lease; a move into a dead-letter table
// or through an OnDeadLetter hook is one transaction per row, a few at a time. The
// kinds are written concurrently, and each move is answered on its own.
func (t *transport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, len(ms))
	var puts, parks, releases, singles []int
	deadGroups := map[string][]int{}
	for i, m := range ms {
		switch m.Action {
		case source.ActionPutBack, source.ActionCopy:
			// A table has no copy: a retry under a cap is the same in-place statement as a
			// put-back, the attempt column carrying the count a copy's header carries
			// elsewhere.
			puts = append(puts, i)
		case source.ActionPark:
			if t.s.parkN == nil {
				t.warnOnce.Do(func() {
					t.env.Logger.WarnContext(ctx, "settle: inbox: the table has no retry_after column: RetryAfter returns the row at once (logged once per mount)",
						slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, t.q.ib.table.Name), slog.Duration(source.AttrDelay, m.Delay))
				})
				puts = append(puts, i)
				continue
			}
			parks = append(parks, i)
		case source.ActionRelease:
			releases = append(releases, i)
		case source.ActionDeadLetter:
			if t.q.cfg.deadLetter == nil && t.q.ib.table.Group != "" {
				deadGroups[m.Dest] = append(deadGroups[m.Dest], i)
				continue
			}
			singles = append(singles, i)
		case source.ActionReply:
			singles = append(singles, i) // a transaction of its own (see reply)
		default:
			errs[i] = source.UnsupportedMove(source.KindTable, m)
		}
	}
	var wg sync.WaitGroup
	// batch writes the moves at idx in the background and wakes the idle queues of the
	// group the rows are now in: a row put back or released is due at once, and a
	// parked one may come due before anything their Fetch waits for (see nextDue).
	batch := func(idx []int, what string, build func(n int) stmt, args func(m source.Move, i int, args map[string]any), group string) {
		if len(idx) > 0 {
			wg.Go(func() {
				if t.writeBatch(ctx, ms, idx, errs, what, build, args) {
					t.q.ib.notify(group)
				}
			})
		}
	}
	batch(puts, "put back", t.s.putBackN, withFailure, t.q.group)
	batch(parks, "retry after", t.s.parkN, func(m source.Move, i int, args map[string]any) {
		args[fmt.Sprintf("delay%d", i)] = t.d.durArg(m.Delay)
		withFailure(m, i, args)
	}, t.q.group)
	if len(releases) > 0 {
		// Rows handed back at a graceful stop are for the other processes: tell them.
		wg.Go(func() {
			if t.writeBatch(ctx, ms, releases, errs, "release", t.s.releaseN, nil) {
				t.q.ib.announce(ctx, t.s, t.q.group)
			}
		})
	}
	for dest, idx := range deadGroups {
		batch(idx, "dead letter", t.s.deadGroupN, func(m source.Move, i int, args map[string]any) {
			args["dest"] = dest
			args[fmt.Sprintf("attempt%d", i)] = int64(m.Delivery.Attempt)
			withFailure(m, i, args)
		}, dest)
	}
	if len(singles) > 0 {
		wg.Go(func() {
			var each sync.WaitGroup
			sem := make(chan struct{}, maxSingleMoves)
			for _, i := range singles {
				sem <- struct{}{}
				each.Go(func() {
					defer func() { <-sem }()
					if ms[i].Action == source.ActionReply {
						errs[i] = t.reply(ctx, ms[i])
						return
					}
					errs[i] = t.deadLetter(ctx, ms[i].Delivery, ms[i].Dest, ms[i].Headers, ms[i].Err)
				})
			}
			each.Wait()
		})
	}
	wg.Wait()
	return errs
}

// withFailure adds what move m of a failed attempt, the statement's i-th row, writes
// besides its action to args: the last error and the headers the row keeps (see
// headersArg). A table without a last-error or a headers column ignores them (see
// batched).
func withFailure(m source.Move, i int, args map[string]any) {
	args[fmt.Sprintf("error%d", i)] = lastError(m.Err)
	args[fmt.Sprintf("headers%d", i)] = headersArg(m)
}

// lastError is an error's text as a last-error column holds it: valid UTF-8 (a text
// column may refuse anything else), NULL for none.
func lastError(text string) any {
	if text == "" {
		return nil
	}
	return strings.ToValidUTF8(text, "\uFFFD")
}

// maxSingleMoves bounds the moves of one Moves call written one row at a time that run
// at once.
const maxSingleMoves = 8

// writeBatch applies one batched, fenced write (build: see batched) to the moves of ms
// at idx, at most maxBatchRows rows a statement, sets each one's error in errs (nil:
// applied; ErrLeaseLost: its lease was taken over, nothing changed) and forgets their
// rows. args adds a move's own arguments (those of the statement's i-th row). It
// reports whether any row was written.
func (t *transport) writeBatch(ctx context.Context, ms []source.Move, idx []int, errs []error, what string, build func(n int) stmt, args func(m source.Move, i int, args map[string]any)) bool {
	table := t.q.ib.table.Name
	var hs []*held
	move := make(map[*held]int, len(idx)) // each row's move, in ms
	for _, i := range idx {
		d := ms[i].Delivery
		h, ok := d.Raw.(*held)
		if !ok {
			errs[i] = fmt.Errorf("inbox: %s: delivery %s is not an inbox row", what, d.ID)
			continue
		}
		hs, move[h] = append(hs, h), i
	}
	wrote := false
	for len(hs) > 0 {
		var batch []*held
		batch, hs = nextBatch(hs)
		vals := map[string]any{"skew": t.d.skewArg(t.skew())}
		for k, h := range batch {
			h.mu.Lock()
			if args != nil {
				args(ms[move[h]], k, vals)
			}
		}
		bindFences(vals, batch)
		st := build(len(batch))
		db := t.q.ib.db
		ids, err := retry(ctx, t.d, db, func() ([]any, error) { return t.d.fencedMany(ctx, db, t.s, st, len(batch), vals) })
		changed := make(map[string]bool, len(ids))
		for _, id := range ids {
			changed[idString(id)] = true
		}
		for _, h := range batch {
			i := move[h]
			switch {
			case err != nil && t.keepForRedo(ctx, h, err):
				errs[i] = fmt.Errorf("inbox: table %s: %s row %s (%w): %w", table, what, ms[i].Delivery.ID, source.ErrKeptForRedo, err)
				t.redo.move(ms[i])
				h.mu.Unlock()
				continue
			case err != nil:
				errs[i] = fmt.Errorf("inbox: table %s: %s row %s: %w", table, what, ms[i].Delivery.ID, err)
			case !changed[idString(h.id)]:
				errs[i] = fmt.Errorf("inbox: table %s: %s row %s: %w", table, what, ms[i].Delivery.ID, ErrLeaseLost)
			default:
				wrote = true
			}
			t.forget(h)
			h.mu.Unlock()
		}
	}
	return wrote
}

// deadLetter moves the row at the cap into the dead-letter table in one transaction, or
// through the user's OnDeadLetter hook (a move to a dead-letter group is batched: see
// Moves). The dead row's attempt is d.Attempt, the attempts the engine
// counted: the cap, also for a row whose last claim counted one more attempt because
// the delivery at the cap crashed its worker (the engine dead-letters such a row without
// running its handler).
func (t *transport) deadLetter(ctx context.Context, d *source.Delivery, dest string, headers map[string]string, errText string) error {
	db := t.q.ib.db
	switch {
	case t.q.cfg.deadLetter != nil:
		return t.fenced(ctx, d, "dead letter (hook)", nil, func(h *held) (bool, error) {
			return t.deadLetterHook(ctx, h, d.Attempt, dest, headers)
		})
	default:
		redo := func() {
			t.redo.move(source.Move{Action: source.ActionDeadLetter, Delivery: d, Dest: dest, Err: errText, Headers: headers})
		}
		mv := source.Move{Action: source.ActionDeadLetter, Delivery: d, Headers: headers}
		return t.fenced(ctx, d, "dead letter", redo, func(h *held) (bool, error) {
			vals := map[string]any{"id": h.id, "token": h.token, "attempt": int64(d.Attempt), "error": lastError(errText), "headers": headersArg(mv), "skew": t.d.skewArg(t.skew())}
			return t.d.moveToTable(ctx, db, t.s, vals)
		})
	}
}

// deadLetterHook runs the user's move in a transaction holding the leased row; attempt
// is the attempts the engine counted, headers the dead letter's (see deadRowHeaders).
func (t *transport) deadLetterHook(ctx context.Context, h *held, attempt int, dest string, headers map[string]string) (bool, error) {
	return t.inLeasedTx(ctx, h, func(tx txn) (bool, error) {
		row := DeadRow{Attempt: attempt, Dest: dest, Err: headers[settle.HeaderDeadError], Group: t.q.group, Headers: deadRowHeaders(h.headers, headers), ID: h.id, Payload: h.payload, Table: t.q.ib.table.Name}
		if err := t.q.cfg.deadLetter(ctx, tx.(Tx), row); err != nil {
			return false, fmt.Errorf("OnDeadLetter hook: %w", err)
		}
		return true, nil
	})
}

// inLeasedTx runs write in a transaction that first locks h's row by its lease, and
// commits it when write reports true. It reports false, writing nothing, when the lease
// was taken over (or write said so).
func (t *transport) inLeasedTx(ctx context.Context, h *held, write func(tx txn) (bool, error)) (bool, error) {
	tx, err := t.d.begin(ctx, t.q.ib.db)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	ids, err := queryIDs(ctx, tx, t.s.lockLeased.text, t.s.lockLeased.bind(map[string]any{"id": h.id, "token": h.token}))
	if err != nil || len(ids) == 0 {
		return false, err
	}
	if ok, err := write(tx); err != nil || !ok {
		return false, err
	}
	return true, tx.Commit()
}

func (t *transport) Close(context.Context) error {
	if t.redo != nil {
		t.redo.close()
	}
	t.live.leave()
	if t.unlistenFunc != nil {
		t.unlistenFunc()
	}
	if t.leases != nil {
		t.leases.close()
	}
	t.takeover.reset()
	return nil
}
