// Package worker drains the delivery queue: for each message it re-enters
// the row's tenant scope, claims the row, sends through the provider with
// the row's idempotency key, records the outcome, settles the row, and only
// then acknowledges the message.
//
// The worker never acks a message before its row is settled (or found
// settled, expired or stale): acking first would turn the at-least-once
// queue into an at-most-once one. A provider 429 is a schedule, not a
// failure: the claim is released, the row comes back after Retry-After,
// every worker sharing the account is paused (only the recipient waits when
// the provider scoped the limit to it: recipients.go), and no attempt is
// counted.
// The worker never relies on the queue's receive count: the ledger counts
// attempts and decides dead letters, and the worker moves a failed row's
// message to the dead letters itself: the dead letters are for what owed
// could not process (attempts exhausted, content the provider refuses, a
// poison message); a recipient's own permanent failure is recorded on the
// row with the provider's code and its message acked.
//
// An account error (provider.Account: an expired credential, no credit) is
// no row's failure: it trips the account's circuit, shared by every worker
// through Postgres (pace.Accounts, account.go), costs no attempt, and the
// row waits until a probe or on-call resumes the account. A transient
// failure is retried on the channel's schedule (retry.go), never past the
// row's expiry. Waits live in the ledger, not in the queue: a message is
// returned to the queue only for a wait of at most QueueDelayMax (a
// returned message holds a place in the queue's in-flight set, bounded and
// shared by every tenant, for its whole delay); a longer wait, or one with
// no known end (an operator pause), is handed back to the ledger: the row
// stays queued under a lease that ends at its not-before time and its
// message is acked, the one ack before a settle, made only once the ledger
// holds the row, and the sweep publishes the row again then. A channel no
// provider carries in this process returns its message later.
//
// A claim is the worker's only while it is fenced and alive. The ledger
// hands each claim a token (ledger.Hold); every write after the claim names
// it and changes the row only while it is still the row's, so a worker whose
// claim was superseded (its lease ran out while it stalled, and another
// worker claimed the row) changes nothing, logs it, and leaves the message
// alone: it never acks, returns or dead-letters on a claim it no longer
// holds, since the message may be the one the new holder is delivering.
// From the claim to the outcome write a heartbeat (lease.go) extends the
// row's lease and the message's visibility every third of the visibility
// timeout, over the recipient look-up, the pace and due-second waits and
// the send alike; and before the send the worker makes sure the claim is
// still its own with lease enough left to cover the send, or does not send.
//
// The package is laid out the way River splits a job's life, into three
// types that Worker wires, each holding only what it needs:
//   - worker.go is the loop: Start, Stop and Run, the pool of senders, the
//     graceful shutdown, and the fetcher (River's producer), which
//     long-polls the queue for what the gate admits and hands it out.
//   - executor.go is the executor: one message's delivery, a delivery
//     value carried from the claim through the checks (due, recipient,
//     account, pace, expiry, the claim still held) to the provider's
//     answer. It decides; it writes no outcome itself.
//   - account.go is the provider account's circuit as the worker uses it;
//     recipients.go the limits a provider sets on one recipient, and the
//     per-recipient paces; retry.go the retry schedules.
//   - lease.go is a claim's heartbeat and the reckoning of how long the
//     claim is certainly still the worker's.
//   - completer.go is the completer: it writes every outcome (settle
//     delivered, skipped, expired or failed, release with backoff,
//     dead-letter, return and ack), the delivered settles buffered into
//     shared commits and acked only after them.
//   - gate.go keeps the fetchers from receiving more than the providers'
//     shared pace can send soon.
//   - batch.go shares ledger commits and queue calls among the messages in
//     flight; options.go holds Options and their defaults; service.go the
//     OWED_* configuration, the pace adapter and the health handler.
//
// Every instant the worker reads comes from one clock.Clock (Options.Clock,
// the ledger's too). A wait is a duration computed from that clock's
// instants, never against another clock, and is slept with clock.Sleep, so
// shutdown cuts it short. The ledger's times (a lease's end, a due time, an
// expiry) are never compared with the worker's clock: the ledger computes
// the lease from its own now and answers durations measured from the
// claim's instant (ledger.Claim.Wait, Claim.Now), which the worker counts
// on its own clock from a reading taken before it asked, so a host whose
// clock is off by any amount neither sends early nor trusts a lease longer
// than the ledger granted it. Those readings are clock.Readings (monotonic
// in production), so a host whose clock is stepped, backwards or forwards,
// mid-delivery neither starts a send after the row's expiry nor stretches
// its lease. Work that shutdown must not cut short (a receive
// under way, recording a provider's answer, handing a message back) runs on
// a context detached from the worker's, and every such context has a
// deadline. The worker's own shutdown never costs a row an attempt.
package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/queue"
)

const (
	// claimBatch and settleBatch bound how many claims or accepted sends
	// share one ledger commit. Claims do not linger: a batch is what
	// gathered while the previous one was committed, so an idle worker adds
	// no delay. Settles linger for Options.SettleLinger (none by default),
	// which widens the window between a provider's accept and its record
	// (the one a crash can turn into a resend) by as much.
	//
	// They are as large as a worker's sends in flight usually are: the
	// batch statements are set-based (owed_claim_many,
	// owed_settle_delivered_many), so a larger batch shares one plan, one
	// round trip and one commit among more rows, and a cap below the sends
	// in flight only splits a backlog's batches in two. The completer holds
	// at most two batches of settles (one committing, one gathering) before
	// a sender that finished waits for room.
	claimBatch  = 128
	claimLinger = 0
	settleBatch = 128
	// ackBatch and ackLinger bound how acks are gathered into one call.
	// Nobody waits for an ack (the row is settled already), so an ack may
	// linger: 20 ms gathers a backlog's acks into one request and one
	// queue statement per hundred or so, and a message acked 20 ms later
	// is still hidden (its visibility timeout is seconds), or absorbed as a
	// settled row's copy if the worker dies first.
	ackBatch  = 500
	ackLinger = 20 * time.Millisecond
	// consumeBatch is the most messages one receive asks for: every
	// backend's limit (SQS's is 10). The gate asks for fewer when the
	// providers' pace cannot take that many soon.
	consumeBatch = 10
	// consumeWait is the long poll of one receive, shorter than the
	// contract's queue.MaxWait because a shutdown waits for the receive in
	// flight: cutting it off could leave what the server already handed out
	// hidden for the whole visibility timeout, so it is let finish and what
	// it got is handed back at once. 5 s keeps a shutdown prompt at the cost
	// of an idle fetcher polling every 5 s instead of every 20 s.
	consumeWait = 5 * time.Second
	// receiveMargin is how long past consumeWait a receive may run (a slow
	// answer, the client's own retry) before its detached context ends.
	receiveMargin = 5 * time.Second
	// consumeRetryMax caps the pause after consecutive failed polls, which
	// grows by a second per failure.
	consumeRetryMax = 30 * time.Second
)

// ErrStarted is returned by Start and Run on a Worker that was already
// started: a Worker runs once, and a second pool would share its batchers.
var ErrStarted = errors.New("worker: already started; a Worker runs once, build another with New")

// Worker is a pool of senders draining one queue. It wires the three parts
// of a message's life, each holding only what it needs, as River's producer,
// executor and completer: the fetcher receives what the gate admits and
// hands it out, an executor takes each message from its claim to the
// provider's answer, and the completer writes every outcome and acks.
type Worker struct {
	o         Options
	fetcher   *fetcher
	executor  *executor
	completer *completer
	// live is the loop's progress, for /healthz (liveness.go).
	live *liveness

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc // ends fetching; nil until Start
	done    chan struct{}      // closed when the pool has drained
}

// New returns a Worker.
func New(o Options) (*Worker, error) {
	if o.Ledger == nil || o.Queue == nil || o.Route == nil || o.Pace == nil {
		return nil, errors.New("worker: Ledger, Queue, Route and Pace are required")
	}
	o.defaults()
	if err := checkKeyPrefix(o.KeyPrefix); err != nil {
		return nil, fmt.Errorf("worker: KeyPrefix: %w", err)
	}
	work := o.Ledger.WorkRole()
	live := newLiveness(o.StallAfter)
	c := newCompleter(o, work)
	e := newExecutor(o, work, c, live)
	f := &fetcher{queue: o.Queue, visibility: o.VisibilityTimeout, log: o.Log, gate: e.gate, live: live, completer: c}
	return &Worker{o: o, fetcher: f, executor: e, completer: c, live: live}, nil
}

// Start begins consuming and returns at once. The pool runs until Stop is
// called or ctx ends; either way it stops consuming, lets in-flight sends
// finish within the shutdown timeout, and hands back messages it holds but
// has not started. Start returns ErrStarted if the Worker was started
// before.
func (w *Worker) Start(ctx context.Context) error {
	_, err := w.start(ctx)
	return err
}

func (w *Worker) start(ctx context.Context) (<-chan struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil, ErrStarted
	}
	w.started = true
	fetchCtx, cancel := context.WithCancel(ctx)
	w.cancel, w.done = cancel, make(chan struct{})
	go func() {
		defer close(w.done)
		w.run(fetchCtx)
	}()
	return w.done, nil
}

// Stop shuts the pool down as described at Start and returns when it has
// drained: every row it settled is recorded and its message acked. It is
// safe to call more than once, concurrently, or before Start.
func (w *Worker) Stop() {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Run is Start followed by waiting: it consumes until ctx is cancelled (or
// Stop is called), shuts down as described at Start, and returns nil, or
// ErrStarted at once if the Worker was started before.
func (w *Worker) Run(ctx context.Context) error {
	done, err := w.start(ctx)
	if err != nil {
		return err
	}
	<-done
	return nil
}

// run is the pool: fetchers hand messages to senders until ctx ends, then
// the senders finish within the shutdown timeout.
func (w *Worker) run(ctx context.Context) {
	// work carries one message from a fetcher to a sender. It is unbuffered:
	// a fetcher only holds what it consumed until a sender is free.
	work := make(chan queue.Delivery)
	// sendCtx outlives ctx by the shutdown timeout at most (it is cancelled
	// below), so a send under way when SIGTERM arrives can still be
	// recorded and acked.
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	// The batchers outlive the senders: every settled row is recorded and
	// its ack sent before the pool returns. Acks stop last. Each flush has
	// its own deadline.
	bctx := context.WithoutCancel(ctx)
	w.completer.start(bctx)
	defer w.completer.stop()
	w.executor.start(bctx)
	defer w.executor.stop()

	var senders sync.WaitGroup
	for i := 0; i < w.o.Concurrency; i++ {
		senders.Go(func() {
			for msg := range work {
				w.executor.execute(sendCtx, msg)
			}
		})
	}
	fetchers := max(1, (w.o.Concurrency+9)/10)
	var fetching sync.WaitGroup
	for i := 0; i < fetchers; i++ {
		fetching.Go(func() { w.fetcher.fetch(ctx, work) })
	}
	<-ctx.Done()
	// The shutdown timeout runs from the stop, while a receive under way
	// finishes too. Sends still running when it ends are cut off; each
	// releases its claim, with no attempt counted, and returns its message
	// on the way out.
	cutOff := time.AfterFunc(w.o.ShutdownTimeout, func() {
		w.o.Log.Warn().Dur("timeout", w.o.ShutdownTimeout).Msg("shutdown timeout: cancelling in-flight sends")
		cancelSends()
	})
	defer cutOff.Stop()
	fetching.Wait()
	close(work)
	senders.Wait()
}

// fetcher receives from the queue as much as the gate admits and hands each
// message to a free executor (River's producer). What it received but could
// not hand out at shutdown it gives back through the completer.
type fetcher struct {
	queue      Queue
	visibility time.Duration
	log        zerolog.Logger
	gate       *gate
	live       *liveness
	completer  *completer
}

// fetch receives as much as the gate lets through and hands it to
// senders, until ctx ends. At shutdown, messages already received but not
// handed over, including those of a receive that was under way, are
// returned so they come back at once instead of after their visibility
// timeout.
func (f *fetcher) fetch(ctx context.Context, work chan<- queue.Delivery) {
	fail := 0
	retry := func(err error, msg string) bool {
		fail++
		delay := jitter(min(time.Duration(fail)*time.Second, consumeRetryMax))
		f.log.Warn().Err(err).Dur("retry_in", delay).Msg(msg)
		return clock.Sleep(ctx, delay)
	}
	for ctx.Err() == nil {
		n, err := f.gate.take(ctx)
		if err != nil {
			if ctx.Err() != nil || !retry(err, "pace unreadable; not receiving") {
				return
			}
			continue
		}
		if n == 0 {
			return
		}
		end := f.live.begin("receiving", consumeWait+receiveMargin)
		msgs, err := f.receive(ctx, n)
		end()
		f.live.received(len(msgs))
		f.gate.received(ctx, n, len(msgs))
		if err != nil {
			if ctx.Err() != nil || !retry(err, "receive failed") {
				return
			}
			continue
		}
		fail = 0
		f.handOut(ctx, msgs, work)
	}
}

// receive runs one long poll for up to n messages on a context detached
// from ctx, so a shutdown lets it finish (see consumeWait) rather than cut
// it off.
func (f *fetcher) receive(ctx context.Context, n int) ([]queue.Delivery, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), consumeWait+receiveMargin)
	defer cancel()
	return f.queue.Receive(rctx, n, consumeWait, f.visibility)
}

// handOut gives msgs to senders one by one while ctx lasts; once it ends,
// the rest go back to the queue at once.
func (f *fetcher) handOut(ctx context.Context, msgs []queue.Delivery, work chan<- queue.Delivery) {
	for i, msg := range msgs {
		if ctx.Err() == nil {
			select {
			case work <- msg:
				continue
			case <-ctx.Done():
			}
		}
		for _, left := range msgs[i:] {
			f.completer.returnAfter(ctx, left, 0, "worker shutting down")
		}
		f.gate.done(len(msgs) - i)
		f.live.finished(len(msgs) - i)
		return
	}
}
