package keyorder_test

import (
	"slices"
	"testing"

	"github.com/settlekit/settle/internal/keyorder"
)

type msg struct{ key, id string }

func keyOf(m *msg) (string, string) { return m.key, m.id }

func TestAKeysLaterDeliveriesRunOneAtATimeInReadOrder(t *testing.T) {
	q := keyorder.New[*msg]()
	a1, a2, b1, a3 := &msg{"a", "1"}, &msg{"a", "2"}, &msg{"b", "3"}, &msg{"a", "4"}
	if run := q.Admit([]*msg{a1, a2, b1}, keyOf); !slices.Equal(run, []*msg{a1, b1}) {
		t.Fatalf("run %v, want a1 and b1 (a2 waits behind a1)", run)
	}
	if run := q.Admit([]*msg{a3}, keyOf); len(run) != 0 {
		t.Fatalf("run %v, want a3 waiting behind a1 and a2", run)
	}
	if next, ok := q.Settled("a"); !ok || next != a2 {
		t.Fatalf("after a1: %v %v, want a2", next, ok)
	}
	if next, ok := q.Settled("a"); !ok || next != a3 {
		t.Fatalf("after a2: %v %v, want a3", next, ok)
	}
	if _, ok := q.Settled("a"); ok {
		t.Fatal("after a3: a delivery, want the key free")
	}
	if run := q.Admit([]*msg{{"a", "5"}}, keyOf); len(run) != 1 {
		t.Fatalf("a free key's delivery waits: %v", run)
	}
}

func TestADeliveryWithoutAKeyRunsAtOnce(t *testing.T) {
	q := keyorder.New[*msg]()
	if run := q.Admit([]*msg{{"", "1"}, {"", "2"}}, keyOf); len(run) != 2 {
		t.Fatalf("run %v, want both", run)
	}
}

func TestAHeadWhoseSettlementFailedKeepsItsKeyUntilItComesBack(t *testing.T) {
	q := keyorder.New[*msg]()
	a1, a2 := &msg{"a", "1"}, &msg{"a", "2"}
	q.Admit([]*msg{a1, a2}, keyOf)
	q.Failed("a", "1")
	if !q.Awaiting() {
		t.Fatal("Awaiting = false after a failed head")
	}
	select {
	case <-q.Short:
	default:
		t.Fatal("no signal on Short after a failed head")
	}
	again := &msg{"a", "1"}
	if run := q.Admit([]*msg{again}, keyOf); !slices.Equal(run, []*msg{again}) {
		t.Fatalf("run %v, want a1 read again, ahead of a2", run)
	}
	if q.Awaiting() {
		t.Fatal("Awaiting = true once the head came back")
	}
	if next, ok := q.Settled("a"); !ok || next != a2 {
		t.Fatalf("after a1: %v %v, want a2", next, ok)
	}
}

func TestDropAndStopReturnWhatWaitsBehindAHead(t *testing.T) {
	q := keyorder.New[*msg]()
	a1, a2, b1, b2 := &msg{"a", "1"}, &msg{"a", "2"}, &msg{"b", "3"}, &msg{"b", "4"}
	q.Admit([]*msg{a1, a2, b1, b2}, keyOf)
	if got := q.Drop("a"); !slices.Equal(got, []*msg{a2}) {
		t.Fatalf("drop: %v, want a2", got)
	}
	if got := q.Stop(); !slices.Equal(got, []*msg{b2}) {
		t.Fatalf("stop: %v, want b2", got)
	}
	if _, ok := q.Settled("b"); ok {
		t.Fatal("a stopped queue handed a delivery over")
	}
}
