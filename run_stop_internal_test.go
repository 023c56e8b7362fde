package settle

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/settlekit/settle/internal/source"
)

// openStopSource's transport opens until its context ends, then fails with the
// context's error wrapped (as a driver does when a query is cancelled), after telling
// opening that it began.
type openStopSource struct{ opening chan struct{} }

func (s openStopSource) Transport(source.Env) source.Transport { return openStopTransport{src: s} }

type openStopTransport struct {
	nopTransport
	src openStopSource
}

func (t openStopTransport) Open(ctx context.Context) error {
	close(t.src.opening)
	<-ctx.Done()
	return fmt.Errorf("read the table's columns: %w", ctx.Err())
}

// A Run stopped while a mount opens returns nil, as any graceful stop does: the open's
// error is the stop's own cancellation, not a refusal. A real refusal beside it is
// still returned.
func TestARunStoppedWhileAMountOpensReturnsNil(t *testing.T) {
	app, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	src := openStopSource{opening: make(chan struct{})}
	app.Mount(src, HandlerFunc(func(context.Context, *Message) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	<-src.opening
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v, want nil: it was stopped while its mount opened", err)
	}
	refused := errors.New("WRONGTYPE")
	if stoppedWhileOpening(ctx, []error{context.Canceled, refused}) {
		t.Fatal("an open refused for another reason than the stop was taken for the stop")
	}
}
