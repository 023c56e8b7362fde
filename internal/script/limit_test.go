package script_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/internal/script"
)

const limitT0 = int64(1_700_000_000_000) // a fixed "now" in ms: the scripts take it as ARGV

// take runs LimitTake with no reservation horizon: a delivery that cannot start now is
// told when to ask again, and takes nothing.
func take(t *testing.T, r *redistest.Redis, limits []script.Limit, token string, now int64) (time.Duration, int, error) {
	t.Helper()
	res, err := script.LimitTake(context.Background(), r.Client, limits, token, 0, now)
	if res.Reserved {
		t.Fatalf("take %s reserved with no horizon", token)
	}
	return res.Wait, res.Which, err
}

func TestLimitTakeRateSpacesStartsByTheIntervalAfterTheBurst(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	rate := script.Limit{Key: r.Key("rate"), Interval: 100 * time.Millisecond, Burst: 3}
	var got []string
	for i := range 5 {
		wait, which, err := take(t, r, []script.Limit{rate}, fmt.Sprint(i), limitT0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v/%d", wait, which))
	}
	// Three at once (the burst), then each waits until the tolerance lets one more in.
	if want := "[0s/-1 0s/-1 0s/-1 100ms/0 100ms/0]"; fmt.Sprint(got) != want {
		t.Fatalf("takes at one instant: got %v, want %s", got, want)
	}
	if wait, _, _ := take(t, r, []script.Limit{rate}, "x", limitT0+100); wait != 0 {
		t.Fatalf("after one interval: wait %v, want a start", wait)
	}
	if wait, _, _ := take(t, r, []script.Limit{rate}, "y", limitT0+100); wait != 100*time.Millisecond {
		t.Fatalf("second take after one interval: wait %v, want 100ms", wait)
	}
}

func TestLimitTakeRateKeyExpiresOnceIdle(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	rate := script.Limit{Key: r.Key("rate"), Interval: time.Second, Burst: 1}
	if _, _, err := take(t, r, []script.Limit{rate}, "a", limitT0); err != nil {
		t.Fatal(err)
	}
	ttl, err := r.Client.PTTL(ctx, rate.Key).Result()
	if err != nil || ttl <= 0 || ttl > time.Second+time.Millisecond {
		t.Fatalf("rate key ttl %v (%v), want at most one interval", ttl, err)
	}
}

func TestLimitTakeRefusedTakesNothingOfItsOtherLimits(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	slots := script.Limit{Key: r.Key("slots"), Slots: 1, Lease: time.Minute}
	rate := script.Limit{Key: r.Key("rate"), Interval: time.Hour, Burst: 1}
	if wait, _, err := take(t, r, []script.Limit{rate}, "first", limitT0); err != nil || wait != 0 {
		t.Fatalf("first take: %v %v", wait, err)
	}
	wait, which, err := take(t, r, []script.Limit{slots, rate}, "second", limitT0)
	if err != nil || wait != time.Hour || which != 1 {
		t.Fatalf("take under a spent rate: wait %v which %d (%v), want 1h by limit 1", wait, which, err)
	}
	if n, _ := r.Client.ZCard(ctx, slots.Key).Result(); n != 0 {
		t.Fatalf("a refused take leased %d slots, want none", n)
	}
}

func TestLimitSlotsOfACrashedHolderComeFreeWhenTheLeaseEnds(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	slots := script.Limit{Key: r.Key("slots"), Slots: 1, Lease: 30 * time.Second}
	if wait, _, _ := take(t, r, []script.Limit{slots}, "crashed", limitT0); wait != 0 {
		t.Fatalf("first take waits %v", wait)
	}
	wait, _, _ := take(t, r, []script.Limit{slots}, "other", limitT0+10_000)
	if wait != 20*time.Second {
		t.Fatalf("take while leased: wait %v, want the lease's end (20s)", wait)
	}
	if wait, _, _ := take(t, r, []script.Limit{slots}, "other", limitT0+30_000); wait != 0 {
		t.Fatalf("take once the lease ended: wait %v, want a start", wait)
	}
}

func TestLimitHolderThatLostItsSlotCannotReleaseOrRenewAnothers(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	slots := script.Limit{Key: r.Key("slots"), Slots: 1, Lease: 30 * time.Second}
	take(t, r, []script.Limit{slots}, "stalled", limitT0)
	if wait, _, _ := take(t, r, []script.Limit{slots}, "next", limitT0+31_000); wait != 0 {
		t.Fatalf("take after the stalled lease ended: wait %v", wait)
	}
	lost, err := script.LimitRenew(ctx, r.Client, []string{slots.Key}, []string{"stalled"}, 30*time.Second, limitT0+32_000)
	if err != nil || fmt.Sprint(lost) != "[0]" {
		t.Fatalf("renew of a lost slot: lost %v (%v), want [0]", lost, err)
	}
	if n, err := script.LimitRelease(ctx, r.Client, []string{slots.Key}, []string{"stalled"}); err != nil || n != 0 {
		t.Fatalf("release by the stalled holder freed %d (%v), want 0", n, err)
	}
	if wait, _, _ := take(t, r, []script.Limit{slots}, "third", limitT0+32_000); wait == 0 {
		t.Fatal("the next holder's slot was freed by the stalled one")
	}
	if lost, _ := script.LimitRenew(ctx, r.Client, []string{slots.Key}, []string{"next"}, 30*time.Second, limitT0+50_000); len(lost) != 0 {
		t.Fatalf("renew of a held slot lost %v", lost)
	}
	if wait, _, _ := take(t, r, []script.Limit{slots}, "third", limitT0+70_000); wait == 0 {
		t.Fatal("a renewed lease ended at its old end")
	}
	if n, _ := script.LimitRelease(ctx, r.Client, []string{slots.Key}, []string{"next"}); n != 1 {
		t.Fatalf("release by the holder freed %d, want 1", n)
	}
}

func TestLimitTakeReservesAStartWithinTheHorizonAndRefusesBeyondIt(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	rate := script.Limit{Key: r.Key("rate"), Interval: 100 * time.Millisecond, Burst: 1}
	var got []string
	for i := range 5 {
		res, err := script.LimitTake(ctx, r.Client, []script.Limit{rate}, fmt.Sprint(i), 250*time.Millisecond, limitT0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v/%v", res.Wait, res.Reserved))
	}
	// Now, then reserved 100ms and 200ms ahead; the next start (300ms) is past the
	// horizon: ask again once it is within it (50ms), having taken nothing.
	if want := "[0s/false 100ms/true 200ms/true 50ms/false 50ms/false]"; fmt.Sprint(got) != want {
		t.Fatalf("takes at one instant: got %v, want %s", got, want)
	}
}

// LimitWaiting keeps each process's waiting counts until they expire, removes a
// process's field when it reports nothing waiting, and sweeps the fields of processes
// that stopped reporting.
func TestLimitWaitingKeepsEachProcessesCountsUntilTheyExpire(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	key := r.Key("waiting")
	if n, err := script.LimitWaiting(ctx, r.Client, key, "p1", []int{3, 0}, 3*time.Second, limitT0); err != nil || n != 1 {
		t.Fatalf("p1 reports: %d live, %v; want 1", n, err)
	}
	if n, err := script.LimitWaiting(ctx, r.Client, key, "p2", []int{1, 2}, 3*time.Second, limitT0+2000); err != nil || n != 2 {
		t.Fatalf("p2 reports: %d live, %v; want 2", n, err)
	}
	v, err := r.Client.HGet(ctx, key, "p2").Result()
	if err != nil {
		t.Fatal(err)
	}
	if exp, counts, ok := script.ParseLimitWaiting(v); !ok || exp != limitT0+5000 || fmt.Sprint(counts) != "[1 2]" {
		t.Fatalf("p2's field %q reads %d %v %v; want expiry %d, [1 2]", v, exp, counts, ok, limitT0+5000)
	}
	// p1's counts expired at T0+3s: p2's next report sweeps them.
	if n, err := script.LimitWaiting(ctx, r.Client, key, "p2", []int{0, 1}, 3*time.Second, limitT0+3500); err != nil || n != 1 {
		t.Fatalf("p2 reports after p1 expired: %d live, %v; want 1", n, err)
	}
	if ok, _ := r.Client.HExists(ctx, key, "p1").Result(); ok {
		t.Fatal("p1's expired counts were not swept")
	}
	// Nothing waits in p2 now: its field goes, and with it the hash.
	if n, err := script.LimitWaiting(ctx, r.Client, key, "p2", []int{0, 0}, 3*time.Second, limitT0+4000); err != nil || n != 0 {
		t.Fatalf("p2 reports nothing waiting: %d live, %v; want 0", n, err)
	}
	if n, _ := r.Client.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("the hash outlived its last process's field")
	}
}

// mostInWindow returns the most of starts (sorted, µs) in any half-open window of w.
func mostInWindow(starts []int64, w int64) int {
	most, j := 0, 0
	for i := range starts {
		for starts[i]-starts[j] >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

func TestLimitTakeRateNeverLetsAWindowOfThePeriodSeeMoreThanNPlusBurst(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	// A mount-wide limit of 100/s (burst 3) and a per-key one of 20/s (burst 2) over 8
	// keys (160/s asked of it): twelve askers in four processes ask for 10 s of the
	// scripts' clock (ARGV now, in ms), each again 0-2 ms after its last start, or when
	// told to; a reserved start begins at now + wait. Every start's time is recorded
	// under each limit it passed.
	const per, secs = int64(1_000_000), 10 // µs, s
	global := script.Limit{Key: r.Key("rate:all"), Interval: 10 * time.Millisecond, Burst: 3}
	byKey := func(k int) script.Limit {
		return script.Limit{Key: r.Key(fmt.Sprintf("rate:k%d", k)), Interval: 50 * time.Millisecond, Burst: 2}
	}
	rng := rand.New(rand.NewPCG(26, 6))
	next := make([]int64, 12) // each asker's next ask, in ms from limitT0
	var all []int64
	keyed := map[int][]int64{}
	for {
		a := 0
		for i := range next {
			if next[i] < next[a] {
				a = i
			}
		}
		now := next[a]
		if now >= secs*1000 {
			break
		}
		k := rng.IntN(8)
		res, err := script.LimitTake(ctx, r.Client, []script.Limit{global, byKey(k)}, fmt.Sprint(len(all)), time.Second, limitT0+now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Wait > 0 && !res.Reserved {
			next[a] = now + max(res.Wait.Milliseconds(), 1)
			continue
		}
		at := now*1000 + res.Wait.Microseconds()
		all = append(all, at)
		keyed[k] = append(keyed[k], at)
		next[a] = now + rng.Int64N(3)
	}
	slices.Sort(all)
	if most := mostInWindow(all, per); most > 100+3 {
		t.Fatalf("the mount-wide limit (100/s, burst 3) let %d starts into one second, want at most 103", most)
	}
	if rate := float64(len(all)) / secs; rate < 95 {
		t.Fatalf("the mount-wide limit started %.1f/s, want within 5%% of 100", rate)
	}
	for k, starts := range keyed {
		slices.Sort(starts)
		if most := mostInWindow(starts, per); most > 20+2 {
			t.Fatalf("key %d's limit (20/s, burst 2) let %d starts into one second, want at most 22: a start reserved by the other limit counts from when it begins", k, most)
		}
	}
}
