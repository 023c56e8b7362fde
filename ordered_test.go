package settle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestOrderedIsRefusedWhereItCannotHold: Ordered stops startup, naming why, on a source
// that cannot keep a key's messages in order (a List pop, a ReliableList, PubSub, a
// ClaimingStream whose retries wait as idle entries any consumer claims), on a Stream
// without one Consumer name, with HandleBatch and with a flow limit; a Stream under
// Consumer(name) and a PartitionedStream take it.
func TestOrderedIsRefusedWhereItCannotHold(t *testing.T) {
	t.Parallel()
	b := sourcetest.SetupStream(t)
	app, err := settle.New(b.Config())
	if err != nil {
		t.Fatal(err)
	}
	batch := settle.HandleBatch(10, time.Millisecond, func(context.Context, []*settle.Message) error { return nil })
	key := func(m *settle.Message) string { return m.Headers[settle.HeaderKey] }
	app.Mount(settle.List(b.Client, b.In+":list"), sourcetest.Ack, settle.Name("list"), settle.Ordered())
	app.Mount(settle.ReliableList(b.Client, b.In+":rlist"), sourcetest.Ack, settle.Name("reliable-list"), settle.Ordered())
	app.Mount(settle.PubSub(b.Client, b.In+":ch"), sourcetest.Ack, settle.Name("pubsub"), settle.Ordered())
	app.Mount(settle.ClaimingStream(b.Client, b.In+":claiming", "g", time.Minute), sourcetest.Ack, settle.Name("claiming"), settle.Ordered())
	app.Mount(b.Stream(), sourcetest.Ack, settle.Name("no-consumer"), settle.Ordered())
	app.Mount(settle.Stream(b.Client, b.In, "g", settle.Consumer("c1")), batch, settle.Name("batch"), settle.Ordered())
	app.Mount(settle.Stream(b.Client, b.In, "g", settle.Consumer("c1")), sourcetest.Ack, settle.Name("limited"), settle.Ordered(), settle.ConcurrencyBy(key, 1))
	app.Mount(settle.Stream(b.Client, b.In, "g", settle.Consumer("c1")), sourcetest.Ack, settle.Name("stream"), settle.Ordered())
	app.Mount(settle.PartitionedStream(b.Client, strings.Trim(b.In, "{}")+"-parts", "g", settle.Partitions(4)), sourcetest.Ack, settle.Name("partitioned"), settle.Ordered())
	err = app.Validate()
	if err == nil {
		t.Fatal("Validate = nil, want Ordered refused")
	}
	want := map[string]string{
		"list":          "Ordered: refused on a *settle.ListSource",
		"reliable-list": "Ordered: refused on a *settle.ReliableListSource",
		"pubsub":        "Ordered: refused on a *settle.PubSubSource",
		"claiming":      "Ordered: refused on a *settle.ClaimingStreamSource",
		"no-consumer":   "Ordered on a Stream needs Consumer(name)",
		"batch":         "Ordered: refused with HandleBatch",
		"limited":       "Ordered: refused with ConcurrencyBy",
	}
	got := map[string]string{}
	for _, ce := range configErrors(t, err) {
		if strings.Contains(ce.Problem, "Ordered") {
			got[ce.Mount] += ce.Problem + "; "
		}
	}
	for mount, w := range want {
		if !strings.Contains(got[mount], w) {
			t.Errorf("mount %s: refusals %q, want one saying %q", mount, got[mount], w)
		}
	}
	for _, ok := range []string{"stream", "partitioned"} {
		if got[ok] != "" {
			t.Errorf("mount %s: Ordered refused (%s), want it taken", ok, got[ok])
		}
	}
}
