// Package clock owns owed's one notion of "now".
//
// Every service takes a Clock at construction; none reads time.Now itself.
// In production the Clock is Real: Go code reads the wall clock, and SQL
// reads the database's clock, because NowOrNil returns nil and every
// statement that needs the time is written coalesce($n, now()). The database
// is the one clock every process shares, so leases and paces stamped by it
// do not drift with a host's clock.
//
// Tests use a Stub, which fixes the instant for Go and SQL alike ("an hour has
// passed" without waiting an hour). A computation never mixes the two: it
// either takes its instants from one Clock, or asks the database for a
// duration and measures that with a timer.
//
// Durations are measured on Readings (Read), never by subtracting two Nows:
// Real's Now drops Go's monotonic reading (it is rounded for Postgres), so
// the difference of two Nows moves with every step of the host's wall clock
// (NTP, an operator setting the date), while the difference of two of Real's
// Readings does not. A test clock's Readings are its instants, so "an hour
// passes" on a Stub is an hour between its Readings too. Stepping is the
// host whose wall clock is stepped while time goes on.
//
// The package never sleeps on a stubbed instant: Sleep always waits real time
// and returns early when its context ends.
package clock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time.
type Clock interface {
	// Now is the current instant in UTC, rounded to the microsecond Postgres
	// keeps, so a value written and read back compares equal.
	Now() time.Time
	// NowOrNil is nil when the database's clock should decide (production),
	// or the stubbed instant. Pass it as the $n of coalesce($n, now()).
	NowOrNil() *time.Time
}

// Real is the production clock: the wall clock in Go, the database's in SQL.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time       { return round(time.Now()) }
func (realClock) NowOrNil() *time.Time { return nil }
func (realClock) Reading() Reading     { return Reading{time.Now()} }

// Reading is a clock's reading taken to measure a duration, never to tell
// the date: the time between two Readings, or from a Reading to a deadline
// placed after it (Add). Readings of a Monotonic clock carry Go's monotonic
// reading, which no step of the wall clock moves; any other clock's
// Readings are its instants. Compare only Readings of one clock.
type Reading struct{ t time.Time }

// Monotonic is a clock whose durations are measured on a monotonic time
// line rather than between its wall instants: Real, Offset and Stepping.
type Monotonic interface {
	Clock
	Reading() Reading
}

// Read takes c's Reading now: its monotonic one when c is Monotonic, else
// its instant, so a test clock that moves its instants moves the time
// between its Readings too.
func Read(c Clock) Reading {
	if m, ok := c.(Monotonic); ok {
		return m.Reading()
	}
	return Reading{c.Now()}
}

// Add returns the Reading d after r: a deadline.
func (r Reading) Add(d time.Duration) Reading { return Reading{r.t.Add(d)} }

// Sub returns the duration r-u.
func (r Reading) Sub(u Reading) time.Duration { return r.t.Sub(u.t) }

// After reports whether r is later than u.
func (r Reading) After(u Reading) bool { return r.t.After(u.t) }

// Stub is a clock that stands still until it is set or advanced. It is safe
// for concurrent use.
type Stub struct {
	mu  sync.Mutex
	now time.Time
}

// NewStub returns a Stub reading t.
func NewStub(t time.Time) *Stub { return &Stub{now: round(t)} }

// Now returns the stubbed instant.
func (s *Stub) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// NowOrNil returns the stubbed instant, so SQL uses it too.
func (s *Stub) NowOrNil() *time.Time {
	t := s.Now()
	return &t
}

// Set moves the stub to t.
func (s *Stub) Set(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = round(t)
}

// Advance moves the stub forward by d and returns the new instant.
func (s *Stub) Advance(d time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = round(s.now.Add(d))
	return s.now
}

// Offset is a clock that runs with the wall clock, shifted by a fixed
// amount: a process whose clock is wrong, or a test that moves one service an
// hour ahead while time keeps flowing. SQL sees its instant too.
type Offset time.Duration

// Now returns the wall clock plus the offset.
func (o Offset) Now() time.Time { return round(time.Now().Add(time.Duration(o))) }

// NowOrNil returns Now, so SQL uses the shifted instant.
func (o Offset) NowOrNil() *time.Time {
	t := o.Now()
	return &t
}

// Reading is Go's monotonic reading: the offset moves no duration.
func (Offset) Reading() Reading { return Reading{time.Now()} }

// Stepping is the clock of a host whose wall clock is stepped while time
// goes on, as NTP or an operator's `date -s` steps it: Now is the wall clock
// plus an offset that Step moves at once, Reading is Go's monotonic reading,
// which no step moves, and SQL reads the database's clock, as with Real (the
// database runs on another host, whose clock did not step). A test gives it
// to a service to prove that a step moves none of its deadlines. It is safe
// for concurrent use.
type Stepping struct{ offset atomic.Int64 }

// Now returns the wall clock plus the steps so far.
func (s *Stepping) Now() time.Time {
	return round(time.Now().Add(time.Duration(s.offset.Load())))
}

// NowOrNil is nil: SQL reads the database's clock, which no step moved.
func (*Stepping) NowOrNil() *time.Time { return nil }

// Reading is Go's monotonic reading, which no step moves.
func (*Stepping) Reading() Reading { return Reading{time.Now()} }

// Step moves the wall clock by d (backwards when d < 0) at once.
func (s *Stepping) Step(d time.Duration) { s.offset.Add(int64(d)) }

// Sleep waits d of real time, or until ctx ends; it reports whether the whole
// wait elapsed. A wait of zero or less returns true at once unless ctx has
// already ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func round(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
