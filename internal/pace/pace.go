// Package pace owns the send rate shared by every worker process that sends
// through one provider account: the owed_provider_pace table, one row per account,
// and every statement that reads or writes it.
//
// The pace is GCRA (the generic cell rate algorithm) kept in Postgres. The row
// holds tat, the theoretical arrival time: the next slot starts at
// greatest(tat, now, paused_until), and taking it moves tat one interval past
// that start, in one statement that locks the row first. K processes
// reserving concurrently therefore get slots exactly one interval apart,
// never closer, and an idle account does not bank capacity for a burst.
// ReserveN takes several consecutive slots in that one statement (a worker
// takes the slots for a batch before it receives the batch), Reserve is
// ReserveN of one, and GiveBack moves tat back over the last slots of a
// reservation only while no later one was taken, so giving back never frees
// a slot another process holds.
//
// The database's clock is the truth. Workers run on different machines whose
// clocks drift apart; the one clock every process reaches is the server's, so
// slots are computed from clock_timestamp() and handed back as a duration to
// wait, which the worker's own clock measures well however wrong its wall
// time is. A Limiter takes one clock.Clock at construction (WithClock,
// clock.Real by default) and passes its NowOrNil as every statement's "now"
// (coalesce($n, clock_timestamp())): nil in production, so the database
// decides; a stub's instant in tests.
//
// The package also owns owed's one rate grammar: Rate and ParseRate read the
// workers' OWED_PROVIDER_RATE, the sandbox's limit and the dev stack's --rate
// alike, and *Rate decodes itself from the environment.
//
// A 429 is a schedule: Pause records Retry-After in the shared row, so every
// process's next reservation starts after it, not just the one that saw it,
// whether or not the account's rate is limited. An account error (an expired
// credential) pauses the account through the same row (Accounts, in
// account.go), until one worker's probe succeeds or on-call resumes it.
//
// The package never holds a message: a slot further away than the caller's
// max wait is not taken, and the caller puts the message back on the queue
// with a delay instead of sleeping on it (messages wait in the queue, not in
// worker memory). A Limiter over an unlimited Rate takes no slots, so its
// reservations never touch the database; its Pause and Next share the
// account's pause through it.
package pace

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/clock"
)

// CacheFor is how long a process trusts its reading that an account is
// neither paused nor held, or of the operator pauses, before it reads
// again: a pause another process records (a 429, an account error, an
// operator's) holds this process back within CacheFor, while a pause this
// process records holds it back at once. It spares a read per send, and a
// read per receive of an unlimited account (Limiter.Next).
const CacheFor = time.Second

// MaxAccountLength is the longest account name the owed_provider_pace table
// accepts.
const MaxAccountLength = 128

// State is an account's pace, for metrics and owedctl.
type State struct {
	// Now is the limiter's clock when the state was read.
	Now time.Time
	// TAT is the theoretical arrival time: no new slot starts before it.
	// TAT minus Now is how far ahead the slots already handed out reach.
	// Zero when the account never reserved or paused.
	TAT time.Time
	// PausedUntil is the end of the last 429's Retry-After; zero if none.
	PausedUntil time.Time
}

// Limiter reserves send slots for one provider account. It is safe for
// concurrent use, and any number of Limiters, in any number of processes,
// may share an account.
type Limiter struct {
	db       *sql.DB
	account  string
	rate     Rate
	interval int64 // microseconds, rounded up
	clock    clock.Clock
	offset   clockOffset

	// pausedUntil is the local pause of an unlimited limiter (see Pause).
	mu          sync.Mutex
	pausedUntil time.Time
	// clearAt is when an unlimited limiter's Next last read the shared
	// pause and found none, on the process's monotonic clock (a cache's
	// age, never compared with a database instant); zero when it did not.
	clearAt time.Time
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock sets the limiter's one clock; clock.Real() without it. Every
// statement passes clk.NowOrNil() as its "now": nil in production, so the
// database's clock_timestamp() decides, because it is the one clock every
// worker shares; a stub's instant in tests, which say "ten seconds have
// passed" without waiting. An unlimited limiter's in-memory pause reads
// clk.Now().
func WithClock(clk clock.Clock) Option {
	return func(l *Limiter) { l.clock = clk }
}

// New returns a Limiter for account, which by convention is the provider's
// Name() ("sandbox", "sendgrid:acct"): processes sharing an account share its
// pace. db must be connected as a role allowed to read and write
// owed_provider_pace; it is never used when rate is unlimited (and may then be
// nil).
func New(db *sql.DB, account string, rate Rate, opts ...Option) (*Limiter, error) {
	if account == "" || len(account) > MaxAccountLength {
		return nil, fmt.Errorf("pace: account %q must be 1 to %d bytes (the provider's Name())",
			account, MaxAccountLength)
	}
	if rate.Count < 0 || rate.Per < 0 || (rate.Count > 0) != (rate.Per > 0) || rate.tooFine() {
		return nil, fmt.Errorf("pace: rate %+v must have a positive count and period at least %s per send, "+
			"or be unlimited; build rates with ParseRate", rate, MinInterval)
	}
	if !rate.IsUnlimited() && db == nil {
		return nil, fmt.Errorf("pace: account %q: a database is required for rate %s", account, rate)
	}
	l := &Limiter{db: db, account: account, rate: rate, interval: ceilMicros(rate.Interval()), clock: clock.Real()}
	for _, o := range opts {
		o(l)
	}
	if l.clock == nil {
		return nil, fmt.Errorf("pace: account %q: WithClock(nil); leave it out for the database's clock", account)
	}
	return l, nil
}

// Account is the provider account this limiter paces.
func (l *Limiter) Account() string { return l.account }

// Rate is the rate this limiter keeps.
func (l *Limiter) Rate() Rate { return l.rate }

// MaxPause is the longest pause one call may set on an account: a 429's
// (Limiter.Pause) and the circuit's (Accounts.Trip, the probe's). The
// database caps each at it as well (owed_pace_pause,
// internal/pace/sql/pace.sql), so no login of the runtime role can pause an
// account for longer with one call. A Retry-After beyond it pauses the
// account MaxPause, and the next send's 429 pauses it again.
const MaxPause = time.Hour

// Pause records a 429 with Retry-After: no slot, in any process sharing the
// account, starts before now + retryAfter, or now + MaxPause when that is
// sooner. A longer pause already recorded stands. Slots handed out before the pause are not revoked; they were taken
// at most one max wait earlier.
//
// An unlimited limiter takes no slots, but the provider said it throttles
// after all, so the pause is shared all the same: it is recorded in the
// account's row, which every process's Next (and the worker's admission,
// Accounts.Admit) reads, and kept in memory too, so this process holds back
// at once. Without a database only the memory pause is kept.
func (l *Limiter) Pause(ctx context.Context, retryAfter time.Duration) error {
	if retryAfter < 0 {
		return fmt.Errorf("pace: pause %q: retry-after %s must not be negative", l.account, retryAfter)
	}
	retryAfter = min(retryAfter, MaxPause)
	if l.rate.IsUnlimited() {
		until := l.clock.Now().Add(retryAfter)
		l.mu.Lock()
		if until.After(l.pausedUntil) {
			l.pausedUntil = until
		}
		l.clearAt = time.Time{}
		l.mu.Unlock()
		if l.db == nil {
			return nil
		}
	}
	if _, err := l.db.ExecContext(ctx, qPause, l.account, ceilMicros(retryAfter), l.clock.NowOrNil()); err != nil {
		return fmt.Errorf("pace: pause %q: %w", l.account, err)
	}
	return nil
}

// LimitedMinutes counts the minutes since since in which a worker got a
// provider 429 on any account (owedctl stats).
func LimitedMinutes(ctx context.Context, db *sql.DB, since time.Time) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, qLimitedMinutes, since).Scan(&n)
	return n, err
}

// State reads the account's pace. An unlimited limiter without a database
// reports its local pause and its own clock.
func (l *Limiter) State(ctx context.Context) (State, error) {
	if l.rate.IsUnlimited() && l.db == nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return State{Now: l.clock.Now(), PausedUntil: l.pausedUntil}, nil
	}
	var (
		s           State
		tat, paused sql.NullTime
	)
	if err := l.db.QueryRowContext(ctx, qState, l.account, l.clock.NowOrNil()).Scan(&s.Now, &tat, &paused); err != nil {
		return State{}, fmt.Errorf("pace: state %q: %w", l.account, err)
	}
	s.TAT, s.PausedUntil = tat.Time, paused.Time
	return s, nil
}

// Next says how far away the account's next free slot is, without taking
// it: greatest(tat, now, paused_until) - now on the limiter's clock, read in
// one statement that writes nothing (State's). An unlimited limiter answers
// the longer of its local pause and the shared one (without a database, its
// local pause alone), and reads the shared one at most once every CacheFor
// while it finds none. Workers ask before each receive, so
// they do not fetch messages they could not send soon; the answer is a
// moment's picture, and a slot it shows may be taken by another process
// before the caller reserves it.
func (l *Limiter) Next(ctx context.Context) (time.Duration, error) {
	if l.rate.IsUnlimited() && l.sharedClear() {
		return l.localPause(), nil
	}
	s, err := l.State(ctx)
	if l.rate.IsUnlimited() {
		// An unlimited account takes no slots: only a pause (this
		// process's, or the one every process shares) holds it back.
		shared := s.PausedUntil.Sub(s.Now)
		l.mu.Lock()
		if err == nil && shared <= 0 && l.db != nil {
			l.clearAt = time.Now()
		} else {
			l.clearAt = time.Time{}
		}
		l.mu.Unlock()
		if err != nil {
			return 0, err
		}
		return max(shared, l.localPause(), 0), nil
	}
	if err != nil {
		return 0, err
	}
	// A zero TAT or PausedUntil (never reserved, never paused) lies far in
	// the past and counts as now.
	return max(s.TAT.Sub(s.Now), s.PausedUntil.Sub(s.Now), 0), nil
}

// sharedClear says an unlimited limiter's Next found no shared pause less
// than CacheFor ago. When that reading has just aged out, the one caller
// told so reads again and the others trust the old reading until its
// answer, instead of every fetcher reading at once.
func (l *Limiter) sharedClear() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.clearAt.IsZero() {
		return false
	}
	if time.Since(l.clearAt) < CacheFor {
		return true
	}
	l.clearAt = time.Now()
	return false
}

// localPause is how long an unlimited limiter's in-memory pause still runs.
func (l *Limiter) localPause() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(l.pausedUntil.Sub(l.clock.Now()), 0)
}

// OffsetSampleMaxAge is how long the best estimate of the database clock's
// offset is trusted before a newer, possibly slower, sample replaces it:
// clocks drift apart by up to tens of microseconds a second, so an estimate
// older than this has drifted by about as much as a fast round trip's error.
const OffsetSampleMaxAge = 10 * time.Second

// clockOffset estimates how far the database's clock is ahead of this
// process's, the way NTP does: a statement's clock reading happened somewhere
// between sending it and receiving the answer, so the midpoint is off by at
// most half the round trip, and the sample with the fastest round trip is the
// best one.
type clockOffset struct {
	mu     sync.Mutex
	offset time.Duration
	rtt    time.Duration
	at     time.Time
}

// observe considers one sample: the database read dbNow while a statement
// sent at sent was answered at received.
func (c *clockOffset) observe(sent, received, dbNow time.Time) {
	rtt := received.Sub(sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || rtt <= c.rtt || received.Sub(c.at) > OffsetSampleMaxAge {
		c.offset, c.rtt, c.at = dbNow.Sub(sent.Add(rtt/2)), rtt, received
	}
}

// latestLocal translates an instant on the database's clock to the latest
// instant on this process's clock it can be, given the estimate's error of at
// most half its round trip: waiting until then never sends early.
func (c *clockOffset) latestLocal(dbTime time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return dbTime.Add(-c.offset + c.rtt/2)
}

// ceilMicros rounds d up to whole microseconds, Postgres's resolution:
// rounding an interval down would pace faster than asked.
func ceilMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}
