package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
)

// beatsPerVisibility is how many heartbeats fit in one visibility timeout:
// the claim's lease and the message's visibility are renewed every third of
// it, so two beats in a row may fail before either runs out.
const beatsPerVisibility = 3

// leaseFor is how long a claim, and each heartbeat, holds the row: long
// enough for a whole send after a beat the worker could not make.
func (e *executor) leaseFor() time.Duration { return e.sendTimeout + e.visibilityTimeout }

// beat is the interval of a claim's heartbeat.
func (e *executor) beat() time.Duration { return e.visibilityTimeout / beatsPerVisibility }

// sendKeep is how much of the claim's lease the check before the send
// makes sure of (ledger.StartSends): the longest send, a beat in which the
// heartbeat takes over, and a beat for the check's own round trip, since the
// worker reckons the lease from before its request. A claim made less than
// a beat before its send has that much left already, so the check leaves
// the lease alone and its ledger update can be HOT.
func (e *executor) sendKeep() time.Duration { return e.sendTimeout + 2*e.beat() }

// claimLease keeps one claim alive from the claim to the outcome write:
// every beat it extends the row's lease in the ledger (fenced by the
// claim's Hold) and the message's visibility in the queue, so neither the
// sweep nor another worker takes the row while this worker is resolving,
// waiting for the pace or the due second, or sending, however long that
// takes. It stops at the first beat that finds the claim lost: the message
// is then left to surface again.
//
// It also knows how long the claim is certainly still the worker's without
// asking the ledger. The ledger stamps a lease from its own clock, so the
// lease's end is never compared with the worker's clock. Instead each grant
// is reckoned from the worker's own reading taken before the request left:
// the ledger's now was later than that, so the lease ends no sooner than
// that reading plus the lease's length, and the worker's clock only has to
// measure the time since (its offset from the database's clock, however
// large, cancels out). The readings are clock.Readings, so a step of the
// host's wall clock does not stretch the lease either.
type claimLease struct {
	e  *executor
	dl *delivery

	mu sync.Mutex
	// until is the Reading of the worker's clock before which the claim
	// is certainly still the worker's.
	until clock.Reading
	lost  bool

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// holdClaim starts the heartbeat of dl's claim, which the ledger granted
// for leaseFor in answer to a request made at asked (the worker clock's
// Reading).
func (e *executor) holdClaim(dl *delivery, asked clock.Reading) *claimLease {
	cl := &claimLease{e: e, dl: dl, until: asked.Add(e.leaseFor()), stop: make(chan struct{}), done: make(chan struct{})}
	go cl.run()
	return cl
}

func (cl *claimLease) run() {
	defer close(cl.done)
	t := time.NewTicker(cl.e.beat())
	defer t.Stop()
	for {
		select {
		case <-cl.stop:
			return
		case <-t.C:
		}
		err := cl.renew()
		if errors.Is(err, ledger.ErrClaimLost) && !cl.dl.digest.held() {
			// Not ours any more: the message is not this worker's to keep
			// hidden either. A digest whose lead alone was taken back is
			// still its members' (promote).
			return
		}
		if err != nil {
			cl.dl.log.Warn().Err(err).Msg("could not extend the claim's lease; trying again at the next beat")
		}
		cl.e.keepVisible(cl.dl)
	}
}

// renew extends the claim's lease in the ledger now: nil when it did,
// ledger.ErrClaimLost when the claim is no longer the row's.
func (cl *claimLease) renew() error {
	err := cl.ask(cl.e.extends, cl.e.leaseFor())
	if err == nil || errors.Is(err, ledger.ErrClaimLost) {
		// A digest's members' claims are their own: kept while the
		// worker holds them, whatever became of the lead's.
		cl.e.extendMembers(cl.dl, false)
	}
	return err
}

// ask extends the claim's lease through b (the heartbeat's extends, or the
// check before the send's starts) and records the answer: a grant of at
// least granted from the ledger's now (leaseFor for the heartbeat,
// sendKeep for the check).
func (cl *claimLease) ask(b *batcher[ledger.Hold, struct{}], granted time.Duration) error {
	asked := clock.Read(cl.e.clock)
	_, err := b.do(cl.hold())
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch {
	case err == nil:
		if until := asked.Add(granted); until.After(cl.until) {
			cl.until = until
		}
	case errors.Is(err, ledger.ErrClaimLost):
		cl.lost = true
	}
	return err
}

// startSend is the check right before the send: it reports whether the
// claim is still the worker's with at least need of its lease left, and
// makes it irrevocable (ledger.StartSends). It always asks the ledger: a
// cancel or reschedule that landed since the claim revoked it there
// (ledger.ClaimParams.Revocable), which nothing in this process can know.
// It reports false with a nil error when the claim is lost or revoked, and
// an error when the ledger could not say.
func (cl *claimLease) startSend(need time.Duration) (bool, error) {
	if err := cl.ask(cl.e.starts, cl.e.sendKeep()); errors.Is(err, ledger.ErrClaimLost) {
		if !cl.promote() {
			return false, nil
		}
	} else if err != nil {
		return false, err
	}
	cl.e.extendMembers(cl.dl, true)
	if left, _ := cl.left(); left < need {
		return false, fmt.Errorf("the claim's lease was extended, but only %s of it is left for a send of up to %s", left, need)
	}
	return true, nil
}

// hold is the claim the lease keeps: the delivery's, which a digest's
// promote may change under the heartbeat.
func (cl *claimLease) hold() ledger.Hold {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.dl.hold
}

// left is how much of the claim's lease is certainly left, and whether the
// claim is known to be lost.
func (cl *claimLease) left() (time.Duration, bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.until.Sub(clock.Read(cl.e.clock)), cl.lost
}

// end stops the heartbeat and waits for a beat under way to finish, so
// nothing extends the lease or the visibility after the outcome is written.
// It is safe to call more than once.
func (cl *claimLease) end() {
	cl.stopOnce.Do(func() { close(cl.stop) })
	<-cl.done
}

// keepVisible extends the message's visibility by another visibility
// timeout, so the queue does not hand it to another worker while its row is
// held.
func (e *executor) keepVisible(dl *delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := e.queue.ChangeVisibility(ctx, dl.msg.Receipt, e.visibilityTimeout); err != nil {
		dl.log.Warn().Err(err).Msg("extend visibility failed")
	}
}

// flushExtends extends one batch of claims' leases in one ledger statement.
func (e *executor) flushExtends(ctx context.Context, holds []ledger.Hold) ([]struct{}, []error) {
	return e.flushHolds(ctx, holds, e.ledger.ExtendClaims)
}

// flushStarts makes one batch of checks before the send in one ledger
// statement.
func (e *executor) flushStarts(ctx context.Context, holds []ledger.Hold) ([]struct{}, []error) {
	return e.flushHolds(ctx, holds, func(ctx context.Context, holds []ledger.Hold, leaseFor time.Duration) ([]error, error) {
		return e.ledger.StartSends(ctx, holds, leaseFor, e.sendKeep())
	})
}

func (e *executor) flushHolds(ctx context.Context, holds []ledger.Hold,
	extend func(context.Context, []ledger.Hold, time.Duration) ([]error, error)) ([]struct{}, []error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	errs, err := extend(ctx, holds, e.leaseFor())
	if err != nil {
		return nil, fill(len(holds), err)
	}
	return nil, errs
}

// claimLost ends a delivery whose claim was superseded: its lease ran out
// while this worker stalled or could not reach the ledger, and another
// worker (or the sweep) has taken the row since. The write the worker tried
// changed nothing, and the message is left exactly as it is: not acked,
// returned or dead-lettered. It is no longer this worker's to decide: the
// worker holding the row now may hold this very message, and a return or a
// dead-letter through this receipt could hide it from that worker or remove
// it. Left alone, it surfaces after its visibility timeout (the heartbeat no
// longer extends it) and is absorbed or held like any other copy. A claim
// a cancel or reschedule revoked before its send (startSend) ends here too:
// its message then finds the row cancelled or moved, and is acked.
func (c *completer) claimLost(dl *delivery, during string) {
	dl.lease.end()
	c.metrics.outcome("claim_lost")
	dl.log.Warn().Str("during", during).Int64("claim_seq", dl.hold.Seq).
		Msg("claim superseded (another worker or the sweep holds the row now) or revoked by a cancel or reschedule; the message is left alone")
}
