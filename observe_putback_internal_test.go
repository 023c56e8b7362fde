package settle

import (
	"context"
	"testing"

	"github.com/settlekit/settle/internal/source"
)

// putBackSource's transport puts retries back (RetryWithoutCap), in place when inPlace
// (an inbox's attempt column), and keeps the moves it is given in moves (nil: none).
type putBackSource struct {
	inPlace bool
	moves   *[]source.Move
}

func (s putBackSource) Transport(source.Env) source.Transport { return putBackTransport{src: s} }

// putBackTransport is nopTransport but for its Info and Moves.
type putBackTransport struct {
	nopTransport
	src putBackSource
}

func (t putBackTransport) Info() source.Info {
	return source.Info{Kind: source.KindTable, Key: "bench", Caps: source.Caps{RetriesInPlace: t.src.inPlace, RetryWithoutCap: source.ActionPutBack}}
}

func (t putBackTransport) Moves(_ context.Context, ms []source.Move) []error {
	if t.src.moves != nil {
		*t.src.moves = append(*t.src.moves, ms...)
	}
	return make([]error, len(ms))
}

// A transport that retries in place (an inbox) gets the Move hook's headers with a
// put-back, so the next attempt can link to this one; one that puts the message back
// as it is (a reliable list) gets none, and the hook is not called for it.
func TestTheMoveHookStampsAPutBackOnlyWhereTheTransportRetriesInPlace(t *testing.T) {
	retry := HandlerFunc(func(context.Context, *Message) error { return Retry(nil) })
	for _, inPlace := range []bool{true, false} {
		var moves []source.Move
		calls := 0
		cfg := Config{Hooks: Hooks{Move: func(_ context.Context, s Settled, h map[string]string) {
			calls++
			if s.Action != ActionPutBack {
				t.Errorf("the Move hook saw action %s, want put_back", s.Action)
			}
			h[HeaderHookPrefix+"link"] = "attempt-1"
		}}}
		limit := 0 // a put-back as it is: a Retry without a cap
		if inPlace {
			limit = 3 // a put-back in place: a Retry under the cap too
		}
		handleAllocsOn(t, cfg, retry, putBackSource{inPlace: inPlace, moves: &moves}, limit)
		if len(moves) == 0 {
			t.Fatalf("in place %v: no move written", inPlace)
		}
		m := moves[0]
		switch {
		case m.Action != source.ActionPutBack:
			t.Fatalf("in place %v: move %s, want put_back", inPlace, m.Action)
		case inPlace && (m.Headers[HeaderHookPrefix+"link"] != "attempt-1" || m.Headers["tenant"] != "acme"):
			t.Fatalf("an in-place put-back carries headers %v, want the delivery's and the hook's", m.Headers)
		case !inPlace && (m.Headers != nil || calls != 0):
			t.Fatalf("a put-back as it is carries headers %v after %d hook calls, want none and none", m.Headers, calls)
		}
	}
}

// Without a Move hook, a put-back in place allocates nothing more than one that puts
// the message back as it is: no headers are built for it.
func TestUnsetMoveHookAddsNoAllocationToAnInPlacePutBack(t *testing.T) {
	retry := HandlerFunc(func(context.Context, *Message) error { return Retry(nil) })
	asIs := handleAllocsOn(t, Config{}, retry, putBackSource{}, 0)
	if n := handleAllocsOn(t, Config{}, retry, putBackSource{inPlace: true}, 0); n != asIs {
		t.Fatalf("an in-place put-back without a Move hook allocates %.0f times, one as it is %.0f: want the same", n, asIs)
	}
}
