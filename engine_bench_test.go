package settle

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

// nopTransport settles everything at once and reads nothing: a benchmark of the engine's
// own cost per delivery.
type nopTransport struct{}

func (nopTransport) Info() source.Info {
	return source.Info{Kind: source.KindStream, Key: "bench", Caps: source.Caps{RetryWithoutCap: source.ActionCopy}}
}
func (nopTransport) Validate(source.Policy) []error { return nil }
func (nopTransport) Open(context.Context) error     { return nil }
func (nopTransport) Fetch(context.Context, int, time.Duration) ([]*source.Delivery, error) {
	return nil, nil
}
func (nopTransport) Paused(context.Context) (bool, error)          { return false, nil }
func (nopTransport) Ack(context.Context, []*source.Delivery) error { return nil }
func (nopTransport) Moves(_ context.Context, ms []source.Move) []error {
	return make([]error, len(ms))
}
func (nopTransport) Close(context.Context) error { return nil }

// benchMount returns a prepared mount on nopTransport with handler h, its logger at the
// default level (Info) writing to io.Discard: a line the defaults would write is built.
func benchMount(b *testing.B, h Handler) *mount {
	b.Helper()
	a, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	m := &mount{cfg: defaultMountConfig(), handler: h, src: benchSource{}}
	m.cfg.delay = delayed.InProcess{}
	m.prepare(a.eng)
	m.writes.base = context.Background() // as runMount sets it
	return m
}

type benchSource struct{}

func (benchSource) Transport(source.Env) source.Transport { return nopTransport{} }

// benchHandle runs the engine's per-delivery path (handler, decision, settlement, the
// batched acker) b.N times.
func benchHandle(b *testing.B, h Handler) {
	m := benchMount(b, h)
	acks := newAcker(context.Background(), m)
	defer acks.close()
	d := &source.Delivery{Attempt: 1, Headers: map[string]string{}, HasPayload: true, ID: "1-0", Key: "bench", Payload: []byte("payload")}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.handle(ctx, d, acks, nil, nil)
	}
}

func BenchmarkHandleAck(b *testing.B) {
	benchHandle(b, HandlerFunc(func(context.Context, *Message) error { return nil }))
}

func BenchmarkHandleRetryCopy(b *testing.B) {
	benchHandle(b, HandlerFunc(func(context.Context, *Message) error { return Retry(nil) }))
}
