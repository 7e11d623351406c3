package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/queue"
)

// executor takes one message at a time from its claim to the provider's
// answer (River's executor): the claim and its heartbeat, the checks before
// the send (due, recipient, account, pace, expiry, the claim still held) and
// the send. It decides; every outcome it hands to the completer.
type executor struct {
	ledger *ledger.Work
	// queue is the heartbeat's: it keeps a held message hidden.
	queue     Queue
	completer *completer
	route     func(channel string) (provider.Sender, error)
	paces     func(account string) Pacer
	resolver  Resolver
	accounts  *pace.Accounts
	log       zerolog.Logger
	metrics   *Metrics
	clock     clock.Clock
	keyPrefix string
	// The timings and limits (Options' fields of the same names).
	accountPause, paceMaxWait, sendTimeout, visibilityTimeout time.Duration
	queueDelayMax, retryAfterMax, earlyTolerance              time.Duration
	noUndeliverable                                           bool
	// claims, extends (the claims' heartbeats) and starts (the checks right
	// before the sends) share ledger commits among the messages in flight.
	claims  *batcher[ledger.ClaimRequest, ledger.Claim]
	extends *batcher[ledger.Hold, struct{}]
	starts  *batcher[ledger.Hold, struct{}]
	// gate is shared with the fetcher: a message holds its place from its
	// receive until its slot is reserved here.
	gate   *gate
	pauses *pauses
	// recipients is what this process knows of per-recipient limits and
	// paces (recipients.go).
	recipients *recipients
	live       *liveness
	// clear is what this process knows of the accounts it found clear
	// (account.go).
	clear clearAccounts
}

func newExecutor(o Options, work *ledger.Work, c *completer, live *liveness) *executor {
	db := work.DB()
	e := &executor{ledger: work, queue: o.Queue, completer: c, route: o.Route, paces: o.Pace, resolver: o.Resolver,
		accounts: o.Accounts, log: o.Log, metrics: o.Metrics, clock: o.Clock, keyPrefix: o.KeyPrefix,
		accountPause: o.AccountPause, paceMaxWait: o.PaceMaxWait, sendTimeout: o.SendTimeout,
		visibilityTimeout: o.VisibilityTimeout, queueDelayMax: o.QueueDelayMax, retryAfterMax: o.RetryAfterMax,
		earlyTolerance: o.EarlyTolerance, noUndeliverable: o.NoUndeliverable,
		gate: newGate(o), live: live, recipients: newRecipients(o.Clock, o.RecipientRates),
		pauses: newPauses(func(ctx context.Context) (pace.Pauses, error) { return pace.ReadPauses(ctx, db) }, o.Metrics)}
	e.gate.live, e.gate.onHold = live, e.pauses.held
	e.claims = newBatcher(claimBatch, claimLinger, e.flushClaims)
	e.extends = newBatcher(claimBatch, claimLinger, e.flushExtends)
	e.starts = newBatcher(claimBatch, claimLinger, e.flushStarts)
	return e
}

// start runs the executor's batchers; stop flushes what they hold.
func (e *executor) start(ctx context.Context) {
	e.claims.start(ctx)
	e.extends.start(ctx)
	e.starts.start(ctx)
}

func (e *executor) stop() {
	e.starts.stop()
	e.extends.stop()
	e.claims.stop()
}

// delivery is one claimed message on its way through the executor: what the
// steps found out so far, handed to the completer when the message's fate
// is decided.
type delivery struct {
	// msg is the queue message; its receipt acks, returns or dead-letters
	// it.
	msg queue.Delivery
	// env is what the message says: the row and its due time (and a key
	// the worker checks but never sends: prepare derives the row's).
	env envelope.Envelope
	// row is the ledger row as claimed, in state sending.
	row ledger.Notification
	// hold names the claim: every write after it names hold, and changes
	// the row only while the claim is still the row's.
	hold ledger.Hold
	// lease is the claim's heartbeat, from the claim to the outcome write.
	lease *claimLease
	// asked is the worker's clock reading taken before the claim was
	// asked for, and claimedAt the ledger's instant of the claim: a time
	// the ledger reported is placed on the worker's clock relative to them
	// (see local), never compared with the worker's clock directly.
	asked, claimedAt time.Time
	// reading is the worker clock's Reading taken with asked: what the
	// worker decides by a deadline (the expiry before a send, the claim's
	// lease) is placed on it (see deadline), so a step of the host's wall
	// clock moves none of them.
	reading clock.Reading
	// dueIn is how long after the claim the row is due, by the ledger's
	// clock (0 when it was due already).
	dueIn time.Duration
	// mark is the undeliverable mark of the row's recipient as the claim
	// read it (nil: not marked); see undeliverable.
	mark *ledger.Undeliverable
	// possibleDuplicate says an earlier claim may have reached the
	// provider: this send is flagged and counted.
	possibleDuplicate bool
	// digest is the rest of the digest the row leads (digest.go); nil for
	// a row sent alone.
	digest *digestSend
	// probe says this send is the probe of a paused provider account
	// (admit): its answer decides whether the account resumes.
	probe bool
	log   zerolog.Logger
	// sender, pace and request are set by prepare, once the row is routed
	// and its recipient resolved.
	sender  provider.Sender
	pace    Pacer
	request provider.Delivery
	// unhold gives the message's place in the gate back; reserve calls it
	// as soon as the slot is taken, from the gate's slots taken ahead or
	// from the pace (or refused). A message that leaves without reserving
	// leaves its place, and the slot the gate may hold for it, to the next.
	unhold func()
}

// execute processes one message end to end. Every path ends in exactly one
// of: ack (row settled or nothing to do), return (comes back later), or
// dead-letter. ctx ends the shutdown timeout after the worker was told to
// stop; whatever step it cuts short hands the row and its message back
// without counting an attempt (abandon).
func (e *executor) execute(ctx context.Context, msg queue.Delivery) {
	defer e.live.finished(1)
	// The message holds a place in the gate from its receive until its
	// slot is reserved, or until it leaves without one.
	held := true
	unhold := func() {
		if held {
			held = false
			e.gate.done(1)
		}
	}
	defer unhold()
	dl, ok := e.claim(ctx, msg)
	if !ok {
		return
	}
	// The heartbeat keeps the claim from here to the outcome write, whatever
	// path the delivery takes; every outcome write ends it first.
	defer dl.lease.end()
	dl.unhold = unhold
	if e.tenantPaused(ctx, dl) {
		return
	}
	// A message may surface up to the early tolerance before its due time
	// (the sweeper publishes ahead in whole seconds). The claim is held;
	// wait out the rest so the send is on time, not early. The wait is the
	// ledger's, counted from the claim's answer, so it never ends early.
	if !clock.Sleep(ctx, dl.dueIn) {
		e.completer.abandon(ctx, dl, false)
		return
	}
	if !e.prepare(ctx, dl) || e.undeliverable(ctx, dl) || !e.admit(ctx, dl) || !e.recipientTurn(ctx, dl) ||
		!e.reserve(ctx, dl) {
		return
	}
	e.send(ctx, dl)
}

// claim decodes the message and claims its row in the tenant's scope. It
// returns false when the message needs no send and has been acked,
// returned or dead-lettered.
func (e *executor) claim(ctx context.Context, msg queue.Delivery) (*delivery, bool) {
	m := e.metrics
	env, err := envelope.Decode(msg.Body)
	if err != nil {
		e.completer.deadLetter(ctx, msg, "malformed message: "+err.Error(), "malformed")
		m.outcome("poison")
		return nil, false
	}
	log := e.log.With().Str("tenant_id", env.Tenant).Int64("id", env.ID).Str("message_id", msg.ID).Logger()
	if env.Digest != 0 {
		return e.claimDigest(ctx, msg, env, log)
	}
	asked, reading := e.clock.Now(), clock.Read(e.clock)
	claim, err := e.claims.do(ledger.ClaimRequest{Tenant: env.Tenant, ID: env.ID, DueAt: env.DueAt})
	var invalid *ledger.ValidationError
	switch {
	case errors.As(err, &invalid):
		// The ledger can never take this message's claim (a tenant id or a
		// due time it cannot hold): dead-letter it alone, with the reason;
		// the rest of its claim batch went on without it.
		e.completer.deadLetter(ctx, msg, "the ledger refuses the message: "+invalid.Error(), "invalid")
		m.outcome("poison")
		return nil, false
	case errors.Is(err, ledger.ErrNotFound):
		// The tenant named in the message cannot see this row: a forged or
		// corrupted message, never something to retry.
		e.completer.deadLetter(ctx, msg, fmt.Sprintf("row %d is not visible in tenant %q", env.ID, env.Tenant), "not_found")
		m.outcome("poison")
		return nil, false
	case err != nil:
		// The ledger is unreachable. The message is not at fault, so this
		// costs the row no attempt.
		log.Warn().Err(err).Msg("claim failed; message returns later")
		e.completer.returnAfter(ctx, msg, jitter(unavailableRetry), "ledger unavailable")
		m.outcome("retried")
		return nil, false
	}
	switch claim.Outcome {
	case ledger.ClaimSettled:
		m.duplicatesAbsorbed.Inc()
		m.outcome("absorbed_duplicate")
		e.completer.ack(msg.Receipt)
		return nil, false
	case ledger.ClaimExpired:
		m.outcome("expired")
		e.completer.ack(msg.Receipt)
		return nil, false
	case ledger.ClaimStale:
		m.outcome("stale")
		e.completer.ack(msg.Receipt)
		return nil, false
	case ledger.ClaimHeld:
		// Another live worker is sending it; look again when its lease ends
		// (by the ledger's clock: claim.Wait).
		m.outcome("held")
		e.completer.returnAfter(ctx, msg, max(claim.Wait, time.Second), "held by another worker")
		return nil, false
	case ledger.ClaimEarly:
		m.outcome("early")
		e.completer.returnAfter(ctx, msg, claim.Wait, "not due yet")
		return nil, false
	}
	dl := &delivery{msg: msg, env: env, row: claim.Row, hold: claim.Hold, asked: asked, claimedAt: claim.Now, reading: reading,
		dueIn: claim.Wait, possibleDuplicate: claim.PossibleDuplicate, mark: claim.Undeliverable, log: log}
	dl.lease = e.holdClaim(dl, reading)
	return dl, true
}

// local places t, an instant the ledger reported, on the worker's clock,
// as far from the claim as the ledger's clock put it: never later than t
// truly is, since the claim's instant came after asked. An expiry reckoned
// this way is never passed unnoticed, whatever the two clocks' offset.
func (dl *delivery) local(t time.Time) time.Time { return dl.asked.Add(t.Sub(dl.claimedAt)) }

// deadline places t, an instant the ledger reported, on the worker clock's
// Readings as local places it on its wall clock: never later than t truly
// is, and moved by no step of the wall clock, so a host whose clock NTP
// steps backwards still never starts a send after the row's expiry.
func (dl *delivery) deadline(t time.Time) clock.Reading { return dl.reading.Add(t.Sub(dl.claimedAt)) }

// prepare routes the row to its provider, parses its payload and resolves
// its recipient. It returns false when the row was settled or released
// instead.
func (e *executor) prepare(ctx context.Context, dl *delivery) bool {
	row := dl.row
	sender, err := e.route(row.Channel)
	if err != nil {
		// No provider carries the channel in this process: it is
		// configured none, or this worker of a rolling deploy does not
		// know it yet. The row is not at fault; its message comes back
		// later, to this worker or another, and costs no attempt. An
		// expiry still settles it, at its next claim.
		reason := fmt.Sprintf("no provider for channel %q: %v", row.Channel, err)
		dl.log.Warn().Str("channel", row.Channel).Msg(reason + "; the message returns later")
		// It is looked at again within QueueDelayMax, in the queue: the
		// wait is for a worker that carries the channel, not for a time.
		e.completer.release(ctx, dl, retry{after: min(jitter(unroutedRetry), e.queueDelayMax), reason: reason})
		e.metrics.outcome("unrouted")
		return false
	}
	msg, err := payload.Parse(row.Channel, row.Payload)
	if err != nil {
		e.completer.fail(ctx, dl, "payload: "+err.Error(), nil, failure{cause: "payload", deadLetter: true})
		return false
	}
	addr, skip, err := e.resolver.Resolve(ctx, row.Tenant, row.Recipient, row.Channel)
	switch {
	case err != nil && ctx.Err() != nil:
		// The shutdown cut the look-up off: the recipient is not at fault.
		e.completer.abandon(ctx, dl, false)
		return false
	case err != nil:
		// An unresolvable recipient is an attempt that failed before the
		// provider: it backs off like one and, when attempts run out, ends
		// failed with the reason instead of cycling through the queue.
		now := e.clock.Now()
		e.completer.retryOrFail(ctx, dl, ledger.Attempt{Provider: sender.Name(), StartedAt: now, FinishedAt: now,
			Outcome: ledger.AttemptTransient, Error: "resolve recipient: " + err.Error()}, 0, false)
		return false
	case skip:
		e.completer.skip(ctx, dl, "recipient has nothing to receive", "skipped")
		return false
	}
	dl.sender, dl.pace = sender, e.paces(sender.Name())
	// The key is derived from the claimed row, as the sweeper derives it,
	// never taken from the message: a message carrying another row's key
	// would have the provider drop this row's send as a repeat of that one
	// while the ledger records it delivered.
	key := ledger.IdempotencyKey(e.keyPrefix, row.ID, row.DueAt)
	if dl.env.Key != key {
		e.metrics.keyMismatches.Inc()
		dl.log.Warn().Str("message_key", dl.env.Key).Str("key", key).
			Msg("the message's idempotency key is not the row's (a forged message, or OWED_IDEMPOTENCY_PREFIX differs from the sweeper's); sending with the row's")
	}
	dl.request = provider.Delivery{Tenant: row.Tenant, NotificationID: row.ID, Recipient: addr, Channel: row.Channel,
		Kind: row.Kind, Content: msg, IdempotencyKey: key}
	if row.ExpiresAt != nil {
		// Placed on the worker's clock, never later than the ledger's
		// expiry, so a provider that drops the message by then never
		// delivers it late.
		dl.request.ExpiresAt = dl.local(*row.ExpiresAt)
	}
	return true
}

// reserve takes the row's turn at the provider's shared pace and waits for
// it: the slot the gate took for it before the receive when there is one,
// otherwise one reserved now. It returns false when the row was released
// instead.
func (e *executor) reserve(ctx context.Context, dl *delivery) bool {
	m := e.metrics
	wait, granted := e.gate.slot(dl.sender.Name())
	var err error
	if !granted {
		wait, granted, err = dl.pace.Reserve(ctx, e.paceMaxWait)
	}
	// The slot is taken (or refused): the gate may count the next message.
	dl.unhold()
	if err != nil {
		e.completer.unknown(ctx, dl, "pace unavailable", err)
		return false
	}
	if !granted {
		// The account is busy further ahead than we hold messages: give the
		// row back and let the queue keep the message until its turn.
		e.completer.release(ctx, dl, retry{after: wait, reason: "waiting for the provider's pace"})
		m.outcome("paced")
		return false
	}
	if wait > 0 && !clock.Sleep(ctx, wait) {
		e.completer.abandon(ctx, dl, false)
		return false
	}
	return true
}

// send runs a claimed, paced row through the provider and hands the answer
// to the completer.
func (e *executor) send(ctx context.Context, dl *delivery) {
	m := e.metrics
	row := dl.row
	// The claim checked the expiry, but waiting for the due second and for
	// the provider's pace takes time: a nudge that expired meanwhile is
	// settled expired, never sent late.
	timeout := e.sendTimeout
	if row.ExpiresAt != nil {
		left := dl.deadline(*row.ExpiresAt).Sub(clock.Read(e.clock))
		if left <= 0 {
			e.completer.expire(ctx, dl, nil)
			return
		}
		timeout = min(timeout, left)
	}
	// The guard before the side effect: the send goes out only while the
	// claim is still this worker's, with lease enough left to cover it, so
	// no other worker can claim the row while the provider may be taking it,
	// and only if no cancel or reschedule revoked the claim since it was
	// taken: the ledger is asked every time. From here on a change waits on
	// the send as an intent. The heartbeat keeps the lease beyond that while
	// the send runs.
	held, err := dl.lease.startSend(timeout + e.beat())
	if err != nil {
		e.completer.release(ctx, dl, retry{after: jitter(unavailableRetry), reason: "could not confirm the claim before sending: " + err.Error()})
		m.outcome("retried")
		return
	}
	if !held {
		e.completer.claimLost(dl, "the check before the send")
		return
	}
	e.digestRequest(dl)
	// The check is a ledger round trip, so the time left before the expiry
	// is read again after it: the send's deadline is the row's expiry
	// however long the check took. Read before it, the deadline was late by
	// the round trip, and a loaded database's made a send reach the
	// provider after the row's expiry (the 100,000-row drill's row 1726).
	started := e.clock.Now()
	if row.ExpiresAt != nil {
		left := dl.deadline(*row.ExpiresAt).Sub(clock.Read(e.clock))
		if left <= 0 {
			e.completer.expire(ctx, dl, nil)
			return
		}
		// A send still under way when the row expires is abandoned: an
		// answer after the expiry would be a late nudge.
		timeout = min(e.sendTimeout, left)
		// The provider's expiry is placed again from what is left now, so
		// a step of the wall clock since the claim does not stretch the
		// validity a provider enforces (Twilio's ValidityPeriod).
		dl.request.ExpiresAt = started.Add(left)
	}

	if dl.possibleDuplicate {
		m.possibleDuplicates.Inc()
		dl.log.Warn().Msg("resending a row whose previous worker died mid-send: possible duplicate")
	}
	account, channel := dl.sender.Name(), row.Channel
	inFlight := m.inFlight.WithLabelValues(account, channel)
	inFlight.Inc()
	sctx, cancel := context.WithTimeout(ctx, timeout)
	sending := clock.Read(e.clock)
	res, sendErr := dl.sender.Send(sctx, dl.request)
	took, finished := clock.Read(e.clock).Sub(sending), e.clock.Now()
	cancel()
	inFlight.Dec()
	// sent counts the send by its result, with how long the provider took.
	sent := func(result string) { m.sent(account, channel, result, took) }
	if sendErr != nil && ctx.Err() != nil {
		// The shutdown timeout cut the send off: owed's own cancellation is
		// no attempt and never fails the row. The request may have reached
		// the provider, so the next send is flagged a possible duplicate.
		dl.log.Warn().Err(sendErr).Msg("send cut off by the shutdown timeout; the row is released without an attempt")
		e.completer.abandon(ctx, dl, true)
		return
	}
	attempt := ledger.Attempt{Provider: account, StartedAt: started, FinishedAt: finished,
		PossibleDuplicate: dl.possibleDuplicate}
	// What happens next must not be cut short by shutdown: the provider has
	// answered, and that answer is worth recording.
	ctx, cancelWrites := detach(ctx)
	defer cancelWrites()

	if sendErr == nil {
		attempt.ProviderMessageID, attempt.HTTPStatus = res.MessageID, res.HTTPStatus
		sent("accepted")
		e.probed(ctx, dl, nil)
		e.completer.delivered(dl, attempt)
		return
	}

	if errors.Is(sendErr, provider.ErrExpired) {
		// The adapter sent nothing: too little of the row's validity was
		// left for the provider to enforce it. Late is wrong, so the row
		// settles expired, as the check before the send would have a
		// moment later.
		sent("expired")
		e.completer.expire(ctx, dl, nil)
		return
	}
	pe := provider.Classify(sendErr)
	attempt.HTTPStatus, attempt.Error = pe.HTTPStatus, pe.Error()
	e.probed(ctx, dl, pe)
	switch pe.Class {
	case provider.Account:
		// The account cannot send anything: the row is not at fault, so it
		// burns no attempt and goes back to the queue until the account is
		// resumed; every worker stops sending on the account meanwhile.
		sent("account")
		e.tripAccount(ctx, dl, pe)
		e.completer.release(ctx, dl, retry{after: e.accountPause, reason: "provider account paused: " + pe.Error(),
			uncertain: pe.MaybeSent})
		m.outcome("account_paused")
	case provider.RateLimited:
		sent("rate_limited")
		m.rateLimited.WithLabelValues(account, channel).Inc()
		after := pe.RetryAfter
		if after <= 0 {
			after = time.Second
		}
		after = min(after, e.retryAfterMax)
		// A limit the provider scoped to the recipient delays that
		// recipient's rows only; the account's other recipients go on.
		if pe.Recipient && e.recipientLimited(ctx, dl, after) {
			return
		}
		e.clear.forget(dl.sender.Name())
		if err := dl.pace.Pause(ctx, after); err != nil {
			dl.log.Warn().Err(err).Msg("could not pause the shared pace")
		}
		// No attempt is recorded: a 429 is the provider's schedule.
		e.completer.release(ctx, dl, retry{after: after, reason: "rate limited by the provider"})
		m.outcome("rate_limited")
	case provider.Permanent:
		sent("permanent")
		attempt.Outcome = ledger.AttemptPermanent
		// The error (pe.Error()) carries the provider's status and code,
		// on the row and its attempt. A recipient's failure (opted out,
		// blocked the bot, an invalid address) is the recipient's answer,
		// not something owed could not process: recorded, not
		// dead-lettered, not paged.
		// The address is marked undeliverable after the settle, so later
		// rows to it are skipped without a provider call.
		f := failure{cause: "permanent", deadLetter: true}
		if pe.Recipient {
			f = failure{cause: "recipient"}
		}
		e.completer.fail(ctx, dl, pe.Error(), &attempt, f)
		if pe.Recipient {
			e.completer.markUndeliverable(ctx, dl, pe)
		}
	default:
		sent("transient")
		attempt.Outcome = ledger.AttemptTransient
		// The adapter says whether the request reached the provider with
		// an answer that does not tell whether it was taken: no answer
		// after the request was written, a 5xx, an unreadable 200
		// (provider.Error.MaybeSent). A refused connection carried nothing
		// and is not a possible duplicate, but a failure no adapter
		// classified (status 0) or a gateway timeout is counted as one
		// too: a false mark costs a line in the stats, a missed one hides a
		// duplicate.
		uncertain := pe.MaybeSent || pe.HTTPStatus == 0 || pe.HTTPStatus == http.StatusGatewayTimeout
		e.completer.retryOrFail(ctx, dl, attempt, pe.RetryAfter, uncertain)
	}
}

// flushClaims claims one batch of rows in one ledger statement.
func (e *executor) flushClaims(ctx context.Context, reqs []ledger.ClaimRequest) ([]ledger.Claim, []error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	// The claims are revocable until each send starts (startSend), so a
	// cancel or reschedule that lands while a row waits for its due second,
	// its account, the pace or its recipient is honoured.
	claims, errs, err := e.ledger.ClaimForSendBatch(ctx, reqs, ledger.ClaimParams{
		LeaseFor: e.leaseFor(), EarlyTolerance: e.earlyTolerance, Revocable: true,
	})
	if err != nil {
		return nil, fill(len(reqs), err)
	}
	return claims, errs
}
