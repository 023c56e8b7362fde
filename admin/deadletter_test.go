package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/admin"
)

func TestDeadLetterSummaryCountsAndGroupsTheDeadLettersOfARun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)

	s, err := b.insp.DeadLetterSummary(b.ctx, b.dlq, admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Count != deadTotal || s.Key != b.dlq {
		t.Fatalf("Count %d of %q, want %d of %q", s.Count, s.Key, deadTotal, b.dlq)
	}
	all := b.entries(t, b.dlq)
	if s.Oldest != all[0].ID || s.Newest != all[len(all)-1].ID || !s.OldestAt.Equal(admin.IDTime(all[0].ID)) || s.NewestAt.Before(s.OldestAt) {
		t.Fatalf("oldest %s at %v, newest %s at %v; want the stream's first and last entries %s, %s", s.Oldest, s.OldestAt, s.Newest, s.NewestAt, all[0].ID, all[len(all)-1].ID)
	}
	wantReason := "max attempts reached (2 of 2)"
	if len(s.ByReason) != 1 || s.ByReason[0].Value != wantReason || s.ByReason[0].Count != deadTotal {
		t.Fatalf("ByReason %+v, want one group %q of %d", s.ByReason, wantReason, deadTotal)
	}
	if len(s.ByError) != 2 ||
		s.ByError[0].Value != "payment provider unavailable" || s.ByError[0].Count != deadUnavailable ||
		s.ByError[1].Value != "card <n> declined" || s.ByError[1].Count != deadDeclined {
		t.Fatalf("ByError %+v, want %d unavailable then %d \"card <n> declined\"", s.ByError, deadUnavailable, deadDeclined)
	}
	newest, err := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{IDs: []string{s.ByError[1].Newest}}, 0)
	if err != nil || len(newest) != 1 || s.ByError[1].Example != newest[0].Error || newest[0].Error == s.ByError[1].Value {
		t.Fatalf("the declined group's example %q (newest %s: %+v, %v), want the newest one's error as written", s.ByError[1].Example, s.ByError[1].Newest, newest, err)
	}
	if len(s.BySource) != 1 || s.BySource[0].Value != b.in || s.BySource[0].Count != deadTotal {
		t.Fatalf("BySource %+v, want one group %q of %d", s.BySource, b.in, deadTotal)
	}

	t.Run("FilterNarrowsTheSummary", func(t *testing.T) {
		s, err := b.insp.DeadLetterSummary(b.ctx, b.dlq, admin.Filter{Error: "declined", Headers: map[string]string{"region": "us"}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Count != deadDeclined-1 {
			t.Fatalf("Count %d, want %d (the declined dead letters from us)", s.Count, deadDeclined-1)
		}
	})

	t.Run("TimeRangeFromEntryIDs", func(t *testing.T) {
		first, last := admin.IDTime(all[0].ID), admin.IDTime(all[len(all)-1].ID)
		got, err := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{Since: first, Until: last}, 0)
		if err != nil || len(got) != deadTotal {
			t.Fatalf("DeadLetters in [%v, %v] = %d, %v; want all %d", first, last, len(got), err, deadTotal)
		}
		got, err = b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{Since: last.Add(time.Millisecond)}, 0)
		if err != nil || len(got) != 0 {
			t.Fatalf("DeadLetters after the newest = %d, %v; want none", len(got), err)
		}
		got, err = b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{Until: first.Add(-time.Millisecond)}, 0)
		if err != nil || len(got) != 0 {
			t.Fatalf("DeadLetters before the oldest = %d, %v; want none", len(got), err)
		}
	})

	t.Run("DeadLettersReadSettlesHeaders", func(t *testing.T) {
		got, err := b.insp.DeadLetters(b.ctx, b.dlq, admin.Filter{}, 2)
		if err != nil || len(got) != 2 {
			t.Fatalf("DeadLetters limit 2 = %d, %v", len(got), err)
		}
		d := got[0]
		if d.Source != b.in || d.Reason != wantReason || d.OriginalID == "" || d.Error == "" || d.ID != all[0].ID || d.Headers[settle.HeaderRetryCount] != "2" {
			t.Fatalf("dead letter %+v, want its settle headers read out", d)
		}
	})
}

func TestNormalizeErrorGroupsErrorsThatDifferInIDsAndNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, a, b, want string
	}{
		{"Digits", "order 123 failed", "order 456 failed", "order <n> failed"},
		{"HexIDs", "object 5f2b9c1d0e7a failed", "object a9e8d7c6b5f4 failed", "object <hex> failed"},
		{"UUIDs", "job 123e4567-e89b-12d3-a456-426614174000: timeout", "job 00000000-0000-0000-0000-00000000000a: timeout", "job <uuid>: timeout"},
		{"ZeroX", "bad pointer 0xc000123456", "bad pointer 0x1f", "bad pointer <hex>"},
		{"PanicStackDropped", "panic: boom\ngoroutine 7 [running]:", "panic: boom\ngoroutine 9 [running]:", "panic: boom"},
		{"WhiteSpaceFolded", "card  4242\tdeclined ", "card 1 declined", "card <n> declined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := admin.NormalizeError(tt.a); got != tt.want {
				t.Fatalf("NormalizeError(%q) = %q, want %q", tt.a, got, tt.want)
			}
			if got := admin.NormalizeError(tt.b); got != tt.want {
				t.Fatalf("NormalizeError(%q) = %q, want %q", tt.b, got, tt.want)
			}
		})
	}
	if a, b := admin.NormalizeError("card declined"), admin.NormalizeError("provider unavailable"); a == b {
		t.Fatalf("different errors normalise alike: %q", a)
	}
}

func TestDeadLettersRefusesBadInputNamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t)
	str := b.r.Key("a-string")
	if err := b.r.Client.Set(b.ctx, str, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	missing := b.r.Key("missing")
	for _, tt := range []struct {
		name   string
		key    string
		f      admin.Filter
		target error
		names  string
	}{
		{"MissingKey", missing, admin.Filter{}, admin.ErrKeyNotFound, missing},
		{"WrongType", str, admin.Filter{}, admin.ErrWrongType, str},
		{"IDNotFound", b.dlq, admin.Filter{IDs: []string{"1-1"}}, admin.ErrEntryNotFound, "1-1"},
		{"ReasonDoesNotCompile", b.dlq, admin.Filter{Reason: "max (attempts"}, nil, "max (attempts"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.insp.DeadLetterSummary(b.ctx, tt.key, tt.f)
			if err == nil || (tt.target != nil && !errors.Is(err, tt.target)) || !contains(err, tt.names) {
				t.Fatalf("DeadLetterSummary(%q, %+v) = %v, want %v naming %q", tt.key, tt.f, err, tt.target, tt.names)
			}
		})
	}
}
