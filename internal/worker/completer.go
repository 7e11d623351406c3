package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

const (
	// unavailableRetry is how long (±20%) a message waits when the ledger or
	// the pace could not be reached. The message is not at fault, so it
	// costs no attempt.
	unavailableRetry = 5 * time.Second
	// retryCap bounds the exponential backoff after transient failures.
	retryCap = 10 * time.Minute
	// settleRetry bounds how long the worker keeps trying to record an
	// accepted send before leaving the message to be redelivered.
	settleRetry = 30 * time.Second
	// writeTimeout bounds one write that records an outcome or hands a
	// message back, and one claim or ack batch. Such writes run on a
	// context detached from the worker's, because shutdown must not cut
	// them short (the provider answered, or the message would stay hidden
	// for its visibility timeout), and a detached context still has a
	// deadline.
	writeTimeout = 10 * time.Second
	// unroutedRetry is how long (±20%) the message of a row whose channel
	// no provider carries in this process waits before it comes back: long
	// enough not to spin, short enough for a rolling deploy.
	unroutedRetry = time.Minute
)

// detach returns a context that shutdown does not cancel, ending after
// writeTimeout.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
}

// completer writes every outcome of a delivery and acks (River's
// completer): accepted sends buffered into shared ledger commits, acks after
// them, the other settles, releases and hand-backs with the retry policy, the
// returns and the dead letters.
type completer struct {
	ledger  *ledger.Work
	queue   Queue
	log     zerolog.Logger
	metrics *Metrics
	clock   clock.Clock
	// The retry policy and the waits (Options' fields of the same names).
	retries         Retries
	retryBase       time.Duration
	attemptLimit    int // Options.MaxAttempts
	retryAfterMax   time.Duration
	queueDelayMax   time.Duration
	requeueAfter    time.Duration
	noUndeliverable bool
	// settles and acks share ledger commits and queue calls among the
	// messages in flight.
	settles *batcher[settle, struct{}]
	acks    *batcher[string, struct{}]
}

func newCompleter(o Options, work *ledger.Work) *completer {
	c := &completer{ledger: work, queue: o.Queue, log: o.Log, metrics: o.Metrics, clock: o.Clock,
		retries: o.Retries, retryBase: o.RetryBase, attemptLimit: o.MaxAttempts, retryAfterMax: o.RetryAfterMax,
		queueDelayMax: o.QueueDelayMax, requeueAfter: o.RequeueAfter, noUndeliverable: o.NoUndeliverable}
	c.settles = newBatcher(settleBatch, o.SettleLinger, c.flushSettles)
	c.acks = newBatcher(ackBatch, ackLinger, c.flushAcks)
	return c
}

// start runs the completer's batchers; stop flushes what they hold, the
// settles before the acks that follow them.
func (c *completer) start(ctx context.Context) {
	c.acks.start(ctx)
	c.settles.start(ctx)
}

func (c *completer) stop() {
	c.settles.stop()
	c.acks.stop()
}

// retry says when and why a released row's message comes back.
type retry struct {
	after  time.Duration
	reason string
	// attempt is recorded with the release; nil when none counts (no send
	// was made, or the provider answered 429).
	attempt *ledger.Attempt
	// uncertain says the provider may have accepted the send even so: the
	// row's next send is recorded as a possible duplicate.
	uncertain bool
	// indefinite says the wait has no end the worker knows (an operator's pause
	// of the tenant, or hold of the account): the row waits in the ledger
	// whatever after is, and after is only when it is looked at again.
	indefinite bool
}

// Every outcome write below ends the claim's heartbeat first, so nothing
// extends the lease or the message's visibility behind it, and is fenced by
// the claim's Hold: when the claim was superseded (ledger.ErrClaimLost) the
// write changed nothing and the message is left alone (claimLost).

// delivered hands an accepted send to the completer and returns: the sender
// takes its next message while the settle waits for company, as River's
// executors hand finished jobs to its completer. The completer records the
// sends that gathered in one ledger commit (flushSettles) and only then
// acks each message (settled). A full completer holds the sender here until
// a flush makes room, so no more sends finish than the ledger records.
func (c *completer) delivered(dl *delivery, a ledger.Attempt) {
	dl.lease.end()
	c.settles.post(settle{dl: dl, d: ledger.Delivered{Hold: dl.hold, Attempt: a}})
}

// settle is one accepted send waiting in the completer for its commit.
type settle struct {
	dl *delivery
	d  ledger.Delivered
}

// settled finishes one accepted send once its settle's commit answered err.
// When the ledger could not record it within settleRetry the message is
// left unacked: it is redelivered, the row is claimable when its lease
// ends, and the resend carries the same idempotency key. A send whose claim
// was superseded is still recorded, as a possible duplicate; if another
// worker holds the row now, the row and the message are left to it.
func (c *completer) settled(s settle, err error) {
	dl, a := s.dl, s.d.Attempt
	if errors.Is(err, ledger.ErrClaimLost) {
		c.claimLost(dl, "the delivered settle (the accepted send is recorded as a possible duplicate)")
		return
	}
	if err != nil {
		dl.log.Error().Err(err).Msg("provider accepted the send but the ledger could not record it; the message will be redelivered")
		return
	}
	c.metrics.outcome("delivered")
	c.metrics.lag.Observe(a.FinishedAt.Sub(dl.row.DueAt).Seconds())
	c.ack(dl.msg.Receipt)
}

// skip settles a row that is not to be sent (the contact opted out, the
// address is marked undeliverable) with reason, counts outcome and acks
// its message.
func (c *completer) skip(ctx context.Context, dl *delivery, reason, outcome string) {
	dl.lease.end()
	ctx, cancel := detach(ctx)
	defer cancel()
	err := c.ledger.SettleSkipped(ctx, dl.hold, reason)
	if errors.Is(err, ledger.ErrClaimLost) {
		c.claimLost(dl, "the skipped settle")
		return
	}
	if err != nil {
		c.returnAfter(ctx, dl.msg, jitter(unavailableRetry), "ledger unavailable")
		return
	}
	c.follow(ctx, dl, func(ctx context.Context, h ledger.Hold) error { return c.ledger.SettleSkipped(ctx, h, reason) })
	c.metrics.outcome(outcome)
	c.ack(dl.msg.Receipt)
}

// expire settles a row whose expiry passed after its claim and acks its
// message. a is the attempt that failed when the row expires because its
// next retry would land after its expiry (retryOrFail), nil when it was
// never sent.
func (c *completer) expire(ctx context.Context, dl *delivery, a *ledger.Attempt) {
	dl.lease.end()
	ctx, cancel := detach(ctx)
	defer cancel()
	err := c.ledger.SettleExpiredAfter(ctx, dl.hold, a)
	if errors.Is(err, ledger.ErrClaimLost) {
		c.claimLost(dl, "the expired settle")
		return
	}
	if err != nil {
		c.release(ctx, dl, retry{after: jitter(unavailableRetry), reason: "ledger unavailable"})
		return
	}
	c.follow(ctx, dl, func(ctx context.Context, h ledger.Hold) error { return c.ledger.SettleExpiredAfter(ctx, h, a) })
	c.metrics.outcome("expired")
	c.ack(dl.msg.Receipt)
}

// unknown hands dl back when a read it needed before the send failed (the
// account, the pace, a mark, the pauses): the row is not at fault, so it
// costs no attempt. A read the shutdown cut off is abandoned; any other
// comes back after unavailableRetry, counted as retried.
func (c *completer) unknown(ctx context.Context, dl *delivery, what string, err error) {
	if ctx.Err() != nil {
		c.abandon(ctx, dl, false)
		return
	}
	c.release(ctx, dl, retry{after: jitter(unavailableRetry), reason: what + ": " + err.Error()})
	c.metrics.outcome("retried")
}

// failure says why a row is settled failed: the cause counted in
// owed_worker_failed_total, and whether its message goes to the dead
// letters (a message owed could not process) or is acked (a recipient's
// permanent failure: recorded, not paged).
type failure struct {
	cause      string
	deadLetter bool
	// uncertain says the last send may have reached the provider even so.
	uncertain bool
}

// fail settles the row failed and dead-letters or acks its message as f
// says.
func (c *completer) fail(ctx context.Context, dl *delivery, reason string, a *ledger.Attempt, f failure) {
	dl.lease.end()
	ctx, cancel := detach(ctx)
	defer cancel()
	// As in release: a claim that came with the possible-duplicate mark
	// keeps it, so a redriven row's next send is recorded as one.
	maybe := dl.possibleDuplicate || f.uncertain
	// The dead letter is written before the row is settled failed: a worker
	// killed in between leaves the row sending, so its lease runs out and
	// the row is tried again (and dead-lettered again), instead of a failed
	// row whose message a later copy acks as a stray, leaving on-call
	// nothing to see or redrive. A dead letter the queue refused is logged
	// and the row still settles: the ledger has the failure either way.
	var dlErr error
	if f.deadLetter {
		dlErr = c.deadLetter(ctx, dl.msg, reason, "failed")
	}
	err := c.ledger.SettleFailed(ctx, dl.hold, reason, a, maybe)
	if errors.Is(err, ledger.ErrClaimLost) {
		// Another claim holds the row now; it settles the row its own way.
		c.claimLost(dl, "the failed settle")
		return
	}
	if err != nil {
		// The message is in the dead letters already, or still ours: the
		// row stays sending until its lease runs out and is then tried
		// again.
		dl.log.Warn().Err(err).Msg("could not settle the row failed; it is retried once its lease runs out")
		return
	}
	c.follow(ctx, dl, func(ctx context.Context, h ledger.Hold) error {
		return c.ledger.SettleFailed(ctx, h, reason, a, maybe)
	})
	c.metrics.outcome("failed")
	c.metrics.failed.WithLabelValues(f.cause).Inc()
	switch {
	case !f.deadLetter:
		dl.log.Info().Str("reason", reason).Msg("notification failed at the recipient; recorded, not dead-lettered")
		c.ack(dl.msg.Receipt)
	case dlErr == nil:
		dl.log.Warn().Str("reason", reason).Msg("notification failed; message dead-lettered")
	}
}

// retryOrFail records a transient failure: the row is retried after its
// channel's retry schedule says (or after retryAfter, if the provider asked
// for longer), settled failed once its attempts run out, or settled expired
// when the retry would land after the row's expiry: a late retry would be a
// late nudge, and the row did not fail.
func (c *completer) retryOrFail(ctx context.Context, dl *delivery, a ledger.Attempt, retryAfter time.Duration, uncertain bool) {
	n := dl.row.Attempts + 1
	if n >= c.maxAttempts(dl.row.Channel) {
		c.fail(ctx, dl, fmt.Sprintf("attempts exhausted (%d): %s", n, a.Error), &a,
			failure{cause: "exhausted", deadLetter: true, uncertain: uncertain})
		return
	}
	delay := c.retryDelay(dl.row.Channel, n)
	if retryAfter > delay {
		delay = min(retryAfter, c.retryAfterMax)
	}
	// Reckoned on the clock's Readings, as the check before the send is: a
	// step of the wall clock neither expires a row whose retry fits (a step
	// forwards) nor retries one whose retry would land after its expiry (a
	// step backwards).
	if exp := dl.row.ExpiresAt; exp != nil && !dl.deadline(*exp).After(clock.Read(c.clock).Add(delay)) {
		c.expire(ctx, dl, &a)
		return
	}
	c.release(ctx, dl, retry{after: delay, reason: a.Error, attempt: &a, uncertain: uncertain})
	c.metrics.outcome("retried")
}

// release gives the row back and brings its message back after r.after.
// The row's lease is computed by the ledger from its own clock (r.after
// plus RequeueAfter from its now), never from the worker's: the sweep
// republishes the row only once its message, due back after r.after, had
// the window the sweep gives a published message (OWED_REQUEUE_AFTER) to be
// received. A fixed grace longer than that window left a row whose returned
// message the queue lost (an SQS server killed -9) owed longer than one
// whose published message it lost.
func (c *completer) release(ctx context.Context, dl *delivery, r retry) {
	dl.lease.end()
	ctx, cancel := detach(ctx)
	defer cancel()
	// A claim that came with the possible-duplicate mark keeps it through
	// the release whatever this attempt's outcome: the earlier send may still
	// have reached the provider, so the send that finally happens must be
	// recorded as a possible duplicate too.
	uncertain := r.uncertain || dl.possibleDuplicate
	// A wait longer than QueueDelayMax (a retry minutes or hours away, a
	// 429's Retry-After, a paused account), or one with no known end, lives
	// in the ledger, not in the queue: a returned message stays in the
	// queue's in-flight set for its whole delay, and that set is bounded
	// and shared by every tenant (JetStream's MaxAckPending, SQS's in-flight
	// quota), so parked waits would stop everyone's deliveries. The row is
	// handed back with its not-before (ledger.HandBack): it holds none of
	// its account's capacity while it waits, and the sweep publishes it
	// again to surface then (a new queue key: the republish of a published
	// row moves its generation). The message is acked only once the ledger
	// holds the row, so the row is owed and visible all along.
	handoff := r.indefinite || r.after > c.queueDelayMax
	var err error
	if handoff {
		err = c.ledger.HandBack(ctx, dl.hold, r.after, r.reason, r.attempt, uncertain)
	} else {
		err = c.ledger.ReleaseClaim(ctx, dl.hold, r.after, c.requeueAfter, r.reason, r.attempt, uncertain)
	}
	if errors.Is(err, ledger.ErrClaimLost) {
		// Another claim holds the row: its message, maybe this very one, is
		// not this worker's to return.
		c.claimLost(dl, "the release")
		return
	}
	if err == nil {
		c.follow(ctx, dl, func(ctx context.Context, h ledger.Hold) error {
			if handoff {
				return c.ledger.HandBack(ctx, h, r.after, r.reason, r.attempt, uncertain)
			}
			return c.ledger.ReleaseClaim(ctx, h, r.after, c.requeueAfter, r.reason, r.attempt, uncertain)
		})
	}
	if err != nil {
		// The claim's own lease will run out; the return still schedules
		// the message, so the row is not stranded.
		dl.log.Warn().Err(err).Msg("could not release the claim")
	} else if handoff {
		c.metrics.handedBack.Inc()
		c.ack(dl.msg.Receipt)
		return
	}
	c.returnAfter(ctx, dl.msg, r.after, r.reason)
}

// abandon gives back a claimed row the worker stops working on because it
// is shutting down (the shutdown timeout cut a step short): no attempt is
// counted, and its message comes back at once. uncertain says a send was
// under way when it was cut off.
func (c *completer) abandon(ctx context.Context, dl *delivery, uncertain bool) {
	c.release(ctx, dl, retry{reason: "worker shutting down", uncertain: uncertain})
	c.metrics.outcome("retried")
}

// ack hands a settled row's message to the acker. Batching acks changes
// when the queue hears of them, never their order relative to the settle:
// only a message whose row is already settled gets here. A crash before the
// batch is sent leaves copies the claim absorbs.
func (c *completer) ack(receipt string) { c.acks.post(receipt) }

// returnAfter gives the message back to the queue to surface again after
// delay (0 = now), at most QueueDelayMax: a message back sooner than asked
// is only looked at again (a row not due yet, or held by another worker,
// is claimed again or returned again then), and no message stays in the
// queue's in-flight set longer than that for a wait. On every real queue
// the next receive counts, and that is fine: the ledger, not the queue's
// receive count, decides dead letters.
func (c *completer) returnAfter(ctx context.Context, msg queue.Delivery, delay time.Duration, reason string) {
	ctx, cancel := detach(ctx)
	defer cancel()
	delay = min(max(delay, 0), c.queueDelayMax, queue.MaxVisibility)
	if err := c.queue.ChangeVisibility(ctx, msg.Receipt, delay); err != nil {
		c.log.Warn().Err(err).Str("message_id", msg.ID).Str("reason", reason).
			Msg("return to the queue failed; the message returns after its visibility timeout")
	}
}

// deadLetter moves the message to the queue's dead letters with the reason
// and acks the original: the row is settled failed, or the message is
// poison.
func (c *completer) deadLetter(ctx context.Context, msg queue.Delivery, reason, kind string) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	c.metrics.deadLettered.WithLabelValues(kind).Inc()
	err := c.queue.DeadLetter(ctx, msg, reason)
	if err != nil {
		c.log.Warn().Err(err).Str("message_id", msg.ID).Msg("dead-letter failed; the message returns after its visibility timeout")
	}
	return err
}

// flushAcks acknowledges one batch of messages in one queue call.
func (c *completer) flushAcks(ctx context.Context, receipts []string) ([]struct{}, []error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := c.queue.Ack(ctx, receipts...); err != nil {
		// The rows are settled; redelivered copies are absorbed.
		c.log.Warn().Err(err).Int("messages", len(receipts)).Msg("ack failed; the copies will be absorbed")
	}
	return nil, nil
}

// flushSettles settles one batch of accepted sends in one ledger commit,
// retrying a failed batch with backoff for settleRetry (the sends already
// happened, and losing their record would resend them), then finishes each
// send by its answer (settled): acks follow the commit, never precede it.
func (c *completer) flushSettles(ctx context.Context, batch []settle) ([]struct{}, []error) {
	// A digest's members settle in the same commit as its lead.
	rows, lead := settleRows(batch)
	errs := c.settleBatch(ctx, rows)
	for i, s := range batch {
		var err error
		if errs != nil {
			err = errs[lead[i]]
		}
		settledMembers(s, errs, lead[i])
		c.settled(s, err)
	}
	return nil, nil
}

// settleBatch records rows in one ledger commit, retrying for settleRetry,
// and answers an error per row (nil when none failed).
func (c *completer) settleBatch(ctx context.Context, rows []ledger.Delivered) []error {
	ctx, cancel := context.WithTimeout(ctx, settleRetry)
	defer cancel()
	delay := 100 * time.Millisecond
	for {
		_, errs, err := c.ledger.SettleDeliveredBatch(ctx, rows)
		if err == nil {
			return errs
		}
		if !clock.Sleep(ctx, jitter(delay)) {
			return fill(len(rows), err)
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// backoffDelay is the exponential delay before retry n (1-based), with
// jitter so a batch that failed together does not come back in lockstep.
func backoffDelay(base time.Duration, n int) time.Duration {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.RandomizationFactor = base, 2, 0.5
	b.MaxInterval, b.MaxElapsedTime = retryCap, 0
	b.Reset()
	d := b.NextBackOff()
	for i := 1; i < n && i < 32; i++ {
		d = b.NextBackOff()
	}
	return d
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d*4/5 + time.Duration(rand.Int64N(int64(d*2/5)+1))
}
