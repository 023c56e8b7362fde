package examplerun

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
)

// newApp returns an App on one stream with one message published, and a channel closed
// once that message is settled.
func newApp(t *testing.T) (*settle.App, <-chan struct{}) {
	t.Helper()
	r := redistest.New(t)
	done := make(chan struct{})
	var once sync.Once
	app, err := settle.New(settle.Config{OnSettled: func(context.Context, settle.Settled) { once.Do(func() { close(done) }) }})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(settle.Stream(r.Client, r.Key("in"), "g", settle.Block(50*time.Millisecond)),
		settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	if _, err := settle.NewPublisher(r.Client).Publish(context.Background(), r.Key("in"), 1, nil); err != nil {
		t.Fatal(err)
	}
	return app, done
}

func TestUntilStopsTheAppGracefullyOnceDone(t *testing.T) {
	t.Parallel()
	app, done := newApp(t)
	if err := Start(context.Background(), app).Until(context.Background(), done, time.Minute, func() string { return "s" }); err != nil {
		t.Fatalf("Until = %v, want nil", err)
	}
}

func TestUntilNamesTheSummaryWhenInterrupted(t *testing.T) {
	t.Parallel()
	app, _ := newApp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Start(context.Background(), app).Until(ctx, make(chan struct{}), time.Minute, func() string { return "settled 3 of 5" })
	if err == nil || !strings.Contains(err.Error(), "interrupted: settled 3 of 5") {
		t.Fatalf("Until = %v, want an error naming the summary", err)
	}
}

func TestUntilReportsAnAppThatStoppedEarly(t *testing.T) {
	t.Parallel()
	app, err := settle.New(settle.Config{}) // no mounts: Run refuses at once
	if err != nil {
		t.Fatal(err)
	}
	err = Start(context.Background(), app).Until(context.Background(), make(chan struct{}), time.Minute, func() string { return "settled 0" })
	if err == nil || !strings.Contains(err.Error(), "app stopped early") || !strings.Contains(err.Error(), "no mounts") {
		t.Fatalf("Until = %v, want \"app stopped early\" with Run's refusal", err)
	}
}
