package settle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// StreamSource reads a Redis stream through a consumer group. Make one with Stream.
type StreamSource struct {
	cfg   streamConfig
	group string
	key   string
	rdb   redis.UniversalClient
}

var _ Source = (*StreamSource)(nil)

// Stream returns a source that reads the stream key through the consumer group group,
// creating both if missing (XGROUP CREATE … MKSTREAM; an existing group is used as it
// is). Reads are XREADGROUP batches; on start a consumer first re-reads its own pending
// entries (those delivered to its consumer name but never settled) before new ones.
//
// Retry without an attempts cap appends a copy of the entry (retry count + 1) and
// acknowledges the original in one Lua script; so does every retry under a cap. A dead
// letter goes to a stream, written and acknowledged in one Lua script (if the write
// fails, nothing is written and the original stays pending).
func Stream(rdb redis.UniversalClient, key, group string, opts ...StreamOption) *StreamSource {
	cfg := streamConfig{batch: DefaultBatch, block: DefaultBlock, startID: "0"}
	for _, o := range opts {
		if o != nil {
			o.applyStream(&cfg)
		}
	}
	return &StreamSource{cfg: cfg, group: group, key: key, rdb: rdb}
}

// Transport is for settle's own use and may change in any release.
func (s *StreamSource) Transport(env source.Env) source.Transport {
	consumer := s.cfg.consumer
	if consumer == "" {
		consumer = defaultConsumerName()
	}
	return &streamTransport{
		claim:    s.cfg.reclaimer(),
		consumer: consumer,
		cursor:   "0",
		env:      env,
		inflight: map[string]struct{}{},
		rescan:   true,
		src:      s,
	}
}

// defaultConsumerName is unique per process: host, pid and a random suffix.
func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "settle"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// streamTransport is one mount's consumer on a stream.
type streamTransport struct {
	claim       *claimer // takes idle pending entries over (Reclaim, ClaimingStream); nil: none
	consumer    string
	env         source.Env
	garbledOnce sync.Once
	src         *StreamSource

	mu       sync.Mutex
	cursor   string              // where the next own-pending read starts
	fence    rereadFence         // entries settled while an own-pending re-read was out
	inflight map[string]struct{} // delivered here and not yet settled
	rescan   bool                // re-read own pending entries before new ones
}

func (t *streamTransport) Info() source.Info {
	return source.Info{
		Batch:        t.src.cfg.batch,
		BatchesMoves: true,
		Block:        t.src.cfg.block,
		// A re-read or claimed entry's attempt counts its unsettled deliveries.
		Caps:  source.Caps{CountsUnsettled: true, Parks: t.parksDurably(), RetryWithoutCap: source.ActionCopy},
		Group: t.src.group,
		Key:   t.src.key,
		Kind:  source.KindStream,
	}
}

func (t *streamTransport) Validate(p source.Policy) []error {
	var errs []error
	s := t.src
	if s.rdb == nil {
		errs = append(errs, errors.New("stream: redis client is nil"))
	}
	if s.key == "" {
		errs = append(errs, errors.New("stream: key is empty"))
	}
	if s.group == "" {
		errs = append(errs, errors.New("stream: group is empty"))
	}
	if s.cfg.batch < 1 {
		errs = append(errs, fmt.Errorf("Batch(%d): must be at least 1", s.cfg.batch))
	}
	if s.cfg.block <= 0 {
		errs = append(errs, fmt.Errorf("Block(%s): must be positive", s.cfg.block))
	}
	errs = append(errs, t.claim.validate()...)
	if p.DeadLetter != "" && p.DeadLetter == s.key {
		errs = append(errs, fmt.Errorf("DeadLetter(%q) is the stream the mount reads: dead letters would be read again", p.DeadLetter))
	}
	errs = append(errs, t.validateDelay(p)...)
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster && p.DeadLetter != "" {
		if err := keys.SameSlot(s.key, p.DeadLetter); err != nil {
			errs = append(errs, fmt.Errorf("stream and DeadLetter must share a cluster slot (dead-lettering is one script): %w", err))
		}
	}
	return errs
}

func (t *streamTransport) Open(ctx context.Context) error {
	if err := t.createGroup(ctx); err != nil {
		return err
	}
	t.claim.start(ctx, t)
	return nil
}

func (t *streamTransport) createGroup(ctx context.Context) error {
	s := t.src
	err := s.rdb.XGroupCreateMkStream(ctx, s.key, s.group, s.cfg.startID).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("stream %q: create group %q: %w", s.key, s.group, err)
	}
	return nil
}

func (t *streamTransport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	wait, err := t.sweepDelays(ctx, wait)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	rescan := t.rescan
	t.mu.Unlock()
	if rescan && !t.claim.leavesRetries() {
		ds, err := t.readOwnPending(ctx, max)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
	}
	if t.claim != nil {
		ds, err := t.claim.fetch(ctx, t, max)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		wait = t.claim.bound(t, wait)
	}
	return t.read(ctx, ">", max, wait)
}

// readOwnPending re-reads entries delivered to this consumer and not settled (after a
// restart with a stable consumer name, a dropped connection or a failed settlement),
// skipping those in flight here.
func (t *streamTransport) readOwnPending(ctx context.Context, max int) ([]*source.Delivery, error) {
	for {
		t.mu.Lock()
		cursor := t.cursor
		t.fence.begin()
		t.mu.Unlock()
		msgs, err := t.xread(ctx, cursor, max, -1)
		t.mu.Lock()
		unsettled := t.fence.end(msgs)
		if err != nil {
			t.mu.Unlock()
			return nil, err
		}
		if len(msgs) == 0 {
			t.rescan, t.cursor = false, "0"
			t.mu.Unlock()
			return nil, nil
		}
		t.cursor = msgs[len(msgs)-1].ID
		t.mu.Unlock()
		if ds := t.deliveries(ctx, unsettled); len(ds) > 0 {
			t.countDeliveries(ctx, ds, len(msgs))
			return ds, nil
		}
	}
}

// read reads entries after id (">" for new ones), blocking up to wait (-1: not at all).
//
// Redis times a block out only on its cron tick (see minServerBlock), so a wait that
// something shortened below the mount's Block (a delay coming due, a claim coming idle)
// blocks in Redis one tick less, and a wait shorter than a tick reads without blocking,
// then waits on the client: a due delay is swept within milliseconds of due rather than
// up to a tick late.
func (t *streamTransport) read(ctx context.Context, id string, max int, wait time.Duration) ([]*source.Delivery, error) {
	block := wait
	if wait >= 0 && wait < t.src.cfg.block {
		block = wait - minServerBlock // Redis may answer up to a tick late: wake a tick early
	}
	short := wait >= 0 && block < minServerBlock
	if short {
		block = -1
	}
	msgs, err := t.xread(ctx, id, max, block)
	if err != nil {
		return nil, err
	}
	if short && len(msgs) == 0 {
		pollWait(ctx, min(wait, minServerBlock))
		return nil, nil
	}
	return t.deliveries(ctx, msgs), nil
}

func (t *streamTransport) xread(ctx context.Context, id string, max int, wait time.Duration) ([]redis.XMessage, error) {
	s := t.src
	args := &redis.XReadGroupArgs{
		Block:    wait,
		Consumer: t.consumer,
		Count:    int64(max),
		Group:    s.group,
		Streams:  []string{s.key, id},
	}
	var cmd *redis.XStreamSliceCmd
	if id == ">" {
		// Not retried on a new connection: a lost reply must fail the read, so that the
		// entries it delivered are re-read from the pending list (see xreadOnce).
		cmd = xreadGroupOnce(ctx, s.rdb, args)
	} else {
		cmd = s.rdb.XReadGroup(ctx, args) // a re-read of own pending entries is safe to retry
	}
	res, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			// The stream or its group was deleted under us: make them again.
			if cerr := t.createGroup(ctx); cerr != nil {
				return nil, errors.Join(fmt.Errorf("stream %q: xreadgroup: %w", s.key, err), cerr)
			}
			t.env.Logger.WarnContext(ctx, "settle: consumer group was missing; created it again",
				slog.String(attrMount, t.env.Mount), slog.String(attrKey, s.key), slog.String(attrGroup, s.group))
			return nil, nil
		}
		t.markRescan()
		return nil, fmt.Errorf("stream %q: xreadgroup: %w", s.key, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	msgs := res[0].Messages
	if len(msgs) > max {
		// A re-read of pending entries on miniredis ignores COUNT; never hand the engine
		// more than it has slots for (the rest stay pending and are read next).
		msgs = msgs[:max]
	}
	return msgs, nil
}

// deliveries turns entries into deliveries, skipping those already in flight here and
// acknowledging pending entries whose body was deleted from the stream.
func (t *streamTransport) deliveries(ctx context.Context, msgs []redis.XMessage) []*source.Delivery {
	ds := make([]*source.Delivery, 0, len(msgs))
	all := make([]source.Delivery, len(msgs)) // one allocation for the batch, not one each
	var gone []string
	t.mu.Lock()
	for i, msg := range msgs {
		if _, busy := t.inflight[msg.ID]; busy {
			continue
		}
		if msg.Values == nil {
			gone = append(gone, msg.ID)
			continue
		}
		t.inflight[msg.ID] = struct{}{}
		all[i] = t.delivery(ctx, msg)
		ds = append(ds, &all[i])
	}
	t.mu.Unlock()
	if len(gone) > 0 {
		t.env.Logger.WarnContext(ctx, "settle: pending entries were deleted from the stream before they were settled; acknowledging them",
			slog.String(attrMount, t.env.Mount), slog.String(attrKey, t.src.key), slog.Any("ids", gone))
		if err := t.src.rdb.XAck(ctx, t.src.key, t.src.group, gone...).Err(); err != nil {
			t.env.Logger.ErrorContext(ctx, "settle: xack of deleted entries failed", slog.Any(attrError, err))
		}
	}
	return ds
}

func (t *streamTransport) delivery(ctx context.Context, msg redis.XMessage) source.Delivery {
	payload, ok, headers := wire.FromStream(msg.Values)
	rc, valid := parseRetryCount(headers)
	if !valid {
		t.garbledOnce.Do(func() {
			t.env.Logger.WarnContext(ctx, "settle: garbled retry-count header read as 0 (logged once per mount)",
				slog.String(attrMount, t.env.Mount), slog.String(attrMsgID, msg.ID), slog.String(HeaderRetryCount, headers[HeaderRetryCount]))
		})
	}
	return source.Delivery{
		Attempt:    rc + 1,
		HasPayload: ok,
		Headers:    headers,
		ID:         msg.ID,
		Key:        t.src.key,
		Payload:    payload,
		RetryCount: rc,
	}
}

// settledIDs forgets deliveries that were settled; on failure it asks for a re-read of
// own pending entries so that they are delivered again.
func (t *streamTransport) settledIDs(err error, ds ...*source.Delivery) {
	t.mu.Lock()
	for _, d := range ds {
		delete(t.inflight, d.ID)
		if err == nil || errors.Is(err, script.ErrNotOwner) {
			t.fence.note(d.ID) // no longer ours to deliver
		}
	}
	// A failed write leaves the entry pending here: read it again. An entry another
	// consumer took over (script.ErrNotOwner) is not ours to read again.
	if err != nil && !errors.Is(err, script.ErrNotOwner) {
		t.rescan, t.cursor = true, "0"
	}
	t.mu.Unlock()
}

func (t *streamTransport) markRescan() {
	t.mu.Lock()
	t.rescan, t.cursor = true, "0"
	t.mu.Unlock()
}

func (t *streamTransport) Ack(ctx context.Context, ds []*source.Delivery) error {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	err := t.src.rdb.XAck(ctx, t.src.key, t.src.group, ids...).Err()
	if err != nil {
		err = fmt.Errorf("stream %q: xack: %w", t.src.key, err)
	}
	t.settledIDs(err, ds...)
	return err
}

func (t *streamTransport) Close(context.Context) error {
	t.claim.close()
	return nil
}
