package faults_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/faults"
	"github.com/settlekit/settle/internal/redistest"
)

// proxyBundle is one proxy test's world: a Redis, a proxy to it, and a client through
// the proxy that never retries (so each fault shows as the error it made).
type proxyBundle struct {
	client *redis.Client // through the proxy
	proxy  *faults.Proxy
	r      *redistest.Redis
}

func setupProxy(t *testing.T) *proxyBundle {
	t.Helper()
	r := redistest.New(t)
	p := faults.Start(t, r.Client.Options().Addr)
	o := r.Client.Options()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), DB: o.DB, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	return &proxyBundle{client: c, proxy: p, r: r}
}

func TestProxy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ForwardsCommandsAndReplies", func(t *testing.T) {
		t.Parallel()
		b := setupProxy(t)
		k := b.r.Key("k")
		if err := b.client.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := b.r.Client.Get(ctx, k).Result(); err != nil || got != "v" {
			t.Fatalf("direct GET = %q, %v; want v", got, err)
		}
		if got, err := b.client.Get(ctx, k).Result(); err != nil || got != "v" {
			t.Fatalf("proxied GET = %q, %v; want v", got, err)
		}
	})

	t.Run("ResetAllFailsBlockedReadWithConnReset", func(t *testing.T) {
		t.Parallel()
		b := setupProxy(t)
		sent := b.proxy.Observe(contains("blpop"))
		errc := make(chan error, 1)
		go func() { errc <- b.client.BLPop(ctx, 10*time.Second, b.r.Key("empty")).Err() }()
		<-sent
		if n := b.proxy.ResetAll(); n != 1 {
			t.Fatalf("ResetAll reset %d connections, want 1", n)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
				t.Fatalf("BLPOP after a reset: %v, want ECONNRESET", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("BLPOP still blocked 5s after the reset")
		}
	})

	t.Run("CloseAllEndsConnectionsWithEOF", func(t *testing.T) {
		t.Parallel()
		b := setupProxy(t)
		sent := b.proxy.Observe(contains("blpop"))
		errc := make(chan error, 1)
		go func() { errc <- b.client.BLPop(ctx, 10*time.Second, b.r.Key("empty")).Err() }()
		<-sent
		if n := b.proxy.CloseAll(); n != 1 {
			t.Fatalf("CloseAll closed %d connections, want 1", n)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, io.EOF) {
				t.Fatalf("BLPOP after a close: %v, want EOF", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("BLPOP still blocked 5s after the close")
		}
	})

	t.Run("RefuseResetsNewConnections", func(t *testing.T) {
		t.Parallel()
		b := setupProxy(t)
		b.proxy.Refuse(time.Hour)
		if err := b.client.Ping(ctx).Err(); err == nil {
			t.Fatal("PING through a refusing proxy succeeded")
		}
		b.proxy.Refuse(0)
		// go-redis answers a pool whose dials all failed with the last dial error until
		// its background redial (once a second) connects, and tells nobody when: poll
		// for that, bounded.
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if err = b.client.Ping(ctx).Err(); err == nil {
				break
			}
			<-time.After(10 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("PING once the proxy accepts again: %v", err)
		}
	})

	t.Run("LatencyDelaysOneDirection", func(t *testing.T) {
		t.Parallel()
		b := setupProxy(t)
		if err := b.client.Ping(ctx).Err(); err != nil { // dial outside the measure
			t.Fatal(err)
		}
		const lag = 150 * time.Millisecond
		b.proxy.SetLatency(faults.ToClient, lag)
		began := time.Now()
		if err := b.client.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took < lag {
			t.Fatalf("PING took %s with %s of reply latency", took, lag)
		}
		b.proxy.SetLatency(faults.ToClient, 0)
		b.proxy.SetLatency(faults.ToServer, lag)
		began = time.Now()
		if err := b.client.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took < lag {
			t.Fatalf("PING took %s with %s of request latency", took, lag)
		}
	})

	t.Run("CutReplyDropsReplyOfExecutedCommand", func(t *testing.T) {
		t.Parallel()
		for _, td := range []faults.Teardown{faults.Reset, faults.Close} {
			b := setupProxy(t)
			k := b.r.Key("n")
			rule := &faults.Rule{Request: contains("incr"), Teardown: td}
			b.proxy.CutReply(rule)
			if err := b.client.Incr(ctx, k).Err(); err == nil {
				t.Fatalf("teardown %d: INCR whose reply was cut succeeded", td)
			}
			<-rule.Done()
			if !bytes.Contains(bytes.ToLower(rule.Dropped()), []byte("incr")) {
				t.Fatalf("teardown %d: dropped the reply of %q", td, rule.Dropped())
			}
			if got, err := b.r.Client.Get(ctx, k).Int(); err != nil || got != 1 {
				t.Fatalf("teardown %d: counter = %d, %v; want 1 (the command ran)", td, got, err)
			}
		}
	})
}

// contains matches a request holding word (go-redis sends command names in lower case).
func contains(word string) func([]byte) bool {
	w := []byte(word)
	return func(req []byte) bool { return bytes.Contains(bytes.ToLower(req), w) }
}
