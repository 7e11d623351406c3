// Package worker drains the delivery queue: for each message it re-enters
// the row's tenant scope, claims the row, sends through the provider with
// the row's idempotency key, records the outcome, settles the row, and only
// then acknowledges the message.
//
// The worker never acks a message before its row is settled (or found
// settled, expired or stale): acking first would turn the at-least-once
// queue into an at-most-once one. A provider 429 is a schedule, not a
// failure: the claim is released, the message comes back after Retry-After,
// every worker sharing the account is paused, and no attempt is counted.
package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/message"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/queue"
)

// Defaults for Options.
const (
	ConcurrencyDefault       = 16
	MaxAttemptsDefault       = 5
	ShutdownTimeoutDefault   = 30 * time.Second
	SendTimeoutDefault       = 15 * time.Second
	VisibilityTimeoutDefault = 60 * time.Second
	RetryAfterMaxDefault     = 15 * time.Minute
	// EarlyToleranceDefault lets a message that surfaces a moment before its
	// due time be sent: the queue rounds delays to whole seconds and clocks
	// differ a little between machines.
	EarlyToleranceDefault = time.Second
	// PaceMaxWaitDefault is the longest a worker holds a message waiting for
	// its turn at the provider; beyond it the message goes back to the queue
	// with that delay, so the backlog waits in the queue, not in memory.
	PaceMaxWaitDefault = 2 * time.Second
	// RetryBaseDefault is the first backoff after a transient failure; it
	// doubles per attempt up to retryCap.
	RetryBaseDefault = 5 * time.Second
	retryCap         = 10 * time.Minute
	// settleRetry bounds how long the worker keeps trying to record an
	// accepted send before leaving the message to be redelivered.
	settleRetry = 30 * time.Second
	// claimBatch and settleBatch bound how many claims or accepted sends
	// share one ledger commit. They do not linger: a batch is what gathered
	// while the previous one was committed, so an idle worker adds no delay
	// and the window between a provider's accept and its record (the one a
	// crash can turn into a resend) stays one commit wide.
	claimBatch   = 32
	claimLinger  = 0
	settleBatch  = 32
	settleLinger = 0
	// ackBatch and ackLinger bound how acks are gathered into one call.
	ackBatch  = 50
	ackLinger = 5 * time.Millisecond
	// requeueGrace is added to a released row's lease beyond the nack delay,
	// so the sweeper does not republish a row whose message is only waiting.
	requeueGrace = 2 * time.Minute
)

// Queue is the part of the queue client the worker uses.
type Queue interface {
	Consume(ctx context.Context, o queue.ConsumeOptions) ([]queue.Delivery, error)
	Ack(ctx context.Context, ids ...string) (int, error)
	Nack(ctx context.Context, id string, o queue.NackOptions) (bool, error)
	Extend(ctx context.Context, id string, visibility time.Duration) (time.Time, error)
}

// Pacer is the pace shared by every worker sending through one provider
// account.
type Pacer interface {
	// Reserve takes the next send slot if it starts within maxWait and says
	// how long to wait for it; otherwise it takes nothing and says how long
	// until a slot could be had.
	Reserve(ctx context.Context, maxWait time.Duration) (wait time.Duration, granted bool, err error)
	// Pause pushes every worker sharing the account back by d (a 429).
	Pause(ctx context.Context, d time.Duration) error
}

// Resolver turns a row's recipient into the address the provider needs, in
// the tenant's scope. skip reports that there is nothing to send (the
// contact opted out): the row is settled skipped.
type Resolver interface {
	Resolve(ctx context.Context, tenant, recipient, channel string) (address string, skip bool, err error)
}

// RecipientResolver uses the recipient itself as the address.
type RecipientResolver struct{}

// Resolve returns recipient unchanged.
func (RecipientResolver) Resolve(_ context.Context, _, recipient, _ string) (string, bool, error) {
	return recipient, false, nil
}

// Options configure a Worker.
type Options struct {
	Ledger *ledger.Ledger
	Queue  Queue
	// Route returns the Sender for a channel.
	Route func(channel string) (provider.Sender, error)
	// Pace returns the shared pace of a provider account.
	Pace     func(account string) Pacer
	Resolver Resolver
	Log      zerolog.Logger
	Metrics  *Metrics

	Concurrency       int
	MaxAttempts       int
	SendTimeout       time.Duration
	VisibilityTimeout time.Duration
	ShutdownTimeout   time.Duration
	RetryAfterMax     time.Duration
	EarlyTolerance    time.Duration
	PaceMaxWait       time.Duration
	RetryBase         time.Duration
}

func (o *Options) defaults() {
	orDefault(&o.Concurrency, ConcurrencyDefault)
	orDefault(&o.MaxAttempts, MaxAttemptsDefault)
	orDefault(&o.SendTimeout, SendTimeoutDefault)
	orDefault(&o.VisibilityTimeout, VisibilityTimeoutDefault)
	orDefault(&o.ShutdownTimeout, ShutdownTimeoutDefault)
	orDefault(&o.RetryAfterMax, RetryAfterMaxDefault)
	orDefault(&o.EarlyTolerance, EarlyToleranceDefault)
	orDefault(&o.PaceMaxWait, PaceMaxWaitDefault)
	orDefault(&o.RetryBase, RetryBaseDefault)
	if o.Resolver == nil {
		o.Resolver = RecipientResolver{}
	}
	if o.Metrics == nil {
		o.Metrics = newMetrics(nil)
	}
}

// orDefault replaces a zero or negative setting with its default.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Worker is a pool of senders draining one queue.
type Worker struct {
	o Options
	// claims, settles and acks share ledger commits and queue calls among
	// the messages in flight; Run starts and stops them.
	claims  *batcher[ledger.ClaimRequest, ledger.Claim]
	settles *batcher[ledger.Delivered, struct{}]
	acks    *batcher[string, struct{}]
	// Clock is read for attempt times and delays; tests replace it.
	Clock func() time.Time
}

// New returns a Worker.
func New(o Options) (*Worker, error) {
	if o.Ledger == nil || o.Queue == nil || o.Route == nil || o.Pace == nil {
		return nil, errors.New("worker: Ledger, Queue, Route and Pace are required")
	}
	o.defaults()
	return &Worker{o: o, Clock: time.Now}, nil
}

// Run consumes until ctx is cancelled, then stops consuming, lets in-flight
// sends finish within the shutdown timeout, hands back messages it holds
// but has not started, and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	// work carries one message from a fetcher to a sender. It is unbuffered:
	// a fetcher only holds what it consumed until a sender is free.
	work := make(chan queue.Delivery)
	// sendCtx outlives ctx by the shutdown timeout, so a send under way
	// when SIGTERM arrives can still be recorded and acked.
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	// The batchers outlive the senders: every settled row is recorded and
	// its ack sent before Run returns. Acks stop last.
	bctx := context.WithoutCancel(ctx)
	w.acks = startBatcher(bctx, ackBatch, ackLinger, w.flushAcks)
	defer w.acks.stop()
	w.settles = startBatcher(bctx, settleBatch, settleLinger, w.flushSettles)
	defer w.settles.stop()
	w.claims = startBatcher(bctx, claimBatch, claimLinger, w.flushClaims)
	defer w.claims.stop()

	var senders sync.WaitGroup
	for i := 0; i < w.o.Concurrency; i++ {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for d := range work {
				w.handle(sendCtx, d)
			}
		}()
	}
	fetchers := max(1, (w.o.Concurrency+9)/10)
	var fetching sync.WaitGroup
	for i := 0; i < fetchers; i++ {
		fetching.Add(1)
		go func() {
			defer fetching.Done()
			w.fetch(ctx, sendCtx, work)
		}()
	}
	<-ctx.Done()
	fetching.Wait()
	close(work)

	done := make(chan struct{})
	go func() { senders.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.o.ShutdownTimeout):
		// Sends still running are cut off; each releases its claim and
		// nacks its message on the way out (a cancelled send is transient).
		w.o.Log.Warn().Dur("timeout", w.o.ShutdownTimeout).Msg("shutdown timeout: cancelling in-flight sends")
		cancelSends()
		<-done
	}
	return nil
}

// fetch long-polls the queue and hands messages to senders. At shutdown,
// messages already consumed but not handed over are nacked so they return
// at once instead of after their visibility timeout.
func (w *Worker) fetch(ctx, sendCtx context.Context, work chan<- queue.Delivery) {
	fail := 0
	for ctx.Err() == nil {
		msgs, err := w.o.Queue.Consume(ctx, queue.ConsumeOptions{
			MaxMessages: 10, Wait: 20 * time.Second, VisibilityTimeout: w.o.VisibilityTimeout,
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			fail++
			delay := jitter(min(time.Duration(fail)*time.Second, 30*time.Second))
			w.o.Log.Warn().Err(err).Dur("retry_in", delay).Msg("consume failed")
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			continue
		}
		fail = 0
		for i, m := range msgs {
			select {
			case work <- m:
			case <-ctx.Done():
				for _, rest := range msgs[i:] {
					w.nack(sendCtx, rest.MessageID, 0, "worker shutting down")
				}
				return
			}
		}
	}
}

// handle processes one message end to end. Every path ends in exactly one
// of: ack (row settled or nothing to do), nack (comes back later), or
// dead-letter.
func (w *Worker) handle(ctx context.Context, d queue.Delivery) {
	m := w.o.Metrics
	env, err := envelope.Decode(d.Payload)
	if err != nil {
		w.deadLetter(ctx, d.MessageID, "malformed message: "+err.Error(), "malformed")
		m.outcome("poison")
		return
	}
	log := w.o.Log.With().Str("tenant_id", env.Tenant).Int64("id", env.ID).Str("message_id", d.MessageID).Logger()

	claim, err := w.claims.do(ledger.ClaimRequest{Tenant: env.Tenant, ID: env.ID, DueAt: env.DueAt})
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		// The tenant named in the message cannot see this row: a forged or
		// corrupted message, never something to retry.
		w.deadLetter(ctx, d.MessageID, fmt.Sprintf("row %d is not visible in tenant %q", env.ID, env.Tenant), "not_found")
		m.outcome("poison")
		return
	case err != nil:
		// The ledger is unreachable. The message is not at fault, so this
		// does not count toward dead-lettering.
		log.Warn().Err(err).Msg("claim failed; message returns later")
		w.nack(ctx, d.MessageID, jitter(5*time.Second), "ledger unavailable")
		m.outcome("retried")
		return
	}
	switch claim.Outcome {
	case ledger.ClaimSettled:
		m.duplicatesAbsorbed.Inc()
		m.outcome("absorbed_duplicate")
		w.ack(ctx, d.MessageID)
		return
	case ledger.ClaimExpired:
		m.outcome("expired")
		w.ack(ctx, d.MessageID)
		return
	case ledger.ClaimStale:
		m.outcome("stale")
		w.ack(ctx, d.MessageID)
		return
	case ledger.ClaimHeld:
		// Another live worker is sending it; look again when its lease ends.
		m.outcome("held")
		wait := time.Until(*claim.Row.LeaseUntil)
		w.nack(ctx, d.MessageID, max(wait, time.Second), "held by another worker")
		return
	case ledger.ClaimEarly:
		m.outcome("early")
		w.nack(ctx, d.MessageID, claim.Wait, "not due yet")
		return
	}
	w.send(ctx, log, d, env, claim)
}

// send runs a claimed row through the provider and settles the outcome.
func (w *Worker) send(ctx context.Context, log zerolog.Logger, d queue.Delivery, env envelope.Envelope, claim ledger.Claim) {
	m := w.o.Metrics
	row := claim.Row
	// A message may surface up to the early tolerance before its due time
	// (the sweeper publishes ahead in whole seconds). The claim is held;
	// wait out the rest so the send is on time, not early.
	if early := row.DueAt.Sub(w.Clock()); early > 0 {
		select {
		case <-time.After(early):
		case <-ctx.Done():
		}
	}
	sender, err := w.o.Route(row.Channel)
	if err != nil {
		w.fail(ctx, log, d, row, fmt.Sprintf("no provider for channel %q: %v", row.Channel, err), nil)
		return
	}
	msg, err := message.Parse(row.Channel, row.Payload)
	if err != nil {
		w.fail(ctx, log, d, row, "payload: "+err.Error(), nil)
		return
	}
	addr, skip, err := w.o.Resolver.Resolve(ctx, row.Tenant, row.Recipient, row.Channel)
	switch {
	case err != nil:
		// An unresolvable recipient is an attempt that failed before the
		// provider: it backs off like one and, when attempts run out, ends
		// failed with the reason instead of cycling through the queue.
		now := w.Clock()
		w.retryOrFail(ctx, log, d, row, ledger.Attempt{Provider: sender.Name(), StartedAt: now, FinishedAt: now,
			Outcome: ledger.AttemptTransient, Error: "resolve recipient: " + err.Error()}, 0, false)
		return
	case skip:
		if err := w.o.Ledger.SettleSkipped(ctx, row.Tenant, row.ID, "recipient has nothing to receive"); err != nil {
			w.nack(ctx, d.MessageID, jitter(5*time.Second), "ledger unavailable")
			return
		}
		m.outcome("skipped")
		w.ack(ctx, d.MessageID)
		return
	}

	pace := w.o.Pace(sender.Name())
	wait, granted, err := pace.Reserve(ctx, w.o.PaceMaxWait)
	if err != nil {
		w.release(ctx, log, d, row, jitter(5*time.Second), "pace unavailable: "+err.Error(), nil)
		m.outcome("retried")
		return
	}
	if !granted {
		// The account is busy further ahead than we hold messages: give the
		// row back and let the queue keep the message until its turn.
		w.release(ctx, log, d, row, wait, "waiting for the provider's pace", nil)
		m.outcome("paced")
		return
	}
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			w.release(context.WithoutCancel(ctx), log, d, row, 0, "worker shutting down", nil)
			return
		}
	}

	// The claim checked the expiry, but waiting for the due second and for
	// the provider's pace takes time: a nudge that expired meanwhile is
	// settled expired, never sent late.
	sendBy := time.Time{}
	if row.ExpiresAt != nil {
		sendBy = *row.ExpiresAt
		if !w.Clock().Before(sendBy) {
			if err := w.o.Ledger.SettleExpired(ctx, row.Tenant, row.ID); err != nil {
				w.release(ctx, log, d, row, jitter(5*time.Second), "ledger unavailable", nil)
				return
			}
			m.outcome("expired")
			w.ack(ctx, d.MessageID)
			return
		}
	}

	if claim.PossibleDuplicate {
		m.possibleDuplicates.Inc()
		log.Warn().Msg("resending a row whose previous worker died mid-send: possible duplicate")
	}
	started := w.Clock()
	m.inFlight.Inc()
	stopExtend := w.keepVisible(ctx, d.MessageID)
	// A send still under way when the row expires is abandoned: an answer
	// after the expiry would be a late nudge.
	deadline := time.Now().Add(w.o.SendTimeout)
	if !sendBy.IsZero() && sendBy.Before(deadline) {
		deadline = sendBy
	}
	sctx, cancel := context.WithDeadline(ctx, deadline)
	res, sendErr := sender.Send(sctx, provider.Delivery{
		Tenant: row.Tenant, NotificationID: row.ID, Recipient: addr, Channel: row.Channel, Kind: row.Kind,
		Message: msg, IdempotencyKey: env.Key,
	})
	cancel()
	stopExtend()
	m.inFlight.Dec()
	attempt := ledger.Attempt{Provider: sender.Name(), StartedAt: started, FinishedAt: w.Clock(),
		PossibleDuplicate: claim.PossibleDuplicate}
	// What happens next must not be cut short by shutdown: the provider has
	// answered, and that answer is worth recording.
	ctx = context.WithoutCancel(ctx)

	if sendErr == nil {
		attempt.ProviderMessageID, attempt.HTTPStatus = res.MessageID, res.HTTPStatus
		m.attempts.WithLabelValues("accepted").Inc()
		if !w.settleDelivered(ctx, log, row, attempt) {
			// Not recorded: leave the message unacked. It is redelivered,
			// the row is claimable when its lease ends, and the resend
			// carries the same idempotency key.
			return
		}
		m.outcome("delivered")
		m.lag.Observe(attempt.FinishedAt.Sub(row.DueAt).Seconds())
		w.ack(ctx, d.MessageID)
		return
	}

	pe := provider.Classify(sendErr)
	attempt.HTTPStatus, attempt.Error = pe.HTTPStatus, pe.Error()
	switch pe.Class {
	case provider.RateLimited:
		m.attempts.WithLabelValues("rate_limited").Inc()
		m.rateLimited.Inc()
		retry := pe.RetryAfter
		if retry <= 0 {
			retry = time.Second
		}
		retry = min(retry, w.o.RetryAfterMax)
		if err := pace.Pause(ctx, retry); err != nil {
			log.Warn().Err(err).Msg("could not pause the shared pace")
		}
		// No attempt is recorded: a 429 is the provider's schedule.
		w.release(ctx, log, d, row, retry, "rate limited by the provider", nil)
		m.outcome("rate_limited")
	case provider.Permanent:
		m.attempts.WithLabelValues("permanent").Inc()
		attempt.Outcome = ledger.AttemptPermanent
		w.fail(ctx, log, d, row, pe.Error(), &attempt)
	default:
		m.attempts.WithLabelValues("transient").Inc()
		attempt.Outcome = ledger.AttemptTransient
		// No answer (a timeout, a dropped connection) or a gateway timeout
		// leaves the outcome unknown: the provider may have accepted it.
		uncertain := pe.HTTPStatus == 0 || pe.HTTPStatus == http.StatusGatewayTimeout
		w.retryOrFail(ctx, log, d, row, attempt, pe.RetryAfter, uncertain)
	}
}

// retryOrFail records a transient failure: the row is retried with
// exponential backoff (or after retryAfter, if the provider asked for
// longer), or settled failed once OWED_MAX_ATTEMPTS is reached.
func (w *Worker) retryOrFail(ctx context.Context, log zerolog.Logger, d queue.Delivery, row ledger.Notification,
	attempt ledger.Attempt, retryAfter time.Duration, uncertain bool) {
	if row.Attempts+1 >= w.o.MaxAttempts {
		w.fail(ctx, log, d, row, fmt.Sprintf("attempts exhausted (%d): %s", row.Attempts+1, attempt.Error), &attempt)
		return
	}
	delay := backoffDelay(w.o.RetryBase, row.Attempts+1)
	if retryAfter > delay {
		delay = min(retryAfter, w.o.RetryAfterMax)
	}
	w.releaseUncertain(ctx, log, d, row, delay, attempt.Error, &attempt, uncertain)
	w.o.Metrics.outcome("retried")
}

// settleDelivered records an accepted send through the settler, which
// shares one commit among the sends that finish together. It reports false
// when the ledger could not record it within settleRetry: the message is
// then left unacked, is redelivered, and the row is claimable when its
// lease ends; the resend carries the same idempotency key.
func (w *Worker) settleDelivered(_ context.Context, log zerolog.Logger, row ledger.Notification, a ledger.Attempt) bool {
	if _, err := w.settles.do(ledger.Delivered{Tenant: row.Tenant, ID: row.ID, Attempt: a}); err != nil {
		log.Error().Err(err).Msg("provider accepted the send but the ledger could not record it; the message will be redelivered")
		return false
	}
	return true
}

// fail settles the row failed and dead-letters its message.
func (w *Worker) fail(ctx context.Context, log zerolog.Logger, d queue.Delivery, row ledger.Notification, reason string, a *ledger.Attempt) {
	if err := w.o.Ledger.SettleFailed(ctx, row.Tenant, row.ID, reason, a); err != nil {
		log.Warn().Err(err).Msg("could not settle the row failed; message returns later")
		w.nack(ctx, d.MessageID, jitter(5*time.Second), "ledger unavailable")
		return
	}
	w.o.Metrics.outcome("failed")
	log.Warn().Str("reason", reason).Msg("notification failed; message dead-lettered")
	w.deadLetter(ctx, d.MessageID, reason, "failed")
}

// release gives the row back and brings its message back after delay.
func (w *Worker) release(ctx context.Context, log zerolog.Logger, d queue.Delivery, row ledger.Notification,
	delay time.Duration, reason string, a *ledger.Attempt) {
	w.releaseUncertain(ctx, log, d, row, delay, reason, a, false)
}

// releaseUncertain is release for a send whose outcome is unknown: the
// provider may have accepted it, so the row's next send is recorded as a
// possible duplicate.
func (w *Worker) releaseUncertain(ctx context.Context, log zerolog.Logger, d queue.Delivery, row ledger.Notification,
	delay time.Duration, reason string, a *ledger.Attempt, uncertain bool) {
	retryAt := w.Clock().Add(delay)
	if err := w.o.Ledger.ReleaseClaim(ctx, row.Tenant, row.ID, retryAt, requeueGrace, reason, a, uncertain); err != nil {
		// The claim's own lease will run out; the nack still schedules the
		// message, so the row is not stranded.
		log.Warn().Err(err).Msg("could not release the claim")
	}
	w.nack(ctx, d.MessageID, delay, reason)
}

// keepVisible extends the message's visibility while a slow send runs, so
// the queue does not hand it to another worker meanwhile.
func (w *Worker) keepVisible(ctx context.Context, id string) (stop func()) {
	every := w.o.VisibilityTimeout / 2
	if w.o.SendTimeout < every {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if _, err := w.o.Queue.Extend(ctx, id, w.o.VisibilityTimeout); err != nil {
					w.o.Log.Warn().Err(err).Str("message_id", id).Msg("extend visibility failed")
				}
			}
		}
	}()
	return func() { close(done) }
}

// ack hands a settled row's message to the acker. Batching acks changes
// when the queue hears of them, never their order relative to the settle:
// only a message whose row is already settled gets here. A crash before the
// batch is sent leaves copies the claim absorbs.
func (w *Worker) ack(_ context.Context, id string) { w.acks.post(id) }

// flushAcks acknowledges one batch of messages in one queue call.
func (w *Worker) flushAcks(ctx context.Context, ids []string) ([]struct{}, []error) {
	if _, err := w.o.Queue.Ack(ctx, ids...); err != nil {
		// The rows are settled; redelivered copies are absorbed.
		w.o.Log.Warn().Err(err).Int("messages", len(ids)).Msg("ack failed; the copies will be absorbed")
	}
	return nil, nil
}

// flushClaims claims one batch of rows in one ledger statement.
func (w *Worker) flushClaims(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, []error) {
	claims, errs, err := w.o.Ledger.ClaimForSendBatch(ctx, reqs, ledger.ClaimParams{
		LeaseFor: w.o.SendTimeout + w.o.VisibilityTimeout, EarlyTolerance: w.o.EarlyTolerance,
	})
	if err != nil {
		return nil, fill(len(reqs), err)
	}
	return claims, errs
}

// flushSettles settles one batch of accepted sends in one ledger commit,
// retrying a failed batch with backoff for settleRetry: the sends already
// happened, and losing their record would resend them.
func (w *Worker) flushSettles(ctx context.Context, rows []ledger.Delivered) ([]struct{}, []error) {
	deadline := time.Now().Add(settleRetry)
	delay := 100 * time.Millisecond
	for {
		_, errs, err := w.o.Ledger.SettleDeliveredBatch(ctx, rows)
		if err == nil {
			return nil, errs
		}
		if time.Now().After(deadline) {
			return nil, fill(len(rows), err)
		}
		time.Sleep(jitter(delay))
		delay = min(delay*2, 5*time.Second)
	}
}

func (w *Worker) nack(ctx context.Context, id string, delay time.Duration, reason string) {
	if _, err := w.o.Queue.Nack(ctx, id, queue.NackOptions{Delay: delay, CountAsFailure: false, Reason: reason}); err != nil {
		w.o.Log.Warn().Err(err).Str("message_id", id).Msg("nack failed; the message returns after its visibility timeout")
	}
}

func (w *Worker) deadLetter(ctx context.Context, id, reason, kind string) {
	w.o.Metrics.deadLettered.WithLabelValues(kind).Inc()
	if _, err := w.o.Queue.Nack(ctx, id, queue.NackOptions{DeadLetter: true, Reason: reason}); err != nil {
		w.o.Log.Warn().Err(err).Str("message_id", id).Msg("dead-letter failed; the message returns after its visibility timeout")
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
