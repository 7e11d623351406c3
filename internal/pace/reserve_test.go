package pace

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// slotTimes lists the starts of s's slots on the limiter's clock.
func slotTimes(s Slots) []time.Time {
	var at []time.Time
	for k := range s.Waits {
		at = append(at, s.At.Add(time.Duration(k)*s.Interval))
	}
	return at
}

// Two processes take batches of slots at once, on the database's clock, the
// way workers take them before receiving: no slot is handed to both, no two
// are closer than the interval (so no window holds more than the rate
// allows), and none starts beyond the max wait of the moment it was taken.
func TestReserveNFromTwoProcessesNeverOverlaps(t *testing.T) {
	b := setup(t)
	rate := Rate{200, time.Second}
	const maxWait = 200 * time.Millisecond
	limiters := []*Limiter{mustNew(t, b.process(t), "sandbox", rate), mustNew(t, b.process(t), "sandbox", rate)}
	var (
		mu     sync.Mutex
		slots  []time.Time
		wg     sync.WaitGroup
		denied int
		errs   = make(chan error, 8)
	)
	for _, l := range limiters {
		for g := range 4 {
			wg.Go(func() {
				for i := range 40 {
					s, err := l.ReserveN(ctx, 1+(g+i)%10, maxWait)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					slots = append(slots, slotTimes(s)...)
					if len(s.Waits) == 0 {
						denied++
					}
					mu.Unlock()
					for k, w := range s.Waits {
						// Each wait is measured on this process's clock from
						// the answer; the slot's start lies within max wait
						// of the database's "now", give or take the trip.
						if w > maxWait+50*time.Millisecond || (k > 0 && w < s.Waits[k-1]) {
							errs <- fmt.Errorf("slot %d of %d waits %s: beyond max wait %s or before the one before",
								k, len(s.Waits), w, maxWait)
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(slots) == 0 {
		t.Fatal("no slot was granted")
	}
	t.Logf("%d slots granted, %d batches refused", len(slots), denied)
	checkSpacing(t, slots, rate.Interval())
}

// With the clock standing still, ReserveN takes the slots that start within
// max wait and no more, exactly an interval apart, and a refusal takes
// nothing and says where the earliest slot is.
func TestReserveNTakesWhatFitsTheMaxWait(t *testing.T) {
	b := setup(t)
	rate := Rate{10, time.Second} // 100 ms apart
	l := mustNew(t, b.db.App, "sandbox", rate, WithClock(b.clk))
	other := mustNew(t, b.process(t), "sandbox", rate, WithClock(b.clk))
	s, err := l.ReserveN(ctx, 10, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(s.Waits, want) ||
		!s.At.Equal(b.clk.Now()) || s.Interval != 100*time.Millisecond {
		t.Fatalf("ReserveN(10) = %+v, want 3 slots now, +100ms, +200ms", s)
	}
	before, _ := l.State(ctx)
	if s, err := other.ReserveN(ctx, 10, 250*time.Millisecond); err != nil || len(s.Waits) != 0 || s.Wait != 300*time.Millisecond {
		t.Fatalf("another process's ReserveN with the window full = %+v, %v; want nothing taken, 300ms away", s, err)
	}
	if after, _ := l.State(ctx); after != before {
		t.Fatalf("a refused ReserveN changed the pace: %+v, then %+v", before, after)
	}
	b.clk.Advance(100 * time.Millisecond)
	if s, err := other.ReserveN(ctx, 10, 250*time.Millisecond); err != nil || !slices.Equal(s.Waits, []time.Duration{200 * time.Millisecond}) {
		t.Fatalf("after 100ms = %+v, %v; want the one slot 200ms away", s, err)
	}
	if _, err := l.ReserveN(ctx, 0, time.Second); err == nil {
		t.Error("ReserveN(0) was accepted")
	}
}

// Slots taken for messages that never came go back while no later slot was
// taken; once another reservation followed, giving back changes nothing.
func TestGiveBackOnlyTheLatestSlots(t *testing.T) {
	b := setup(t)
	rate := Rate{10, time.Second}
	l := mustNew(t, b.db.App, "sandbox", rate, WithClock(b.clk))
	other := mustNew(t, b.process(t), "sandbox", rate, WithClock(b.clk))
	s, err := l.ReserveN(ctx, 5, time.Second)
	if err != nil || len(s.Waits) != 5 {
		t.Fatalf("ReserveN(5) = %+v, %v", s, err)
	}
	kept, ok, err := l.GiveBack(ctx, s, 2)
	if err != nil || !ok || len(kept.Waits) != 3 {
		t.Fatalf("GiveBack(2) = %+v, %t, %v; want 3 kept, given back", kept, ok, err)
	}
	// The next reservation, in any process, starts at the first slot given
	// back.
	next, err := other.ReserveN(ctx, 1, time.Second)
	if err != nil || len(next.Waits) != 1 || next.Waits[0] != 300*time.Millisecond {
		t.Fatalf("after giving back = %+v, %v; want the slot 300ms away", next, err)
	}
	before, _ := l.State(ctx)
	if again, ok, err := l.GiveBack(ctx, kept, 1); err != nil || ok || len(again.Waits) != 3 {
		t.Fatalf("GiveBack after another reservation = %+v, %t, %v; want nothing given back", again, ok, err)
	}
	if after, _ := l.State(ctx); after != before {
		t.Fatalf("a refused give back changed the pace: %+v, then %+v", before, after)
	}
	// A pause moves tat too: the slots before it are not given back.
	s, _ = other.ReserveN(ctx, 2, time.Second)
	if err := l.Pause(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := other.GiveBack(ctx, s, 2); err != nil || ok {
		t.Fatalf("GiveBack after a pause = %t, %v; want nothing given back", ok, err)
	}
	if _, _, err := l.GiveBack(ctx, kept, 4); err == nil {
		t.Error("giving back more slots than were taken was accepted")
	}
}

// An unlimited limiter grants every slot now, and answers a local pause,
// without a database.
func TestReserveNUnlimited(t *testing.T) {
	t.Parallel()
	l := mustNew(t, nil, "sandbox", Unlimited)
	s, err := l.ReserveN(ctx, 4, 0)
	if err != nil || !slices.Equal(s.Waits, []time.Duration{0, 0, 0, 0}) {
		t.Fatalf("unlimited ReserveN(4) = %+v, %v; want 4 slots now", s, err)
	}
	if kept, ok, err := l.GiveBack(ctx, s, 4); err != nil || !ok || len(kept.Waits) != 0 {
		t.Fatalf("unlimited GiveBack = %+v, %t, %v", kept, ok, err)
	}
	if err := l.Pause(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if s, err := l.ReserveN(ctx, 4, time.Second); err != nil || len(s.Waits) != 0 || s.Wait <= 59*time.Minute {
		t.Fatalf("unlimited ReserveN during a local pause = %+v, %v; want nothing, ~1h away", s, err)
	}
}
