package console_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/console"
	"github.com/settlekit/settle/internal/keys"
)

// Hostile names: a partitioned stream and a member (a consumer) named in HTML, which
// every page must show as text.
const (
	hostileStream = `<b>orders</b>"&'`
	hostileMember = `<img src=x onerror=alert(1)>`
)

// The partitioned world: orders spread over 4 partitions by customer, customer-0's
// dead-lettered at the cap of 1 attempt, the others acked.
const (
	ordersParts = 4
	ordersTotal = 40
	ordersDead  = 4 // customer-0's
)

// partitionedWorld publishes the orders to a partitioned stream of the world (its name
// ends in hostileStream) and runs one member, hostileMember, until every order is
// settled. The member goes on running (holding every partition) until stop, which the
// test's end also calls.
func (w *world) partitionedWorld(t *testing.T) (ps console.PartitionedStream, stop func()) {
	t.Helper()
	name := strings.Trim(w.prefix, "{}") + ":" + hostileStream
	t.Cleanup(func() { // before the world's cleanup closes the client
		for _, pattern := range []string{"{" + name + ":*", "{" + name + "}*"} {
			if ks, err := w.rdb.Keys(w.ctx, pattern).Result(); err == nil && len(ks) > 0 {
				_ = w.rdb.Del(w.ctx, ks...).Err()
			}
		}
		_ = w.rdb.Del(w.ctx, name).Err()
	})
	src := settle.PartitionedStream(w.rdb, name, "workers", settle.Partitions(ordersParts), settle.Consumer(hostileMember), settle.Block(50*time.Millisecond))
	if err := src.Declare(w.ctx); err != nil {
		t.Fatal(err)
	}
	pub := settle.NewPublisher(w.rdb)
	for k := range ordersTotal {
		customer := fmt.Sprintf("customer-%d", k%10)
		if _, err := pub.Publish(w.ctx, name, k, settle.Key(customer), settle.Header("customer", customer)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	finals := 0
	settled := make(chan struct{})
	app, err := settle.New(settle.Config{Logger: slog.New(slog.DiscardHandler), OnSettled: func(_ context.Context, s settle.Settled) {
		mu.Lock()
		defer mu.Unlock()
		if s.Final() {
			if finals++; finals == ordersTotal {
				close(settled)
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(src, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Headers["customer"] == "customer-0" {
			return errors.New("declined")
		}
		return nil
	}), settle.MaxAttempts(1), settle.DeadLetter("orders.dlq"))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-settled:
	case err := <-errc:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(waitBound):
		t.Fatalf("the %d orders not settled within %s", ordersTotal, waitBound)
	}
	return console.PartitionedStream{Name: name, Key: name, Group: "workers", DeadLetter: "orders.dlq"}, stop
}

var partitionRowRe = regexp.MustCompile(`(?s)<tr data-partition="(\d+)">.*?</tr>`)

// partitionRows returns each partition row of the page, by index.
func partitionRows(t *testing.T, body string) map[int]string {
	t.Helper()
	rows := map[int]string{}
	for _, m := range partitionRowRe.FindAllStringSubmatch(body, -1) {
		k, _ := strconv.Atoi(m[1])
		rows[k] = m[0]
	}
	return rows
}

// cell returns the value of the data attribute attr in a row ("" without one).
func cell(row, attr string) string {
	m := regexp.MustCompile(attr + `="([^"]*)"`).FindStringSubmatch(row)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// A partitioned stream's page shows each partition's owner, lease, token, length, lag,
// pending entries and dead letters, then the live members and how many partitions each
// holds; the overview has its row, added up. The hostile names are shown escaped.
func TestPartitionedStreamPageShowsEachPartitionsOwnerLeaseBacklogAndTheMembers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ps, stop := w.partitionedWorld(t)
	srv, cl := w.serve(t, console.Options{Prefix: "/settle", Partitioned: []console.PartitionedStream{ps}})
	page := srv.URL + "/settle/partitioned/" + url.PathEscape(ps.Name)
	status, body := get(t, cl, page)
	if status != http.StatusOK {
		t.Fatalf("GET %s = %d:\n%s", page, status, body)
	}
	if strings.Contains(body, hostileMember) || strings.Contains(body, "<b>orders</b>") {
		t.Fatalf("a hostile name is in the page unescaped:\n%s", body)
	}
	rows := partitionRows(t, body)
	if len(rows) != ordersParts {
		t.Fatalf("%d partition rows, want %d:\n%s", len(rows), ordersParts, body)
	}
	var length, dead int
	lagBefore := map[int]int{}
	for k, row := range rows {
		if got := cell(row, "data-owner"); got != hostileMember {
			t.Errorf("partition %d: owner %q, want the live member %q", k, got, hostileMember)
		}
		if ms, _ := strconv.Atoi(cell(row, "data-lease-ms")); ms <= 0 {
			t.Errorf("partition %d: lease left %d ms, want a live lease:\n%s", k, ms, row)
		}
		if cell(row, "data-pending") != "0" {
			t.Errorf("partition %d: pending %q, want 0 (all settled)", k, cell(row, "data-pending"))
		}
		lag, err := strconv.Atoi(cell(row, "data-lag"))
		if err != nil {
			t.Errorf("partition %d shows no lag:\n%s", k, row)
		}
		lagBefore[k] = lag
		n, _ := strconv.Atoi(cell(row, "data-length"))
		d, _ := strconv.Atoi(cell(row, "data-dead"))
		length, dead = length+n, dead+d
	}
	if length != ordersTotal || dead != ordersDead {
		t.Fatalf("the partitions show %d entries and %d dead letters, want %d and %d", length, dead, ordersTotal, ordersDead)
	}
	holder := regexp.MustCompile(`<tr data-holder="([^"]*)">.*?data-owns="(\d+)"`).FindAllStringSubmatch(body, -1)
	if len(holder) != 1 || html.UnescapeString(holder[0][1]) != hostileMember || holder[0][2] != strconv.Itoa(ordersParts) {
		t.Fatalf("members %q, want %q alone holding %d partitions", holder, hostileMember, ordersParts)
	}
	_, overview := get(t, cl, srv.URL+"/settle/")
	if !strings.Contains(overview, `href="`+html.EscapeString(strings.TrimPrefix(page, srv.URL))+`"`) || !strings.Contains(overview, "all 4 partitions held") {
		t.Fatalf("the overview does not link the partitioned stream's page nor say it is held:\n%s", overview)
	}
	if strings.Contains(overview, hostileMember) || strings.Contains(overview, "<b>orders</b>") {
		t.Fatalf("a hostile name is in the overview unescaped:\n%s", overview)
	}

	// Stopped, its member hands the partitions back; what is published then waits, and
	// the page says nothing reads it.
	stop()
	if _, err := settle.NewPublisher(w.rdb).Publish(w.ctx, ps.Key, "late", settle.Key("customer-1")); err != nil {
		t.Fatal(err)
	}
	p := settle.PartitionFor("customer-1", ordersParts)
	_, body = get(t, cl, page)
	for k, row := range partitionRows(t, body) {
		if cell(row, "data-owner") != "" || !strings.Contains(row, `<span class="badge warn">none</span>`) {
			t.Errorf("partition %d after the member stopped: %s, want no owner", k, row)
		}
		if lag, _ := strconv.Atoi(cell(row, "data-lag")); k == p && lag != lagBefore[k]+1 && lag != -1 {
			t.Errorf("partition %d holding the late order: lag %d, want one more than the %d before (or unknown)", k, lag, lagBefore[k])
		}
	}
	if !strings.Contains(body, "No member of the group is alive.") || !strings.Contains(body, "nothing reads its partitions") {
		t.Fatalf("the page does not say no member is alive and nothing reads the late order:\n%s", body)
	}
	// Its group paused (the control key its mounts check), the page and the overview say so.
	if err := w.rdb.Set(w.ctx, keys.Paused(ps.Key, ps.Group), "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.rdb.Del(w.ctx, keys.Paused(ps.Key, ps.Group)).Err() })
	if _, body = get(t, cl, page); !strings.Contains(body, `<span class="badge paused" id="state">paused</span>`) {
		t.Fatalf("the page of a paused partitioned stream does not say it is paused:\n%s", body)
	}
}

// A partitioned stream that is not one (a missing meta key) is a page saying why, and
// one the console is not told of is not found.
func TestPartitionedStreamPageSaysWhyItCannotReadAndNotFoundForAnUnknownName(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	missing := strings.Trim(w.prefix, "{}") + ":missing"
	srv, cl := w.serve(t, console.Options{Partitioned: []console.PartitionedStream{{Name: "orders", Key: missing, Group: "workers"}}})
	if status, body := get(t, cl, srv.URL+"/partitioned/orders"); status != http.StatusBadGateway || !strings.Contains(body, missing) {
		t.Fatalf("a missing partitioned stream: %d, want 502 naming it:\n%s", status, body)
	}
	if status, _ := get(t, cl, srv.URL+"/partitioned/nope"); status != http.StatusNotFound {
		t.Fatalf("an unknown partitioned stream: %d, want 404", status)
	}
	if _, overview := get(t, cl, srv.URL+"/"); !strings.Contains(overview, `<tr data-mount="orders" class="problem">`) {
		t.Fatalf("the overview does not show the unreadable partitioned stream as a problem:\n%s", overview)
	}
}

// New refuses a partitioned stream without its key or group, with braces in its name
// (its partitions' hash tags are made from it), two of one name, and any without Admin.
func TestNewRefusesAPartitionedStreamItCannotRead(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ps   []console.PartitionedStream
		says string
	}{
		{"NoKey", []console.PartitionedStream{{Group: "g"}}, "has no Key"},
		{"NoGroup", []console.PartitionedStream{{Key: "orders"}}, "needs its Group"},
		{"Braces", []console.PartitionedStream{{Key: "{orders}", Group: "g"}}, "must not hold braces"},
		{"TwoOfOneName", []console.PartitionedStream{{Key: "a", Group: "g", Name: "x"}, {Key: "b", Group: "g", Name: "x"}}, `two partitioned streams are named "x"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := console.New(console.Options{Admin: nil, Partitioned: tt.ps})
			if err == nil || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), "need Admin") {
				t.Fatalf("New: %v, want an error saying %q and that Admin is needed", err, tt.says)
			}
		})
	}
}

// TestBrowserShowsAPartitionedStreamsPartitionsAndMembers: chromium renders the
// partitions table, each partition's owner the hostile member's name as text (no
// element made of it), and the members table.
func TestBrowserShowsAPartitionedStreamsPartitionsAndMembers(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("the browser test needs " + chromium + " (apt-get install -y chromium)")
	}
	w := newWorld(t)
	ps, _ := w.partitionedWorld(t)
	srv, _ := w.serve(t, console.Options{Prefix: "/settle", Partitioned: []console.PartitionedStream{ps}})
	b := newBrowser(t)
	b.do("open the overview", chromedp.Navigate(srv.URL+"/settle/"), chromedp.WaitVisible(chromedp.CSS("#overview")))
	b.do("follow the partitioned stream's link", chromedp.Click(chromedp.CSS(`#overview a[href*="partitioned"]`)), chromedp.WaitVisible(chromedp.CSS("#partitions")))
	if got := eval[int](b, `document.querySelectorAll("#partitions tbody tr[data-partition]").length`); got != ordersParts {
		t.Fatalf("the partitions table has %d rows, want %d", got, ordersParts)
	}
	for k := range ordersParts {
		if got := b.text(fmt.Sprintf(`tr[data-partition="%d"] td[data-owner]`, k)); got != hostileMember {
			t.Fatalf("partition %d's owner reads %q, want %q as text", k, got, hostileMember)
		}
	}
	if got := eval[int](b, `document.querySelectorAll("main img, main b").length`); got != 0 {
		t.Fatalf("the page made %d elements of the hostile names", got)
	}
	if got := b.text(`#members td[data-owns]`); got != strconv.Itoa(ordersParts) {
		t.Fatalf("the member holds %q partitions, want %d", got, ordersParts)
	}
	if got := b.text("h1"); got != ps.Name {
		t.Fatalf("the title reads %q, want the stream's name %q", got, ps.Name)
	}
	b.shot("console-partitioned")
}
