package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/sweep"
)

// Defaults for Options. They are the only source of the worker's defaults:
// Options.defaults applies them to a library caller's zero settings, and
// defaultConfig to the OWED_* variables that are not set.
const (
	ConcurrencyDefault = 16
	// MaxAttemptsDefault is the attempts of a row without a retry schedule
	// (a library caller's zero Retries); with one, a row gets the
	// schedule's length plus its first send, unless MaxAttempts is set.
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
	// its turn at the provider; beyond it the message is returned to the
	// queue until its turn (ChangeVisibility), so the backlog waits in the
	// queue, not in memory. Each return costs a receive, so the worker
	// receives only as many messages as the pace can take within it.
	//
	// It is short because everything a worker holds for the pace is work
	// every other row waits behind: the queue is one line for every tenant
	// and account, and a worker's senders, sleeping through pace waits, are
	// shared too. The sweeper keeps OWED_QUEUE_DEPTH of each account's
	// sending published (sweep.QueueDepthDefault), and that depth has to
	// outlast the worker's reach, or slots taken ahead go unused: with a 2 s
	// reach a 1 s depth kept one paced account 88 % busy, and a 2 s depth
	// made another account's row wait up to 2 s behind it in the queue; the
	// depth is 1.5 s now, which keeps a paced account busy with a 500 ms
	// reach (bench/limitedsweep, bench/fairness: docs/fairness.md).
	PaceMaxWaitDefault = 500 * time.Millisecond
	// RetryBaseDefault is the first backoff after a transient failure
	// without a retry schedule; it doubles per attempt up to retryCap.
	RetryBaseDefault = 5 * time.Second
	// QueueDelayMaxDefault is the longest a message is returned to the
	// queue for when the Options name none (the service takes its
	// backend's, backends.Config.QueueDelayMax): a returned message stays
	// in the queue's in-flight set for its whole delay, so a longer wait is
	// handed to the ledger instead.
	QueueDelayMaxDefault = time.Minute
)

// Queue is the part of queue.Queue the worker uses.
type Queue interface {
	Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error)
	Ack(ctx context.Context, receipts ...string) error
	ChangeVisibility(ctx context.Context, receipt string, d time.Duration) error
	DeadLetter(ctx context.Context, d queue.Delivery, reason string) error
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
	// Next says, taking nothing, how far away the account's next free slot
	// is and how far apart its slots are (0: the account is unlimited). The
	// worker asks before each receive (see gate), so it should be a cheap
	// read.
	Next(ctx context.Context) (wait, interval time.Duration, err error)
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
	// Ledger is the worker's part of the ledger: its Work role, or a
	// *ledger.Ledger, which has it. The worker keeps only the role.
	Ledger ledger.HasWork
	Queue  Queue
	// Route returns the Sender for a channel.
	Route func(channel string) (provider.Sender, error)
	// Pace returns the shared pace of a provider account.
	Pace     func(account string) Pacer
	Resolver Resolver
	Log      zerolog.Logger
	Metrics  *Metrics
	// Clock stamps attempts and measures the durations the ledger answers
	// (until a row is due, expires, or its claim's lease ends); it is
	// clock.Real() unless a test passes another. A test that stubs it gives
	// the ledger the same clock, so the database's instant moves with it.
	Clock clock.Clock

	// KeyPrefix starts every provider idempotency key, as the sweeper's
	// (OWED_IDEMPOTENCY_PREFIX; sweep.KeyPrefixDefault when empty). The
	// worker derives each row's key from the claimed row with it
	// (ledger.IdempotencyKey) and never sends the key a message carries.
	KeyPrefix string

	// Accounts is the provider accounts' circuit, shared by every worker
	// through Postgres; pace.NewAccounts over the Ledger's database and
	// Clock when nil.
	Accounts *pace.Accounts
	// AccountPause is how long an account error (provider.Account) pauses
	// every send on the account before one worker probes it
	// (OWED_PROVIDER_ACCOUNT_PAUSE; pace.AccountPauseDefault).
	AccountPause time.Duration
	// Retries are the retry schedules (OWED_RETRY_SCHEDULE and
	// OWED_RETRY_SCHEDULE_<CHANNEL>). Without a Default schedule a row is
	// retried with exponential backoff from RetryBase.
	Retries Retries
	// QueueDelayMax is the longest a message is returned to the queue for
	// (OWED_QUEUE_DELAY_MAX; QueueDelayMaxDefault, or the backend's in the
	// service). A returned message is in flight for its whole delay, and
	// a queue's in-flight set is bounded and shared by every tenant
	// (JetStream's MaxAckPending, SQS's in-flight quota), so a longer wait
	// (a retry step, a 429's Retry-After, a paused account) hands the row
	// back to the ledger instead: the row stays queued under a lease that
	// ends at its not-before time, its message is acked once that commits,
	// and the sweep publishes the row again when the lease runs out. A
	// message whose row the worker could not claim (not due yet, held by
	// another worker) is returned for at most this long and looked at
	// again.
	QueueDelayMax time.Duration
	// RequeueAfter is how long past the end of its wait a row whose message
	// was returned to the queue may stay unsettled before the sweep takes
	// the message for lost and publishes the row again
	// (OWED_REQUEUE_AFTER, read by the sweeper too, which gives a published
	// row the same window past its due time; sweep.RequeueAfterDefault when
	// zero). One window for both: a queue that loses a returned message
	// (a server that keeps its messages in memory, killed) costs the row no
	// longer than one that loses a published one.
	RequeueAfter time.Duration
	// RecipientRates is each channel's per-recipient pace
	// (OWED_RECIPIENT_RATE_<CHANNEL>): how often this process sends to one
	// recipient of one provider account. A channel without one has none;
	// a provider's limit on a recipient (a rate-limited answer scoped to
	// it) is kept whatever the pace (recipients.go).
	RecipientRates map[string]pace.Rate
	// NoUndeliverable turns the undeliverable recipients off
	// (OWED_UNDELIVERABLE=false): a recipient's permanent failure marks
	// nothing and no send is skipped for a mark (undeliverable.go).
	NoUndeliverable bool

	Concurrency int
	// MaxAttempts caps the sends of a row (OWED_MAX_ATTEMPTS); zero means
	// the retry schedule's length plus one (MaxAttemptsDefault without a
	// schedule).
	MaxAttempts       int
	SendTimeout       time.Duration
	VisibilityTimeout time.Duration
	ShutdownTimeout   time.Duration
	RetryAfterMax     time.Duration
	EarlyTolerance    time.Duration
	PaceMaxWait       time.Duration
	RetryBase         time.Duration
	// StallAfter is how long the worker may make no progress while it has
	// work before Healthz fails (OWED_WORKER_STALL_AFTER;
	// StallAfterDefault); see liveness.
	StallAfter time.Duration
	// SettleLinger is how long the completer waits for company after the
	// first accepted send of a batch before it commits the batch
	// (OWED_WORKER_SETTLE_LINGER); zero, the default, commits what gathered
	// while the previous batch was committed. A linger makes batches larger
	// under a light load, at the cost of as much more time between a
	// provider's accept and its record, in which a crash means a resend
	// flagged as a possible duplicate.
	SettleLinger time.Duration
}

func (o *Options) defaults() {
	orDefault(&o.Concurrency, ConcurrencyDefault)
	orDefault(&o.AccountPause, pace.AccountPauseDefault)
	orDefault(&o.QueueDelayMax, QueueDelayMaxDefault)
	orDefault(&o.RequeueAfter, sweep.RequeueAfterDefault)
	orDefault(&o.SendTimeout, SendTimeoutDefault)
	orDefault(&o.VisibilityTimeout, VisibilityTimeoutDefault)
	orDefault(&o.ShutdownTimeout, ShutdownTimeoutDefault)
	orDefault(&o.RetryAfterMax, RetryAfterMaxDefault)
	orDefault(&o.EarlyTolerance, EarlyToleranceDefault)
	orDefault(&o.PaceMaxWait, PaceMaxWaitDefault)
	orDefault(&o.RetryBase, RetryBaseDefault)
	orDefault(&o.StallAfter, StallAfterDefault)
	o.SettleLinger = max(o.SettleLinger, 0)
	if o.KeyPrefix == "" {
		o.KeyPrefix = sweep.KeyPrefixDefault
	}
	if o.Resolver == nil {
		o.Resolver = RecipientResolver{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.Accounts == nil {
		o.Accounts = pace.NewAccounts(o.Ledger.WorkRole().DB(), o.Clock)
	}
}

// checkKeyPrefix refuses an idempotency prefix the sweeper refuses too
// (sweep.Config): the key is a webhook's webhook-id, and its signature
// covers id.timestamp.body, which a '.' in the id would make ambiguous.
func checkKeyPrefix(p string) error {
	if p == "" || len(p) > 64 || strings.Contains(p, ".") {
		return fmt.Errorf("OWED_IDEMPOTENCY_PREFIX=%q must be 1 to 64 bytes without '.'", p)
	}
	return nil
}

// orDefault replaces a zero or negative setting with its default.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
