package pace

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/testdb"
)

var ctx = context.Background()

// bundle is what a pace test needs: a database, a stubbed clock, and a way
// to open more pools on it, each one standing in for a worker process.
type bundle struct {
	db  *testdb.DB
	clk *clock.Stub
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	return &bundle{db: testdb.New(t), clk: clock.NewStub(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
}

// process opens a separate pool as the application role, as a worker
// process on another machine would.
func (b *bundle) process(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", b.db.AppURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustNew(t *testing.T, db *sql.DB, account string, rate Rate, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(db, account, rate, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustReserve(t *testing.T, l *Limiter, maxWait time.Duration) Reservation {
	t.Helper()
	r, err := l.Reserve(ctx, maxWait)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkSpacing fails when two granted slots are closer than interval, which
// is the same as more than ceil(w/interval) slots in some window w.
func checkSpacing(t *testing.T, slots []time.Time, interval time.Duration) {
	t.Helper()
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap < interval {
			t.Fatalf("slots %d and %d are %s apart, closer than the interval %s", i-1, i, gap, interval)
		}
	}
}

// reserveConcurrently has every limiter reserve perGoroutine slots from
// goroutines goroutines at once, and returns the granted slots' starts.
func reserveConcurrently(t *testing.T, limiters []*Limiter, goroutines, perGoroutine int, maxWait time.Duration) []time.Time {
	t.Helper()
	var (
		mu    sync.Mutex
		slots []time.Time
		wg    sync.WaitGroup
		errs  = make(chan error, len(limiters)*goroutines)
	)
	for _, l := range limiters {
		for range goroutines {
			wg.Go(func() {
				for range perGoroutine {
					r, err := l.Reserve(ctx, maxWait)
					if err != nil {
						errs <- err
						return
					}
					if !r.Granted {
						errs <- errors.New("a reservation within max wait was not granted")
						return
					}
					mu.Lock()
					slots = append(slots, r.At)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return slots
}

// Four processes, eight goroutines each, on the database's own clock: the
// production path. No two granted slots are closer than the interval.
func TestReserveSpacesSlotsAcrossProcesses(t *testing.T) {
	b := setup(t)
	rate := Rate{1000, time.Second}
	var limiters []*Limiter
	for range 4 {
		limiters = append(limiters, mustNew(t, b.process(t), "sandbox", rate))
	}
	slots := reserveConcurrently(t, limiters, 8, 20, time.Minute)
	if len(slots) != 4*8*20 {
		t.Fatalf("granted %d slots, want %d", len(slots), 4*8*20)
	}
	checkSpacing(t, slots, rate.Interval())
}

// With the clock standing still, every slot after the first is exactly one
// interval after the one before: the pace leaves no capacity unused.
func TestReserveLeavesNoGap(t *testing.T) {
	b := setup(t)
	rate := Rate{40, time.Second}
	var limiters []*Limiter
	for range 3 {
		limiters = append(limiters, mustNew(t, b.process(t), "sandbox", rate, WithClock(b.clk)))
	}
	slots := reserveConcurrently(t, limiters, 4, 10, time.Minute)
	slices.SortFunc(slots, func(a, c time.Time) int { return a.Compare(c) })
	for i, s := range slots {
		if want := b.clk.Now().Add(time.Duration(i) * rate.Interval()); !s.Equal(want) {
			t.Fatalf("slot %d starts at %s, want %s", i, s, want)
		}
	}
}

func TestReserveWaitAndIdle(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{40, time.Second}, WithClock(b.clk))
	if r := mustReserve(t, l, 0); !r.Granted || r.Wait != 0 || !r.At.Equal(b.clk.Now()) {
		t.Fatalf("first reservation = %+v, want granted now", r)
	}
	if r := mustReserve(t, l, time.Second); !r.Granted || r.Wait != 25*time.Millisecond {
		t.Fatalf("second reservation = %+v, want granted in 25ms", r)
	}
	// An idle account banks nothing: after a minute of silence the next
	// slot is now, and the one after that is an interval later, not also now.
	b.clk.Advance(time.Minute)
	if r := mustReserve(t, l, 0); !r.Granted || r.Wait != 0 {
		t.Fatalf("after idling = %+v, want granted now", r)
	}
	if r := mustReserve(t, l, 0); r.Granted || r.Wait != 25*time.Millisecond {
		t.Fatalf("second after idling with no max wait = %+v, want not granted, 25ms away", r)
	}
}

// A slot beyond max wait is not taken: the state is exactly as before, and
// the answer says how far away the earliest slot is.
func TestReserveNotGrantedLeavesStateUnchanged(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{1, time.Second}, WithClock(b.clk))
	for range 5 {
		mustReserve(t, l, time.Minute)
	}
	before, err := l.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := mustReserve(t, l, 2*time.Second)
	if r.Granted || r.Wait != 5*time.Second || !r.At.Equal(b.clk.Now().Add(5*time.Second)) {
		t.Fatalf("reservation beyond max wait = %+v, want not granted, 5s away", r)
	}
	after, err := l.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("a refused reservation changed the pace: %+v, then %+v", before, after)
	}
	// Once the clock catches up, the same request is granted that slot.
	b.clk.Advance(3 * time.Second)
	if r := mustReserve(t, l, 2*time.Second); !r.Granted || r.Wait != 2*time.Second {
		t.Fatalf("after 3s = %+v, want granted in 2s", r)
	}
}

// A 429 seen by one process pushes back the next reservation of another.
func TestPauseFromOneProcessPushesAnother(t *testing.T) {
	b := setup(t)
	rate := Rate{40, time.Second}
	saw429 := mustNew(t, b.process(t), "sandbox", rate, WithClock(b.clk))
	other := mustNew(t, b.process(t), "sandbox", rate, WithClock(b.clk))
	bystander := mustNew(t, b.process(t), "postmark", rate, WithClock(b.clk))

	mustReserve(t, other, 0)
	if err := saw429.Pause(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := mustReserve(t, other, time.Second); r.Granted || r.Wait != 10*time.Second {
		t.Fatalf("reservation during the pause = %+v, want not granted, 10s away", r)
	}
	r := mustReserve(t, other, time.Minute)
	if !r.Granted || !r.At.Equal(b.clk.Now().Add(10*time.Second)) {
		t.Fatalf("reservation with room = %+v, want granted at the pause's end", r)
	}
	// Slots after the pause follow one another an interval apart: no burst
	// when it ends.
	if r := mustReserve(t, saw429, time.Minute); !r.At.Equal(b.clk.Now().Add(10*time.Second + rate.Interval())) {
		t.Fatalf("next reservation starts at %s, want one interval after the pause", r.At)
	}
	// A shorter Retry-After does not cut a longer pause short.
	if err := other.Pause(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	s, err := other.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !s.PausedUntil.Equal(b.clk.Now().Add(10*time.Second)) || s.TAT.Before(s.PausedUntil) {
		t.Fatalf("state after a shorter pause = %+v, want paused until +10s and tat past it", s)
	}
	// Another account's pace is its own.
	if r := mustReserve(t, bystander, 0); !r.Granted || r.Wait != 0 {
		t.Fatalf("another account's reservation = %+v, want granted now", r)
	}
}

// Pausing an account that never reserved creates its row.
func TestPauseBeforeAnyReservation(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{40, time.Second}, WithClock(b.clk))
	if err := l.Pause(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := mustReserve(t, l, time.Minute); !r.Granted || r.Wait != 3*time.Second {
		t.Fatalf("reservation after a pause = %+v, want granted in 3s", r)
	}
}

// A pause lasts at most MaxPause however long the Retry-After, through
// the limiter and through the functions themselves as the runtime role
// calls them (owed_pace_pause, owed_provider_account_trip and _probe with
// 1e15 microseconds, thirty years); a longer pause already set stands until
// it ends, and the next 429 pauses again.
func TestPausesLastAtMostMaxPause(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{40, time.Second}, WithClock(b.clk))
	if err := l.Pause(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if s, err := l.State(ctx); err != nil || !s.PausedUntil.Equal(b.clk.Now().Add(MaxPause)) {
		t.Fatalf("after a day's Retry-After: paused until %s (err %v), want %s", s.PausedUntil, err, b.clk.Now().Add(MaxPause))
	}
	b.clk.Advance(MaxPause)
	if err := l.Pause(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if s, err := l.State(ctx); err != nil || !s.PausedUntil.Equal(b.clk.Now().Add(MaxPause)) {
		t.Fatalf("the next 429: paused until %s (err %v), want another %s", s.PausedUntil, err, MaxPause)
	}
	now := b.clk.Now()
	for _, stmt := range []string{
		`SELECT owed_pace_pause('twilio', 1e15::bigint, $1)`,
		`SELECT owed_provider_account_trip('sendgrid', 1e15::bigint, 'r', 'e', $1)`,
		`SELECT owed_pace_pause('postmark', -1e15::bigint, $1)`,
	} {
		if _, err := b.db.App.Exec(stmt, now); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if _, err := b.db.App.Exec(`SELECT owed_provider_account_probe('sendgrid', 1e15::bigint, $1)`, now.Add(MaxPause)); err != nil {
		t.Fatal(err)
	}
	for account, want := range map[string]time.Time{"twilio": now.Add(MaxPause), "sendgrid": now.Add(2 * MaxPause), "postmark": now} {
		var until time.Time
		if err := b.db.App.QueryRow(`SELECT paused_until FROM owed_provider_pace WHERE account = $1`, account).Scan(&until); err != nil ||
			!until.Equal(want) {
			t.Errorf("%s paused until %s (err %v), want %s", account, until, err, want)
		}
	}
}

func TestStateOfUnknownAccount(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{40, time.Second}, WithClock(b.clk))
	s, err := l.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Now.Equal(b.clk.Now()) || !s.TAT.IsZero() || !s.PausedUntil.IsZero() {
		t.Fatalf("state of an unknown account = %+v, want only the clock", s)
	}
}

// Next reads how far away the next slot is and takes nothing: the slot it
// names is the one the next reservation gets, a pause pushes it back, and
// an unlimited limiter answers without a database.
func TestNextReadsTheSlotWithoutTakingIt(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{10, time.Second}, WithClock(b.clk))
	next := func() time.Duration {
		t.Helper()
		d, err := l.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := next(); d != 0 {
		t.Fatalf("Next of an unknown account = %s, want 0", d)
	}
	for range 3 {
		mustReserve(t, l, time.Minute)
	}
	for range 2 {
		if d := next(); d != 300*time.Millisecond {
			t.Fatalf("Next after three slots = %s, want 300ms", d)
		}
	}
	if r := mustReserve(t, l, time.Minute); !r.Granted || r.Wait != 300*time.Millisecond {
		t.Fatalf("reservation after Next = %+v, want the slot Next named (300ms)", r)
	}
	b.clk.Advance(time.Second)
	if d := next(); d != 0 {
		t.Fatalf("Next once the slots passed = %s, want 0", d)
	}
	if err := l.Pause(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := next(); d != 5*time.Second {
		t.Fatalf("Next during a 5s pause = %s, want 5s", d)
	}

	unlimited := mustNew(t, nil, "sandbox", Unlimited, WithClock(b.clk))
	if d, err := unlimited.Next(ctx); err != nil || d != 0 {
		t.Fatalf("unlimited Next = %s, %v, want 0 without a database", d, err)
	}
	if err := unlimited.Pause(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, err := unlimited.Next(ctx); err != nil || d != time.Minute {
		t.Fatalf("unlimited Next during its local pause = %s, %v, want 1m", d, err)
	}
}

func TestWaitSleepsUntilTheSlot(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{40, time.Second}, WithClock(b.clk))
	mustReserve(t, l, 0)
	start := time.Now()
	r, err := l.Wait(ctx, time.Second)
	if err != nil || !r.Granted {
		t.Fatalf("Wait = %+v, %v", r, err)
	}
	if slept := time.Since(start); slept < r.Wait {
		t.Fatalf("Wait returned after %s, before its slot %s away", slept, r.Wait)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Wait(cancelled, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v, want context.Canceled", err)
	}
}

// An unlimited limiter's reservations cost nothing: a closed pool proves no
// statement ran. Only a 429 writes, to share the pause.
func TestUnlimitedReservationsNeverTouchTheDatabase(t *testing.T) {
	t.Parallel()
	closed, err := sql.Open("postgres", "postgres://nowhere.invalid/owed")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for _, db := range []*sql.DB{closed, nil} {
		l := mustNew(t, db, "sandbox", Unlimited)
		if r := mustReserve(t, l, 0); !r.Granted || r.Wait != 0 {
			t.Fatalf("unlimited reservation = %+v, want granted now", r)
		}
		if r, err := l.Wait(ctx, 0); err != nil || !r.Granted {
			t.Fatalf("unlimited Wait = %+v, %v", r, err)
		}
		if _, err := l.State(ctx); db == nil && err != nil {
			t.Fatal(err)
		}
		// A 429 from a provider configured as unlimited pauses this process,
		// and every process sharing the database when there is one.
		err := l.Pause(ctx, time.Hour)
		if db == nil && err != nil {
			t.Fatal(err)
		}
		if db != nil && err == nil {
			t.Fatal("Pause on a closed pool reported no error: the pause was not shared")
		}
		if r := mustReserve(t, l, time.Second); r.Granted || r.Wait <= 59*time.Minute {
			t.Fatalf("unlimited reservation during a local pause = %+v, want not granted, ~1h away", r)
		}
	}
}

// An unlimited limiter's local pause runs on the limiter's clock, like
// everything else it decides.
func TestUnlimitedPauseRunsOnTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l := mustNew(t, nil, "sandbox", Unlimited, WithClock(clk))
	if err := l.Pause(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r := mustReserve(t, l, time.Second); r.Granted || r.Wait != time.Minute {
		t.Fatalf("reservation during the pause = %+v, want not granted, 1m away", r)
	}
	if s, err := l.State(ctx); err != nil || !s.Now.Equal(clk.Now()) || !s.PausedUntil.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("state during the pause = %+v, %v", s, err)
	}
	clk.Advance(time.Minute)
	if r := mustReserve(t, l, 0); !r.Granted || r.Wait != 0 {
		t.Fatalf("reservation after the pause = %+v, want granted now", r)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		db      *sql.DB
		account string
		rate    Rate
	}{
		{"empty account", &sql.DB{}, "", Rate{40, time.Second}},
		{"long account", &sql.DB{}, string(make([]byte, MaxAccountLength+1)), Rate{40, time.Second}},
		{"sub-microsecond rate", &sql.DB{}, "sandbox", Rate{2000, time.Millisecond}},
		{"no database", nil, "sandbox", Rate{40, time.Second}},
		{"count without period", &sql.DB{}, "sandbox", Rate{Count: 40}},
		{"negative count", &sql.DB{}, "sandbox", Rate{-1, time.Second}},
	} {
		if _, err := New(c.db, c.account, c.rate); err == nil {
			t.Errorf("%s: New succeeded", c.name)
		}
	}
	if _, err := New(nil, "sandbox", Unlimited, WithClock(nil)); err == nil {
		t.Error("New with a nil clock succeeded")
	}
	l := mustNew(t, nil, "sandbox", Unlimited)
	if _, err := l.Reserve(ctx, -time.Second); err == nil {
		t.Error("Reserve with a negative max wait succeeded")
	}
	if err := l.Pause(ctx, -time.Second); err == nil {
		t.Error("Pause with a negative retry-after succeeded")
	}
}

// Under contention with a short max wait, some reservations are refused. A
// refusal must report the latest state, not a stale snapshot: the slot it
// names lies beyond max wait, or it would have been granted. The injected
// clock runs at real speed so that grants and refusals interleave, and it
// makes each statement's "now" exact.
func TestRefusalsUnderContentionReportTheLatestSlot(t *testing.T) {
	b := setup(t)
	running := clock.Offset(b.clk.Now().Sub(time.Now()))
	rate := Rate{200, time.Second}
	const maxWait = 40 * time.Millisecond
	var (
		mu       sync.Mutex
		slots    []time.Time
		refusals int
		wg       sync.WaitGroup
		errs     = make(chan error, 32)
	)
	for range 4 {
		l := mustNew(t, b.process(t), "sandbox", rate, WithClock(running))
		for range 8 {
			wg.Go(func() {
				for range 30 {
					r, err := l.Reserve(ctx, maxWait)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if r.Granted {
						slots = append(slots, r.At)
					} else {
						refusals++
					}
					mu.Unlock()
					if !r.Granted && r.Wait <= maxWait {
						errs <- errors.New("a refusal named a slot within max wait: " + r.Wait.String())
						return
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
	if refusals == 0 {
		t.Fatal("no reservation was refused; the test did not contend")
	}
	checkSpacing(t, slots, rate.Interval())
	t.Logf("granted=%d refused=%d", len(slots), refusals)
}

// The offset estimate keeps the sample with the fastest round trip, because
// its midpoint is the closest to when the database read its clock, until it
// is too old to trust.
func TestClockOffsetPrefersTheFastestRoundTrip(t *testing.T) {
	t.Parallel()
	var c clockOffset
	base := time.Now()
	db := func(local time.Time, ahead time.Duration) time.Time { return local.Add(ahead).Round(0) }

	// A slow sample: the database's clock was read late in a 40ms trip.
	c.observe(base, base.Add(40*time.Millisecond), db(base.Add(39*time.Millisecond), time.Second))
	// A fast one, 1ms: its midpoint is within half a millisecond of the truth.
	c.observe(base.Add(time.Second), base.Add(time.Second+time.Millisecond),
		db(base.Add(time.Second+500*time.Microsecond), time.Second))
	// A later slow one does not replace it.
	c.observe(base.Add(2*time.Second), base.Add(2*time.Second+30*time.Millisecond),
		db(base.Add(2*time.Second+time.Millisecond), time.Second))
	if got := c.latestLocal(db(base, time.Second)).Sub(base.Round(0)); got != 500*time.Microsecond {
		t.Fatalf("latest local instant is %s after the truth, want half the fast sample's round trip", got)
	}
	// Past OffsetSampleMaxAge any sample replaces it: clocks drift.
	late := base.Add(time.Second + OffsetSampleMaxAge + time.Second)
	c.observe(late, late.Add(10*time.Millisecond), db(late.Add(5*time.Millisecond), 2*time.Second))
	if got := c.latestLocal(db(base, 2*time.Second)).Sub(base.Round(0)); got != 5*time.Millisecond {
		t.Fatalf("after the estimate aged, latest local instant is %s after the truth, want the new sample's 5ms", got)
	}
}

// On the database's clock, a reservation's wait is measured on this
// process's clock from when Reserve returned: the slot's start, translated,
// is never before that.
func TestReserveWaitOnTheDatabaseClock(t *testing.T) {
	b := setup(t)
	l := mustNew(t, b.db.App, "sandbox", Rate{10, time.Second})
	first := mustReserve(t, l, time.Second)
	second := mustReserve(t, l, time.Second)
	// The second slot is one interval after the first, or later when a busy
	// machine let more than an interval pass between the two reservations;
	// never closer.
	if !first.Granted || !second.Granted || second.At.Sub(first.At) < 100*time.Millisecond {
		t.Fatalf("reservations = %+v, %+v, want granted at least 100ms apart", first, second)
	}
	if second.Wait > 100*time.Millisecond {
		t.Fatalf("second wait = %s, want within one interval", second.Wait)
	}
}

func TestPauseRecordsTheLimitedMinute(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	start := time.Date(2026, 5, 1, 12, 0, 30, 0, time.UTC)
	clk := clock.NewStub(start)
	paced := mustNew(t, d.App, "sandbox", Rate{40, time.Second}, WithClock(clk))
	free := mustNew(t, d.App, "other", Unlimited, WithClock(clk))
	for _, step := range []struct {
		l       *Limiter
		advance time.Duration
	}{{paced, 0}, {free, 10 * time.Second}, {paced, time.Minute}, {paced, 3 * time.Minute}} {
		clk.Advance(step.advance)
		if err := step.l.Pause(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	n, err := LimitedMinutes(ctx, d.App, start.Add(-time.Hour))
	if err != nil || n != 3 {
		t.Errorf("LimitedMinutes = %d, %v; want 3 distinct minutes (two 429s in the first minute count once)", n, err)
	}
	if n, _ := LimitedMinutes(ctx, d.App, start.Add(2*time.Minute)); n != 1 {
		t.Errorf("LimitedMinutes since 12:02 = %d, want 1", n)
	}
}
