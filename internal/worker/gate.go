package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
)

// gateMinSleep is the shortest pause of a fetcher that found no room, so a
// pace answering "a moment from now" is not asked again in a busy loop.
const gateMinSleep = 10 * time.Millisecond

// gateMaxSleep is the longest a fetcher sleeps before asking the pace
// again: a paused account (a 429, or an account error's open circuit) may
// be resumed early (owedctl provider resume, another worker's probe), and
// the fetcher should notice within seconds, not at the pause's end.
const gateMaxSleep = 5 * time.Second

// gate keeps the worker from consuming messages it cannot send soon (every
// receive counts on SQS, and a message received only to be handed back
// costs one).
//
// When the worker serves exactly one provider account and its pace is
// limited, the gate takes the slots before it receives (pre-taking): one
// statement reserves up to consumeBatch of the account's next slots that
// start within the max wait (PaceMaxWait) in the shared pace row
// (pace.Limiter.ReserveN), and the fetcher receives at most as many
// messages as this process holds slots for and no message has claimed. The
// slots go into a pool, earliest first; each message takes the earliest one
// when it reserves (slot, from executor.reserve) and sleeps until it. Slots
// are taken in Postgres, so workers in other processes sharing the account
// never receive for the same slots: a message received is a message with a
// slot, and a backlog behind a provider limit is received about once per
// delivery however many processes drain it.
//
// Slots received for but unused go back or to the next message. When a
// receive brings fewer messages than slots were taken for, the surplus at
// the end of the process's latest reservation goes back to the pace if no
// process reserved after it (pace.Limiter.GiveBack); otherwise it stays in
// the pool, as does the slot of a message that leaves without sending
// (stale, settled, early, held by another worker), for the next message or
// the next receive. A pooled slot that passed has expired and is dropped,
// so a pooled slot is never used late (a late send, followed by another
// process's on time, would reach the provider closer than the pace). A
// stopped or crashed process wastes what its pool holds, at most
// the max wait of the account's slots. A 429 (Pause) pushes the shared
// pace back as before; slots already pooled are not revoked, as slots
// reserved before the pause never were.
//
// Slots held through a receive that waits on an empty queue would pass
// unused and push every new message's slot back by up to the max wait, so
// the gate pre-takes only while there is a backlog: from the start, and
// after each receive that came back full. After a short receive it gates
// as it does for several accounts, below, until a receive comes back full
// again; an idle or lightly loaded worker sends a new message at once.
//
// With several accounts, or an unlimited one, the gate takes nothing
// ahead: messages of every account share one queue and a message's
// account is known only once its row is claimed and routed, so no count of
// slots taken ahead would match the messages received. Before each receive
// a fetcher then asks the pace of every account how far away its next free
// slot is and how far apart its slots are (Pacer.Next: a read, nothing is
// taken) and counts the slots that start within the max wait, plus the
// pooled ones. The messages received and not yet past their reservation
// are subtracted: they will take those slots. What is left, at most
// consumeBatch, sizes the receive; when nothing is left the fetcher sleeps,
// cancellably, until a slot comes within reach. The room is the sum of
// each account's slots (an unlimited account's is unbounded), and the
// fetcher waits only while every account's next slot is further than the
// max wait, or the held messages fill the slots there are. Workers in
// other processes may take a slot a fetcher counted, and a message whose
// account has no slot after all when it reserves is returned with
// ChangeVisibility until its slot.
//
// A held account (an operator's hold, pauses.held) counts no slots, and
// the single account the gate takes slots ahead for is not reserved for
// while it is held: when every account is held the fetchers receive
// nothing and look again every gateMaxSleep, so the backlog waits in the
// queue rather than cycling through claims.
type gate struct {
	// paces are the paces of the accounts the worker serves; with none
	// (no channel routes to a provider) the gate is always open, so the
	// messages are received and settled failed for want of a provider.
	paces []Pacer
	// names are the paces' accounts, in the same order.
	names   []string
	maxWait time.Duration
	clock   clock.Clock
	// account and ahead are the one limited account the gate takes slots
	// ahead for, and its pace; ahead is nil when it takes none.
	account string
	ahead   slotPacer
	// live is the worker's liveness: each pace reading is a step of it.
	live *liveness
	// onHold says on-call holds the account (pauses.held): the gate receives
	// nothing for it, so a held account's backlog waits in the queue
	// instead of being claimed and handed back every minute.
	onHold func(ctx context.Context, account string) bool
	// wake is how many slots a pre-taking fetcher lets come within reach
	// before it asks the pace again: one statement per slot would have
	// every process's fetchers ask at every interval.
	wake int

	// fetch serialises the fetchers' counts and reservations, so two of
	// them never count the same slot.
	fetch sync.Mutex
	// mu guards the rest; it is never held across a statement except a
	// give back.
	mu sync.Mutex
	// held counts the messages received, or being received, that have not
	// reserved their slot or left without one.
	held int
	// pool holds the slots taken ahead and not yet claimed, as Readings of
	// the worker's clock (a step of its wall clock moves none of them),
	// earliest first.
	pool []clock.Reading
	// last is the process's latest reservation; its lastLeft unclaimed
	// slots are the pool's tail, the only ones that may go back.
	last     pace.Slots
	lastLeft int
	// backlog says the latest receive came back full (or none came back
	// yet): pre-take.
	backlog bool
	// notBefore is when the next slot worth asking for comes within reach,
	// a Reading like the pool's.
	notBefore clock.Reading
}

// slotPacer is a Pacer that takes several slots in one statement and gives
// the last ones back: pace.Limiter, through the service's adapter.
type slotPacer interface {
	Pacer
	Rate() pace.Rate
	ReserveN(ctx context.Context, n int, maxWait time.Duration) (pace.Slots, error)
	GiveBack(ctx context.Context, s pace.Slots, k int) (pace.Slots, bool, error)
}

// newGate builds the gate over the accounts o's router serves: the
// distinct provider names of every channel it routes. The same walk creates
// each routed account and channel's send series (Metrics.route), so the
// router is asked once per channel at start.
func newGate(o Options) *gate {
	g := &gate{maxWait: o.PaceMaxWait, clock: o.Clock, backlog: true}
	var names []string
	for _, ch := range payload.Channels() {
		s, err := o.Route(ch)
		if err != nil || s == nil {
			continue
		}
		o.Metrics.route(s.Name(), ch)
		if slices.Contains(names, s.Name()) {
			continue
		}
		names = append(names, s.Name())
		g.paces = append(g.paces, o.Pace(s.Name()))
		g.names = names
	}
	if len(g.paces) == 1 {
		if sp, ok := g.paces[0].(slotPacer); ok && !sp.Rate().IsUnlimited() {
			interval := sp.Rate().Interval()
			g.account, g.ahead = names[0], sp
			g.wake = min(consumeBatch, 1+int(g.maxWait/2/interval))
		}
	}
	return g
}

// take waits until the pace has room and returns how many messages to
// receive (1 to consumeBatch), counted as held: the caller reports with
// received what came back. It returns 0 when ctx ends, and an error when
// an account's pace could not be read and no other has room.
func (g *gate) take(ctx context.Context) (int, error) {
	for {
		end := g.live.begin("reading the pace", 0)
		n, sleep, err := g.room(ctx)
		end()
		if n > 0 || err != nil {
			return n, err
		}
		if !clock.Sleep(ctx, min(max(sleep, gateMinSleep), gateMaxSleep)) {
			return 0, nil
		}
	}
}

// received reports a receive for asked messages (from take) that brought
// got: the rest are no longer held. A full receive means a backlog, so the
// gate takes slots ahead; a short one gives back what the pool holds
// beyond the held messages, where it can.
func (g *gate) received(ctx context.Context, asked, got int) {
	g.fetch.Lock()
	defer g.fetch.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held -= asked - got
	if g.ahead == nil {
		return
	}
	g.backlog = got == asked
	g.expire()
	if k := min(len(g.pool)-g.held, g.lastLeft); got < asked && k > 0 {
		kept, ok, err := g.ahead.GiveBack(ctx, g.last, k)
		if err == nil && ok {
			g.last, g.lastLeft, g.pool = kept, g.lastLeft-k, g.pool[:len(g.pool)-k]
		}
	}
}

// done gives back n held messages: they left (or were never handed out)
// without reserving a slot.
func (g *gate) done(n int) {
	g.mu.Lock()
	g.held -= n
	g.mu.Unlock()
}

// slot hands a message of account the earliest slot taken ahead for it,
// and says how long to wait for it; ok is false when the gate holds none
// (another account, no slot taken ahead, or all expired): the message
// reserves its own.
func (g *gate) slot(account string) (wait time.Duration, ok bool) {
	if g.ahead == nil || account != g.account {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire()
	if len(g.pool) == 0 {
		return 0, false
	}
	at := g.pool[0]
	g.drop(1)
	return max(at.Sub(clock.Read(g.clock)), 0), true
}

// expire drops the pooled slots that passed.
func (g *gate) expire() {
	now := clock.Read(g.clock)
	n := 0
	for n < len(g.pool) && now.After(g.pool[n]) {
		n++
	}
	g.drop(n)
}

// drop removes the pool's first n slots.
func (g *gate) drop(n int) {
	g.pool = g.pool[n:]
	g.lastLeft = min(g.lastLeft, len(g.pool))
}

// room returns how many messages to receive now, counted as held, or how
// long to sleep before asking again.
func (g *gate) room(ctx context.Context) (n int, sleep time.Duration, err error) {
	if len(g.paces) == 0 {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.held += consumeBatch
		return consumeBatch, 0, nil
	}
	g.fetch.Lock()
	defer g.fetch.Unlock()
	if g.ahead != nil && g.onHold(ctx, g.account) {
		return 0, gateMaxSleep, nil
	}
	g.mu.Lock()
	ahead := g.ahead != nil && g.backlog
	g.mu.Unlock()
	if ahead {
		return g.takeAhead(ctx)
	}
	return g.count(ctx)
}

// takeAhead reserves slots for the next receive, unless the pool already
// holds a batch beyond the held messages, or the last answer said no slot
// is worth asking for yet.
func (g *gate) takeAhead(ctx context.Context) (n int, sleep time.Duration, err error) {
	g.mu.Lock()
	g.expire()
	free, now := len(g.pool)-g.held, clock.Read(g.clock)
	ask := free < consumeBatch && !g.notBefore.After(now)
	g.mu.Unlock()
	if ask {
		s, rerr := g.ahead.ReserveN(ctx, min(consumeBatch-free, pace.MaxReserveN), g.maxWait)
		err = rerr
		g.mu.Lock()
		if err == nil {
			now = clock.Read(g.clock)
			for _, w := range s.Waits {
				g.pool = append(g.pool, now.Add(w))
			}
			if len(s.Waits) > 0 {
				g.last, g.lastLeft = s, len(s.Waits)
			}
			// The next slot beyond these is the earliest free one; ask
			// again when wake slots from it are within reach.
			next := s.Wait
			if len(s.Waits) > 0 {
				next = s.Waits[len(s.Waits)-1] + s.Interval
			}
			g.notBefore = now.Add(next - g.maxWait + time.Duration(g.wake-1)*s.Interval)
		}
		g.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if free := len(g.pool) - g.held; free > 0 {
		n = min(free, consumeBatch)
		g.held += n
		return n, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	return 0, g.notBefore.Sub(clock.Read(g.clock)), nil
}

// count sizes the receive by the slots within the max wait that no
// process took yet, without taking them, plus the pooled ones, less the
// held messages. With no room it says how long until the accounts' slots
// could cover one more message than is held.
func (g *gate) count(ctx context.Context) (n int, sleep time.Duration, err error) {
	g.mu.Lock()
	g.expire()
	pooled := len(g.pool)
	g.mu.Unlock()
	type outlook struct{ wait, interval time.Duration }
	var (
		accounts []outlook
		slots    = pooled
		errs     []error
		unbound  bool
	)
	for i, p := range g.paces {
		if g.onHold(ctx, g.names[i]) {
			continue
		}
		wait, interval, err := p.Next(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case wait > g.maxWait:
		case interval <= 0:
			// An unlimited account takes whatever comes.
			unbound = true
		default:
			slots += 1 + int((g.maxWait-wait)/interval)
		}
		accounts = append(accounts, outlook{wait, interval})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	held := g.held
	if unbound {
		slots += held + consumeBatch
	}
	if room := slots - held; room > 0 {
		n = min(room, consumeBatch)
		g.held += n
		return n, 0, nil
	}
	if len(errs) > 0 {
		return 0, 0, errors.Join(errs...)
	}
	if len(accounts) == 0 {
		// Every account is held: look again as a resume would want.
		return 0, gateMaxSleep, nil
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
