package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/payload"
)

// gateMinSleep is the shortest pause of a fetcher that found no room, so a
// pace answering "a moment from now" is not asked again in a busy loop.
const gateMinSleep = 10 * time.Millisecond

// gate keeps the worker from consuming messages it cannot send soon (every
// receive counts on SQS, and a message received only to be handed back
// costs one). Before each receive a fetcher asks the pace of every provider
// account the worker serves how far away its next free slot is and how far
// apart its slots are (Pacer.Next: a read, nothing is taken), and counts the
// slots that start within the max wait (PaceMaxWait). The messages already
// received and not yet past their reservation are subtracted: they will
// take those slots. What is left, at most consumeBatch, sizes the receive;
// when nothing is left the fetcher sleeps, cancellably, until a slot comes
// within reach, instead of receiving.
//
// Messages for every account share one queue, and a message's account is
// known only once its row is claimed and routed. So with several accounts
// the room is the sum of each account's slots within the max wait (an
// unlimited account's is unbounded) less every message held, and the
// fetcher waits only while every account's next slot is further than the
// max wait, or the held messages fill the slots there are. A message whose
// account has no slot after all when it reserves is returned with
// ChangeVisibility until its slot, as before. The gate counts only this
// process's held messages: workers in other processes sharing an account
// may take a slot a fetcher here counted, and the message that loses it is
// returned the same way.
type gate struct {
	// paces are the paces of the accounts the worker serves; with none
	// (no channel routes to a provider) the gate is always open, so the
	// messages are received and settled failed for want of a provider.
	paces   []Pacer
	maxWait time.Duration
	// mu serialises the room reads of the fetchers, so two of them never
	// count the same slot.
	mu sync.Mutex
	// held counts the messages received, or being received, that have not
	// reserved their slot or left without one.
	held atomic.Int64
}

// newGate builds the gate over the accounts o's router serves: the
// distinct provider names of every channel it routes.
func newGate(o Options) *gate {
	g := &gate{maxWait: o.PaceMaxWait}
	seen := map[string]bool{}
	for _, ch := range payload.Channels() {
		s, err := o.Route(ch)
		if err != nil || s == nil || seen[s.Name()] {
			continue
		}
		seen[s.Name()] = true
		g.paces = append(g.paces, o.Pace(s.Name()))
	}
	return g
}

// take waits until the pace has room and returns how many messages to
// receive (1 to consumeBatch), counted as held: the caller gives back with
// done what it did not receive. It returns 0 when ctx ends, and an error
// when an account's pace could not be read and no other has room.
func (g *gate) take(ctx context.Context) (int, error) {
	for {
		n, sleep, err := g.room(ctx)
		if n > 0 || err != nil {
			return n, err
		}
		if !clock.Sleep(ctx, max(sleep, gateMinSleep)) {
			return 0, nil
		}
	}
}

// done gives back n held messages: they reserved their slot, or left (or
// were never received) without one.
func (g *gate) done(n int) { g.held.Add(-int64(n)) }

// room counts the slots within the max wait less the held messages and,
// when there is room, takes it (at most consumeBatch). With no room it
// says how long until the accounts' slots could cover one more message
// than is held.
func (g *gate) room(ctx context.Context) (n int, sleep time.Duration, err error) {
	if len(g.paces) == 0 {
		g.held.Add(consumeBatch)
		return consumeBatch, 0, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	held := int(g.held.Load())
	type outlook struct{ wait, interval time.Duration }
	var (
		accounts []outlook
		slots    int
		errs     []error
	)
	for _, p := range g.paces {
		wait, interval, err := p.Next(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case wait > g.maxWait:
		case interval <= 0:
			// An unlimited account takes whatever comes.
			slots += held + consumeBatch
		default:
			slots += 1 + int((g.maxWait-wait)/interval)
		}
		accounts = append(accounts, outlook{wait, interval})
	}
	if room := slots - held; room > 0 {
		n = min(room, consumeBatch)
		g.held.Add(int64(n))
		return n, 0, nil
	}
	if len(errs) > 0 {
		return 0, 0, errors.Join(errs...)
	}
	// Slot number k (from 0) of an account starts wait + k·interval from
	// now and enters the window maxWait before that. The window must hold
	// one slot more than are held; any one account getting there is
	// enough, so the earliest of them is when to look again.
	short := held - slots + 1
	sleep = -1
	for _, a := range accounts {
		k := short - 1
		if a.wait <= g.maxWait {
			k += 1 + int((g.maxWait-a.wait)/a.interval)
		}
		at := a.wait + time.Duration(k)*a.interval - g.maxWait
		if sleep < 0 || at < sleep {
			sleep = at
		}
	}
	return 0, sleep, nil
}
