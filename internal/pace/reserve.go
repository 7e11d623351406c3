package pace

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// MaxReserveN is the most slots one ReserveN may ask for.
const MaxReserveN = 1000

// Reservation is the answer to one Reserve.
type Reservation struct {
	// Granted says the slot was taken. When false, nothing changed and Wait
	// is how far away the earliest slot was: put the message back on the
	// queue with a delay of at least Wait minus the max wait, so it returns
	// when a slot is within reach.
	Granted bool
	// Wait is how long to wait before sending, from the moment Reserve
	// returned (from the stubbed clock's reading, when WithClock injected
	// one). It is never negative.
	Wait time.Duration
	// At is the slot's start on the limiter's clock (the database's unless a
	// clock was injected); zero for an unlimited limiter.
	At time.Time
}

// Slots is the answer to one ReserveN.
type Slots struct {
	// Waits are the slots taken, earliest first and one Interval apart, each
	// as how long to wait before sending in it, measured like
	// Reservation.Wait. Empty when the earliest free slot starts beyond the
	// max wait; nothing was taken then.
	Waits []time.Duration
	// Wait is how far away the first slot is: Waits[0] when one was taken,
	// otherwise the earliest free slot, as for a refused Reservation.
	Wait time.Duration
	// At is the first slot's start on the limiter's clock; zero for an
	// unlimited limiter.
	At time.Time
	// Interval is how far apart the slots are; zero for an unlimited
	// limiter.
	Interval time.Duration
	// end is the account's tat right after this reservation: GiveBack hands
	// slots back only while it is still there.
	end time.Time
}

// Reserve takes the next free slot if it starts within maxWait, and says how
// long to wait before sending. If it starts later, nothing is taken and the
// Reservation says how far away it is: the caller should return the message
// to the queue with a delay rather than hold it. One statement, one round
// trip, either way (ReserveN of one slot).
func (l *Limiter) Reserve(ctx context.Context, maxWait time.Duration) (Reservation, error) {
	s, err := l.ReserveN(ctx, 1, maxWait)
	if err != nil {
		return Reservation{}, err
	}
	return Reservation{Granted: len(s.Waits) == 1, Wait: s.Wait, At: s.At}, nil
}

// ReserveN takes up to n of the account's next free slots, as many as start
// within maxWait, in one statement: a worker takes the slots for a batch of
// messages before it receives them, so workers in other processes cannot
// take the same slots meanwhile. The slots follow one another an interval
// apart from greatest(tat, now, paused_until), as Reserve's do. None beyond
// maxWait is taken: with the earliest one beyond it, nothing is, and Slots
// says how far away it is. A slot taken and not used costs one interval of
// capacity, never a burst; GiveBack returns the last ones while no later
// slot was taken.
func (l *Limiter) ReserveN(ctx context.Context, n int, maxWait time.Duration) (Slots, error) {
	if n < 1 || n > MaxReserveN {
		return Slots{}, fmt.Errorf("pace: reserve %d slots: ask for 1 to %d", n, MaxReserveN)
	}
	if maxWait < 0 {
		return Slots{}, fmt.Errorf("pace: max wait %s must not be negative", maxWait)
	}
	if l.rate.IsUnlimited() {
		s := Slots{Wait: l.localPause()}
		if s.Wait <= maxWait {
			for range n {
				s.Waits = append(s.Waits, s.Wait)
			}
		}
		return s, nil
	}
	var (
		tat, now       time.Time
		paused, newTat sql.NullTime
		sent, received time.Time
		err            error
		// stubbed is the clock's one reading for this reservation, nil
		// when the database's clock decides.
		stubbed = l.clock.NowOrNil()
	)
	// An account's first reservation finds no row to lock. It creates the
	// row with nothing taken and asks again; the second statement's
	// snapshot sees the row, whichever process inserted it.
	for try := 0; try < 2; try++ {
		sent = time.Now()
		err = l.db.QueryRowContext(ctx, qReserveN, l.account, l.interval, ceilMicros(maxWait), stubbed, n).
			Scan(&tat, &paused, &newTat, &now)
		received = time.Now()
		if !errors.Is(err, sql.ErrNoRows) || try > 0 {
			break
		}
		if _, err = l.db.ExecContext(ctx, qCreate, l.account, stubbed); err != nil {
			return Slots{}, fmt.Errorf("pace: create the row of %q: %w", l.account, err)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Slots{}, fmt.Errorf("pace: reserve %q: the account's row is not visible; "+
			"was it deleted from owed_provider_pace?", l.account)
	}
	if err != nil {
		return Slots{}, fmt.Errorf("pace: reserve %q: %w", l.account, err)
	}
	// The statement answers the row as it found it (locked) and as it left
	// it, and the instant it computed from: the first slot and the count
	// follow exactly, in whole microseconds.
	interval := time.Duration(l.interval) * time.Microsecond
	start := latest(tat, now, paused.Time)
	taken := 0
	if newTat.Valid {
		taken = int(newTat.Time.Sub(start) / interval)
		if taken < 1 || taken > n || !start.Add(time.Duration(taken)*interval).Equal(newTat.Time) {
			return Slots{}, fmt.Errorf("pace: reserve %q: tat moved from %s to %s, not by whole intervals of %s from %s",
				l.account, tat, newTat.Time, interval, start)
		}
	}
	s := Slots{At: start, Interval: interval, end: newTat.Time}
	if stubbed != nil {
		// A stubbed instant stands still during the statement: the wait is
		// exactly the distance from it.
		s.Wait = start.Sub(now)
	} else {
		// Measuring the wait from the answer's arrival adds the statement's
		// return trip, which varies by milliseconds under load, to every
		// send: enough for a provider with a small burst to see two sends
		// closer than its interval. The clock offset estimated from the
		// fastest recent statement usually places the slot more tightly;
		// both bounds are never early, so the earlier of the two is used.
		l.offset.observe(sent, received, now)
		local := received.Add(start.Sub(now))
		if estimated := l.offset.latestLocal(start); estimated.Before(local) {
			local = estimated
		}
		s.Wait = time.Until(local)
	}
	for k := range taken {
		s.Waits = append(s.Waits, max(s.Wait+time.Duration(k)*interval, 0))
	}
	s.Wait = max(s.Wait, 0)
	return s, nil
}

// GiveBack returns the last k slots of s to the account, if no slot was
// taken after them (the account's tat is still where s left it), so a
// worker that took slots for messages the queue did not have gives the
// capacity back. It answers s without those slots and whether they went
// back; when they did not, they stay taken and simply go unused. Giving
// back never moves another process's slots: those all lie after s's end.
func (l *Limiter) GiveBack(ctx context.Context, s Slots, k int) (Slots, bool, error) {
	if k < 1 || k > len(s.Waits) {
		return s, false, fmt.Errorf("pace: give back %d of %d slots", k, len(s.Waits))
	}
	kept := s
	kept.Waits = s.Waits[:len(s.Waits)-k]
	if l.rate.IsUnlimited() {
		// An unlimited account's slots cost nothing to take or leave.
		return kept, true, nil
	}
	back := time.Duration(k) * s.Interval
	var n int64
	if err := l.db.QueryRowContext(ctx, qGiveBack, l.account, s.end, ceilMicros(back), l.clock.NowOrNil()).
		Scan(&n); err != nil {
		return s, false, fmt.Errorf("pace: give back %d slots of %q: %w", k, l.account, err)
	}
	if n == 0 {
		return s, false, nil
	}
	kept.end = s.end.Add(-back)
	return kept, true, nil
}

// Wait reserves a slot and sleeps until it starts. A slot further away than
// maxWait is not taken and not waited for: the Reservation says how far away
// it was, as with Reserve. A cancelled context ends the sleep with ctx.Err();
// the slot it held goes unused, which costs one interval of capacity and
// never causes a burst.
func (l *Limiter) Wait(ctx context.Context, maxWait time.Duration) (Reservation, error) {
	r, err := l.Reserve(ctx, maxWait)
	if err != nil || !r.Granted || r.Wait == 0 {
		return r, err
	}
	t := time.NewTimer(r.Wait)
	defer t.Stop()
	select {
	case <-t.C:
		return r, nil
	case <-ctx.Done():
		return r, ctx.Err()
	}
}

// latest is the latest of the instants, as SQL's greatest(): a zero one
// (a NULL paused_until) counts for nothing.
func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}
