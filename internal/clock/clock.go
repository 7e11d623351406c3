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
// The package never sleeps on a stubbed instant: Sleep always waits real time
// and returns early when its context ends.
package clock

import (
	"context"
	"sync"
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
