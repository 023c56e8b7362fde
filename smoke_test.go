package settle_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
)

func TestSmoke(t *testing.T) {
	r := redistest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, dlq := r.Key("in"), r.Key("dlq")
	pub := settle.NewPublisher(r.Client)
	for i := 0; i < 20; i++ {
		if _, err := pub.Publish(ctx, in, i, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	finals := 0
	done := make(chan struct{})
	app, _ := settle.New(settle.Config{OnSettled: func(_ context.Context, s settle.Settled) {
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%s %s attempt=%d action=%s err=%v", s.Mount, s.ID, s.Attempt, s.Action, s.Err)
		if s.Final() {
			finals++
			if finals == 20 {
				close(done)
			}
		}
	}})
	app.Mount(settle.Stream(r.Client, in, "g", settle.Block(100*time.Millisecond)), settle.Typed(func(ctx context.Context, m *settle.Message, v int) error {
		switch v % 4 {
		case 0:
			return nil
		case 1:
			return settle.Drop(errors.New("no"))
		case 2:
			return settle.RetryAfter(10*time.Millisecond, errors.New("later"))
		}
		return errors.New("fail")
	}), settle.MaxAttempts(3), settle.DeadLetter(dlq))
	errc := make(chan error)
	go func() { errc <- app.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("timeout")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	n, _ := r.Client.XLen(context.Background(), dlq).Result()
	if n != 10 {
		t.Fatalf("dlq %d", n)
	}
}
