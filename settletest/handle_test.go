package settletest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settletest"
)

type refund struct {
	ID          int
	AmountCents int
}

// Handle gives a handler's outcome with no Redis: each outcome a handler can return,
// a typed payload decoded with msgpack, and a panic recovered as the engine does.
func TestHandleReturnsTheOutcomeOfOneHandlerCall(t *testing.T) {
	t.Parallel()
	errBusy, errDeclined := errors.New("busy"), errors.New("declined")
	h := settle.Typed(func(_ context.Context, m *settle.Message, r refund) error {
		switch {
		case r.AmountCents == 0:
			panic("no amount")
		case r.AmountCents < 0:
			return settle.Drop(errDeclined)
		case m.Attempt == 1 && r.ID == 2:
			return settle.RetryAfter(time.Minute, errBusy)
		case r.ID == 3:
			return errBusy
		}
		return nil
	})
	msg := func(r refund) *settle.Message {
		b, err := settle.Msgpack.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return &settle.Message{Payload: b}
	}
	for _, tc := range []struct {
		name string
		msg  *settle.Message
		kind settle.OutcomeKind
	}{
		{"AckOnNil", msg(refund{ID: 1, AmountCents: 100}), settle.OutcomeAck},
		{"RetryAfterAsked", msg(refund{ID: 2, AmountCents: 100}), settle.OutcomeRetryAfter},
		{"PlainErrorRetries", msg(refund{ID: 3, AmountCents: 100}), settle.OutcomeRetry},
		{"DropAsked", msg(refund{ID: 4, AmountCents: -1}), settle.OutcomeDrop},
		{"PanicRetries", msg(refund{ID: 5}), settle.OutcomeRetry},
		{"UndecodablePayloadRetries", &settle.Message{Payload: []byte{0xc1}}, settle.OutcomeRetry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := settletest.Handle(t, h, tc.msg)
			if o.Kind != tc.kind {
				t.Fatalf("outcome %+v, want %s", o, tc.kind)
			}
			switch tc.name {
			case "RetryAfterAsked":
				if o.Delay != time.Minute || !errors.Is(o.Err, errBusy) {
					t.Fatalf("outcome %+v, want a minute's delay and the busy error", o)
				}
			case "PanicRetries":
				var pe *settle.PanicError
				if !errors.As(o.Err, &pe) || pe.Value != "no amount" || len(pe.Stack) == 0 {
					t.Fatalf("outcome error %v, want the panic with its stack", o.Err)
				}
			case "UndecodablePayloadRetries":
				var de *settle.DecodeError
				if !errors.As(o.Err, &de) {
					t.Fatalf("outcome error %v, want a *settle.DecodeError", o.Err)
				}
			}
		})
	}
}

// fatalTB records a Fatalf and ends the goroutine as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// On a real server the paused clock cannot move a claiming stream's min-idle: the
// harness refuses the mount, saying why, rather than let the test wait forever.
func TestHarnessRefusesAClaimingStreamOnARealServerUnderItsPausedClock(t *testing.T) {
	t.Parallel()
	srv := settletest.Redis(t)
	real := &settletest.Server{Client: srv.Client, Prefix: srv.Prefix} // Mini nil: taken for a real server
	ft := &fatalTB{TB: t}
	h := settletest.New(ft, settletest.WithRedis(real))
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Mount(settle.ClaimingStream(srv.Client, srv.Key("in"), "g", 30*time.Second), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
	}()
	<-done
	if !strings.Contains(ft.msg, "min-idle runs on the Redis server's clock") || !strings.Contains(ft.msg, "Live") {
		t.Fatalf("refusal %q, want it to say why and what to do", ft.msg)
	}
}
