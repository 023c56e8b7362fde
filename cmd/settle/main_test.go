package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

// bin is the settle binary, built once by TestMain into a temporary directory.
var bin string

// TestMain builds the command (go build, as an operator would) and runs the tests on
// the binary.
func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "settle-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "settle")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// waitBound bounds every wait of these tests; nothing is slept.
const waitBound = 15 * time.Second

// testBundle is one test's world: a Redis (miniredis, or the real one SETTLE_REDIS_URL
// names, under a key prefix of the test's own), the payments stream and its dead-letter
// stream.
type testBundle struct {
	ctx    context.Context
	dlq    string
	group  string
	in     string
	prefix string
	rdb    *redis.Client
	// streamLen is the stream's length after deadLetters: the payments and the retry
	// copies written on the way to the cap.
	streamLen int64
	url       string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	tb := &testBundle{ctx: context.Background(), group: "payments", prefix: "{cli-" + hex.EncodeToString(b[:]) + "}:"}
	tb.in, tb.dlq = tb.key("payments"), tb.key("payments.dlq")
	if url := os.Getenv(EnvRedisURL); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvRedisURL, url, err)
		}
		tb.url, tb.rdb = url, redis.NewClient(opt)
		if err := tb.rdb.Ping(tb.ctx).Err(); err != nil {
			t.Fatalf("%s=%q: ping: %v", EnvRedisURL, url, err)
		}
		t.Cleanup(tb.deleteKeys(t))
		return tb
	}
	mr := miniredis.RunT(t)
	tb.url = "redis://" + mr.Addr() + "/0"
	tb.rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = tb.rdb.Close() })
	return tb
}

// deleteKeys deletes the test's keys (and only those: never FLUSHDB) and closes the
// client.
func (b *testBundle) deleteKeys(t *testing.T) func() {
	return func() {
		defer b.rdb.Close()
		var cursor uint64
		for {
			keys, next, err := b.rdb.Scan(b.ctx, cursor, b.prefix+"*", 1000).Result()
			if err != nil {
				t.Logf("scan %s*: %v", b.prefix, err)
				return
			}
			if len(keys) > 0 {
				if err := b.rdb.Del(b.ctx, keys...).Err(); err != nil {
					t.Logf("del: %v", err)
				}
			}
			if next == 0 {
				return
			}
			cursor = next
		}
	}
}

func (b *testBundle) key(name string) string { return b.prefix + name }

// payment is what the tests publish (msgpack, settle's default codec).
type payment struct {
	Card string `msgpack:"card"`
	ID   int    `msgpack:"id"`
}

// The payments published, by how the handler answers.
var (
	okCards          = []string{"1111", "1112", "1113"}
	unavailableCards = []string{"0001", "0002", "0003", "0004"}
	declinedCards    = []string{"4242", "4243", "5555"}
)

const (
	deadUnavailable = 4
	deadDeclined    = 3
	deadTotal       = deadUnavailable + deadDeclined
	published       = 10
)

// failing acks okCards and fails every delivery of the others, which reach the cap and
// are dead-lettered.
var failing = settle.Typed(func(_ context.Context, _ *settle.Message, p payment) error {
	for _, c := range unavailableCards {
		if p.Card == c {
			return errors.New("payment provider unavailable")
		}
	}
	for _, c := range declinedCards {
		if p.Card == c {
			return fmt.Errorf("card %s declined", p.Card)
		}
	}
	return nil
})

// deadLetters publishes the payments and runs an App with a Stream mount
// (MaxAttempts(2), DeadLetter, no backoff) until every payment is settled for good:
// the dead-letter stream then holds deadTotal dead letters, made the real way.
func (b *testBundle) deadLetters(t *testing.T) {
	t.Helper()
	pub := settle.NewPublisher(b.rdb)
	id := 0
	for _, cards := range [][]string{okCards, unavailableCards, declinedCards} {
		for _, c := range cards {
			id++
			if _, err := pub.Publish(b.ctx, b.in, payment{Card: c, ID: id}, settle.Headers(map[string]string{"region": "eu"})); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
	}
	runUntilSettled(t, published, func(app *settle.App) {
		app.Mount(settle.Stream(b.rdb, b.in, b.group, settle.Block(50*time.Millisecond), settle.Consumer("c1")), failing,
			settle.MaxAttempts(2), settle.DeadLetter(b.dlq), settle.Backoff(func(int, error) time.Duration { return 0 }))
	})
	if n := b.xlen(t, b.dlq); n != deadTotal {
		t.Fatalf("the dead-letter stream holds %d entries after the run, want %d", n, deadTotal)
	}
	b.streamLen = b.xlen(t, b.in)
}

func (b *testBundle) xlen(t *testing.T, key string) int64 {
	t.Helper()
	n, err := b.rdb.XLen(b.ctx, key).Result()
	if err != nil {
		t.Fatalf("xlen %s: %v", key, err)
	}
	return n
}

// result is one run of the binary.
type result struct {
	code   int
	stderr string
	stdout string
}

// settle runs the binary with args against the test's Redis, stdin given (nil: none,
// so not a terminal).
func (b *testBundle) settle(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	return runSettle(t, nil, stdin, append([]string{"--redis", b.url}, args...)...)
}

// runSettle runs the binary with args, the environment variables env added to the
// test's and stdin given (nil: none, so not a terminal).
func runSettle(t *testing.T, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stderr: errb.String(), stdout: out.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("settle %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ok runs the binary and fails t unless it exits 0.
func (b *testBundle) ok(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	r := b.settle(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("settle %s: exit %d, want 0; stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

// fails runs the binary, fails t unless it exits with code and says each of says on
// stderr, and returns the result.
func (b *testBundle) fails(t *testing.T, code int, says []string, args ...string) result {
	t.Helper()
	r := b.settle(t, nil, args...)
	if r.code != code {
		t.Fatalf("settle %s: exit %d, want %d; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	for _, s := range says {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("settle %s: stderr %q does not say %q", strings.Join(args, " "), r.stderr, s)
		}
	}
	return r
}

// decode decodes the one JSON object out holds into v.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
}

// lines decodes each line of out (one JSON object per line) with each.
func lines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var v T
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decode line %d of %q: %v", len(vs)+1, out, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// The JSON the tests read, as a script would: only the fields they need.
type (
	lsOut struct {
		ByError  []groupOut `json:"by_error"`
		ByReason []groupOut `json:"by_reason"`
		BySource []groupOut `json:"by_source"`
		Count    int        `json:"count"`
	}
	groupOut struct {
		Count int    `json:"count"`
		Value string `json:"value"`
	}
	entryOut struct {
		Error   string            `json:"error"`
		Headers map[string]string `json:"headers"`
		ID      string            `json:"id"`
		Source  string            `json:"source"`
	}
	replayOut struct {
		DryRun   bool     `json:"dry_run"`
		Gone     []string `json:"gone"`
		Replayed []struct {
			ID    string `json:"id"`
			NewID string `json:"new_id"`
			To    string `json:"to"`
		} `json:"replayed"`
	}
)

func counts(gs []groupOut) map[string]int {
	m := map[string]int{}
	for _, g := range gs {
		m[g.Value] = g.Count
	}
	return m
}

func TestDlqLsCountsTheDeadLettersExactly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	var s lsOut
	decode(t, b.ok(t, nil, "dlq", "ls", b.dlq, "--json").stdout, &s)
	if s.Count != deadTotal {
		t.Errorf("count %d, want %d", s.Count, deadTotal)
	}
	wantErr := map[string]int{"payment provider unavailable": deadUnavailable, "card <n> declined": deadDeclined}
	if got := counts(s.ByError); fmt.Sprint(got) != fmt.Sprint(wantErr) {
		t.Errorf("by_error %v, want %v", got, wantErr)
	}
	if got := counts(s.BySource); len(got) != 1 || got[b.in] != deadTotal {
		t.Errorf("by_source %v, want %s: %d", got, b.in, deadTotal)
	}
	if got := counts(s.ByReason); len(got) != 1 || got["max attempts reached (2 of 2)"] != deadTotal {
		t.Errorf("by_reason %v, want one reason for all %d", got, deadTotal)
	}

	entries := lines[entryOut](t, b.ok(t, nil, "dlq", "ls", b.dlq, "--entries", "--json").stdout)
	if len(entries) != deadTotal {
		t.Errorf("--entries: %d lines, want %d", len(entries), deadTotal)
	}
	var u lsOut
	decode(t, b.ok(t, nil, "dlq", "ls", b.dlq, "--reason", "unavailable", "--json").stdout, &u)
	if u.Count != deadUnavailable {
		t.Errorf("--reason unavailable: count %d, want %d", u.Count, deadUnavailable)
	}
	human := b.ok(t, nil, "dlq", "ls", b.dlq).stdout
	if !strings.Contains(human, fmt.Sprintf("%d dead letters", deadTotal)) || !strings.Contains(human, "card <n> declined") {
		t.Errorf("the table does not show the count and the errors:\n%s", human)
	}
}

func TestDlqReplayMovesExactlyTheMatchingDeadLettersOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	var r replayOut
	decode(t, b.ok(t, nil, "dlq", "replay", b.dlq, "--reason", "unavailable", "--yes", "--json").stdout, &r)
	if len(r.Replayed) != deadUnavailable || r.DryRun {
		t.Fatalf("replayed %d (dry run %v), want %d moved", len(r.Replayed), r.DryRun, deadUnavailable)
	}
	if n := b.xlen(t, b.dlq); n != deadDeclined {
		t.Errorf("the dead-letter stream holds %d, want %d (shrunk by %d)", n, deadDeclined, deadUnavailable)
	}
	if n := b.xlen(t, b.in); n != b.streamLen+deadUnavailable {
		t.Errorf("the stream holds %d, want %d", n, b.streamLen+deadUnavailable)
	}
	for _, m := range r.Replayed {
		if m.To != b.in {
			t.Errorf("%s replayed to %q, want %q", m.ID, m.To, b.in)
		}
		msgs, err := b.rdb.XRange(b.ctx, b.in, m.NewID, m.NewID).Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("xrange %s %s: %v, %d entries", b.in, m.NewID, err, len(msgs))
		}
		if _, ok := msgs[0].Values[settle.HeaderRetryCount]; ok {
			t.Errorf("replayed entry %s carries %s: %v", m.NewID, settle.HeaderRetryCount, msgs[0].Values)
		}
		if got := msgs[0].Values[admin.HeaderReplayedFrom]; got != b.dlq+"/"+m.ID {
			t.Errorf("replayed entry %s: %s = %v, want %s/%s", m.NewID, admin.HeaderReplayedFrom, got, b.dlq, m.ID)
		}
	}

	var again replayOut
	decode(t, b.ok(t, nil, "dlq", "replay", b.dlq, "--reason", "unavailable", "--yes", "--json").stdout, &again)
	if len(again.Replayed) != 0 {
		t.Errorf("the second replay moved %d, want 0", len(again.Replayed))
	}
	if n := b.xlen(t, b.dlq); n != deadDeclined {
		t.Errorf("after the second replay the dead-letter stream holds %d, want %d", n, deadDeclined)
	}
	if n := b.xlen(t, b.in); n != b.streamLen+deadUnavailable {
		t.Errorf("after the second replay the stream holds %d, want %d", n, b.streamLen+deadUnavailable)
	}
}

// unchanged fails t if the dead-letter stream or the stream has changed length.
func (b *testBundle) unchanged(t *testing.T) {
	t.Helper()
	if n := b.xlen(t, b.dlq); n != deadTotal {
		t.Errorf("the dead-letter stream holds %d, want %d (no change)", n, deadTotal)
	}
	if n := b.xlen(t, b.in); n != b.streamLen {
		t.Errorf("the stream holds %d, want %d (no change)", n, b.streamLen)
	}
}

func TestDlqReplayDryRunMovesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	var r replayOut
	decode(t, b.ok(t, nil, "dlq", "replay", b.dlq, "--reason", "unavailable", "--dry-run", "--json").stdout, &r)
	if !r.DryRun || len(r.Replayed) != deadUnavailable {
		t.Errorf("dry run reports %d (dry_run %v), want %d that would move", len(r.Replayed), r.DryRun, deadUnavailable)
	}
	b.unchanged(t)
}

func TestDlqReplayWithoutYesAndNoTerminalRefusesAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	b.fails(t, exitError, []string{"not a terminal", "--yes"}, "dlq", "replay", b.dlq, "--reason", "unavailable")
	b.fails(t, exitError, []string{"not a terminal", "--yes"}, "dlq", "purge", b.dlq)
	b.unchanged(t)
}

func TestDlqReplayWithABadRegexpFailsNamingItAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	b.fails(t, exitError, []string{`--reason "(unavailable"`, "does not compile"}, "dlq", "replay", b.dlq, "--reason", "(unavailable", "--yes")
	b.unchanged(t)
}

func TestBadInputFailsWithExitCode1NamingItAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	zset := b.key("delayed")
	if err := b.rdb.ZAdd(b.ctx, zset, redis.Z{Score: 1, Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	missing := b.key("missing.dlq")

	t.Run("MissingKey", func(t *testing.T) {
		b.fails(t, exitError, []string{missing, "does not exist"}, "dlq", "ls", missing)
		b.fails(t, exitError, []string{missing, "does not exist"}, "dlq", "replay", missing, "--yes")
	})
	t.Run("WrongType", func(t *testing.T) {
		b.fails(t, exitError, []string{zset, "zset"}, "dlq", "ls", zset)
		b.fails(t, exitError, []string{zset, "zset"}, "dlq", "import", zset, "--yes")
	})
	t.Run("IDNotFound", func(t *testing.T) {
		b.fails(t, exitError, []string{"1-1"}, "dlq", "replay", b.dlq, "--id", "1-1", "--yes")
		b.fails(t, exitError, []string{"1-1"}, "dlq", "show", b.dlq, "1-1")
	})
	t.Run("MissingDestination", func(t *testing.T) {
		to := b.key("nowhere")
		b.fails(t, exitError, []string{to}, "dlq", "replay", b.dlq, "--to", to, "--yes")
	})
	t.Run("TimeThatDoesNotParse", func(t *testing.T) {
		b.fails(t, exitError, []string{`--since "yesterday"`}, "dlq", "replay", b.dlq, "--since", "yesterday", "--yes")
	})
	t.Run("HeaderWithoutValue", func(t *testing.T) {
		b.fails(t, exitError, []string{`--header "region"`}, "dlq", "purge", b.dlq, "--header", "region", "--yes")
	})
	t.Run("URLThatDoesNotConnect", func(t *testing.T) {
		r := b.settle(t, nil, "--redis", "redis://127.0.0.1:1/0", "dlq", "ls", b.dlq)
		if r.code != exitError || !strings.Contains(r.stderr, "cannot connect to Redis at redis://127.0.0.1:1/0") {
			t.Errorf("exit %d, stderr %q; want 1 and cannot connect naming the URL", r.code, r.stderr)
		}
	})
	b.unchanged(t)
}

func TestUsageErrorsExitWithCode2(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, args := range [][]string{
		{"dlq", "ls"},
		{"dlq", "ls", "a", "b"},
		{"dlq", "ls", "a", "--no-such-flag"},
		{"dlq", "replay", "a", "--limit", "many"},
		{"dlq", "nope"},
		{"nope"},
		{"dlq", "show", "a", "1-0", "--codec", "xml"},
	} {
		b.fails(t, exitUsage, []string{"--help"}, args...)
	}
	if r := b.ok(t, nil, "--help"); !strings.Contains(r.stdout, "Exit codes") {
		t.Errorf("--help does not explain the exit codes:\n%s", r.stdout)
	}
}

func TestDlqExportThenImportRoundTripsTheDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	exp := b.ok(t, nil, "dlq", "export", b.dlq).stdout
	if got := strings.Count(exp, "\n"); got != deadTotal {
		t.Fatalf("export wrote %d lines, want %d", got, deadTotal)
	}
	copyKey := b.key("copy.dlq")
	b.ok(t, strings.NewReader(exp), "dlq", "import", copyKey, "--yes")
	if n := b.xlen(t, copyKey); n != deadTotal {
		t.Fatalf("the imported stream holds %d, want %d", n, deadTotal)
	}
	var s lsOut
	decode(t, b.ok(t, nil, "dlq", "ls", copyKey, "--json").stdout, &s)
	wantErr := map[string]int{"payment provider unavailable": deadUnavailable, "card <n> declined": deadDeclined}
	if s.Count != deadTotal || fmt.Sprint(counts(s.ByError)) != fmt.Sprint(wantErr) || counts(s.BySource)[b.in] != deadTotal {
		t.Errorf("the imported dead letters: %+v, want %d grouped as the originals", s, deadTotal)
	}
	orig, _ := b.rdb.XRange(b.ctx, b.dlq, "-", "+").Result()
	copied, _ := b.rdb.XRange(b.ctx, copyKey, "-", "+").Result()
	for n := range orig {
		if fmt.Sprint(orig[n].Values) != fmt.Sprint(copied[n].Values) {
			t.Errorf("entry %d: imported %v, want %v", n, copied[n].Values, orig[n].Values)
		}
	}
	if n := b.xlen(t, b.dlq); n != deadTotal {
		t.Errorf("export changed the dead-letter stream: %d entries, want %d", n, deadTotal)
	}
}

func TestDlqImportRefusesALineThatDoesNotParseBeforeWritingAnything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	to := b.key("imported.dlq")
	in := `{"headers":{"a":"b"},"payload":"aGk="}` + "\n\n" + `{"headers":{"a":"b"},"payload":"not base64!"}` + "\n"
	r := b.settle(t, strings.NewReader(in), "dlq", "import", to, "--yes")
	if r.code != exitError || !strings.Contains(r.stderr, "line 3") || !strings.Contains(r.stderr, "nothing was written") {
		t.Errorf("exit %d, stderr %q; want 1 naming line 3", r.code, r.stderr)
	}
	r = b.settle(t, strings.NewReader(`{"headers":{"a":"b"},"payload":"aGk="}`+"\n"), "dlq", "import", to)
	if r.code != exitError || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("without --yes: exit %d, stderr %q; want 1 asking for --yes", r.code, r.stderr)
	}
	if n, _ := b.rdb.Exists(b.ctx, to).Result(); n != 0 {
		t.Errorf("%s was written", to)
	}
}

func TestDlqPurgeDeletesExactlyTheSelection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	var dry struct {
		Deleted  int      `json:"deleted"`
		Selected []string `json:"selected"`
	}
	decode(t, b.ok(t, nil, "dlq", "purge", b.dlq, "--error", "declined", "--dry-run", "--json").stdout, &dry)
	if dry.Deleted != 0 || len(dry.Selected) != deadDeclined {
		t.Errorf("dry run: deleted %d, selected %d; want 0 and %d", dry.Deleted, len(dry.Selected), deadDeclined)
	}
	b.unchanged(t)
	var res struct {
		Deleted int `json:"deleted"`
	}
	decode(t, b.ok(t, nil, "dlq", "purge", b.dlq, "--error", "declined", "--yes", "--json").stdout, &res)
	if res.Deleted != deadDeclined {
		t.Errorf("deleted %d, want %d", res.Deleted, deadDeclined)
	}
	if n := b.xlen(t, b.dlq); n != deadUnavailable {
		t.Errorf("the dead-letter stream holds %d, want %d", n, deadUnavailable)
	}
}

func TestDlqShowDecodesThePayloadAsJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	entries := lines[entryOut](t, b.ok(t, nil, "dlq", "ls", b.dlq, "--entries", "--limit", "1", "--json").stdout)
	if len(entries) != 1 {
		t.Fatalf("--limit 1: %d entries", len(entries))
	}
	var p struct {
		Format  string            `json:"format"`
		Headers map[string]string `json:"headers"`
		Payload struct {
			Card string `json:"card"`
		} `json:"payload"`
	}
	decode(t, b.ok(t, nil, "dlq", "show", b.dlq, entries[0].ID, "--json").stdout, &p)
	// The dead letter's payment: one of unavailableCards, or the card its error names.
	cards := unavailableCards
	if card, ok := strings.CutPrefix(entries[0].Error, "card "); ok {
		cards = []string{strings.TrimSuffix(card, " declined")}
	}
	if p.Format != "json" || !slices.Contains(cards, p.Payload.Card) || p.Headers["region"] != "eu" {
		t.Errorf("show: %+v, want the payment of dead letter %+v decoded (card one of %v)", p, entries[0], cards)
	}
	if human := b.ok(t, nil, "dlq", "show", b.dlq, entries[0].ID).stdout; !strings.Contains(human, `"card": "`+p.Payload.Card+`"`) {
		t.Errorf("show prints no decoded payload:\n%s", human)
	}
}

func TestPendingLsShowsTheGroupAndItsConsumers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	var s struct {
		Consumers []struct {
			Name    string `json:"name"`
			Pending int    `json:"pending"`
		} `json:"consumers"`
		Length  int `json:"length"`
		Pending int `json:"pending"`
	}
	decode(t, b.ok(t, nil, "pending", "ls", b.in, b.group, "--json").stdout, &s)
	if int64(s.Length) != b.streamLen || s.Pending != 0 || len(s.Consumers) != 1 || s.Consumers[0].Name != "c1" {
		t.Errorf("pending ls: %+v, want length %d, nothing pending, consumer c1", s, b.streamLen)
	}
	b.fails(t, exitError, []string{`"nogroup"`}, "pending", "ls", b.in, "nogroup")
}

func TestDelayedLsCountsOverdueMembers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.key("delayed")
	due := time.Now().Add(-time.Minute).UnixMilli()
	if err := b.rdb.ZAdd(b.ctx, key, redis.Z{Score: float64(due), Member: "m1"}, redis.Z{Score: float64(due + 3_600_000), Member: "m2"}).Err(); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Overdue int `json:"overdue"`
		Size    int `json:"size"`
	}
	decode(t, b.ok(t, nil, "delayed", "ls", key, "--json").stdout, &d)
	if d.Size != 2 || d.Overdue != 1 {
		t.Errorf("delayed ls: %+v, want size 2, overdue 1", d)
	}
}

func TestStatsTellsEachKeyByItsType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	delayed := b.key("delayed")
	if err := b.rdb.ZAdd(b.ctx, delayed, redis.Z{Score: 1, Member: "m"}).Err(); err != nil {
		t.Fatal(err)
	}
	missing := b.key("missing")
	type stat struct {
		DeadLetters *struct {
			Count int `json:"count"`
		} `json:"dead_letters"`
		DelaySet *struct {
			Size int `json:"size"`
		} `json:"delay_set"`
		Key    string `json:"key"`
		Kind   string `json:"kind"`
		Stream *struct {
			Length int `json:"length"`
		} `json:"stream"`
	}
	got := lines[stat](t, b.ok(t, nil, "stats", b.in, b.dlq, delayed, missing, "--group", b.group, "--json").stdout)
	if len(got) != 4 {
		t.Fatalf("stats printed %d lines, want 4", len(got))
	}
	if got[0].Kind != kindStream || got[0].Stream == nil || int64(got[0].Stream.Length) != b.streamLen {
		t.Errorf("%s: %+v, want a stream of %d", b.in, got[0], b.streamLen)
	}
	if got[1].Kind != kindDeadLetters || got[1].DeadLetters == nil || got[1].DeadLetters.Count != deadTotal {
		t.Errorf("%s: %+v, want %d dead letters", b.dlq, got[1], deadTotal)
	}
	if got[2].Kind != kindDelaySet || got[2].DelaySet == nil || got[2].DelaySet.Size != 1 {
		t.Errorf("%s: %+v, want a delay set of 1", delayed, got[2])
	}
	if got[3].Kind != kindMissing {
		t.Errorf("%s: %+v, want missing", missing, got[3])
	}
	plain := lines[struct {
		Kind   string `json:"kind"`
		Length int64  `json:"length"`
	}](t, b.ok(t, nil, "stats", b.in, "--json").stdout)
	if len(plain) != 1 || plain[0].Kind != kindStream || plain[0].Length != b.streamLen {
		t.Errorf("stats of %s without --group: %+v, want a stream of %d (not dead letters)", b.in, plain, b.streamLen)
	}
	if human := b.ok(t, nil, "stats", b.in, b.dlq, delayed, missing, "--group", b.group).stdout; !strings.Contains(human, "dead letters") {
		t.Errorf("stats table:\n%s", human)
	}
}

func TestConfirmOnATerminalGoesAheadOnlyOnYes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer string
		tty    bool
		yes    bool
		wantOK bool
	}{
		{name: "YesOnATerminal", answer: "y\n", tty: true, wantOK: true},
		{name: "YesSpelledOut", answer: " Yes \n", tty: true, wantOK: true},
		{name: "NoOnATerminal", answer: "n\n", tty: true},
		{name: "EnterOnATerminal", answer: "\n", tty: true},
		{name: "EOFOnATerminal", answer: "", tty: true},
		{name: "NoTerminal", answer: "y\n"},
		{name: "NoTerminalWithYesFlag", yes: true, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var prompt bytes.Buffer
			a := &app{stderr: &prompt, stdin: strings.NewReader(tc.answer), stdinTTY: tc.tty}
			err := a.confirm("replay 4 dead letters", tc.yes)
			if (err == nil) != tc.wantOK {
				t.Errorf("confirm: %v, want ok %v", err, tc.wantOK)
			}
			if tc.tty && !tc.yes && !strings.Contains(prompt.String(), "Replay 4 dead letters? [y/N]") {
				t.Errorf("prompt %q, want the question", prompt.String())
			}
		})
	}
}
