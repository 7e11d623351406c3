// Package sweep is one run of the minute sweep: settle what expired, lease a
// bounded oldest-first slice of what is owed, publish one queue message per
// row, and mark the rows queued; and the counters of those runs (Metrics).
// It never marks a row queued that the queue did not accept, and never
// publishes a row past its expiry. The service that calls it (the cron
// endpoint, the configuration, the scrape-time backlog and queue gauges) is
// package sweeper.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

// Defaults for Config; the sweeper's configuration applies them.
const (
	BatchDefault        = 500
	BudgetDefault       = 50 * time.Second
	PublishAheadDefault = 60 * time.Second
	RequeueAfterDefault = 10 * time.Minute
	KeyPrefixDefault    = "owed-"
	// leaseMargin is added to the budget for the sweeper's own lease, so a
	// run that is still inside its budget never loses its rows to another.
	leaseMargin = 10 * time.Second
	// publishChunk is how many rows one Publish carries (the backend splits
	// it into its own batches); rows are marked queued after each chunk, so
	// a crash mid-run leaves at most one chunk to heal.
	publishChunk = 100
)

// Config shapes every run.
type Config struct {
	// Batch caps the rows leased by one run (OWED_SWEEP_BATCH).
	Batch int
	// Budget is a run's time budget (OWED_SWEEP_BUDGET).
	Budget time.Duration
	// PublishAhead leases rows falling due within this window and publishes
	// them with a delay (OWED_PUBLISH_AHEAD).
	PublishAhead time.Duration
	// RequeueAfter republishes a queued row still unsettled this long after
	// its due time (OWED_REQUEUE_AFTER).
	RequeueAfter time.Duration
	// KeyPrefix starts every idempotency key (OWED_IDEMPOTENCY_PREFIX).
	KeyPrefix string
	// Clock tells the time the publish delays count from; nil is
	// clock.Real(). Give the ledger the same clock. The budget is measured
	// on a timer, never on the clock.
	Clock clock.Clock
}

// Validate names the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.Batch <= 0:
		return fmt.Errorf("OWED_SWEEP_BATCH=%d must be above zero", c.Batch)
	case c.Budget <= 0:
		return fmt.Errorf("OWED_SWEEP_BUDGET=%s must be above zero (hosted runners cap a run at 900s)", c.Budget)
	case c.PublishAhead < 0 || c.PublishAhead > queue.MaxDelay:
		return fmt.Errorf("OWED_PUBLISH_AHEAD=%s must be 0 to %s, the longest delay every queue backend takes", c.PublishAhead, queue.MaxDelay)
	case c.RequeueAfter <= 0:
		return fmt.Errorf("OWED_REQUEUE_AFTER=%s must be above zero", c.RequeueAfter)
	// The key is a webhook's webhook-id, and the signature covers
	// "id.timestamp.body": a '.' in the id would blur where it ends.
	case c.KeyPrefix == "" || len(c.KeyPrefix) > 64 || strings.Contains(c.KeyPrefix, "."):
		return fmt.Errorf("OWED_IDEMPOTENCY_PREFIX=%q must be 1 to 64 bytes without '.'", c.KeyPrefix)
	}
	return nil
}

// Publisher is the part of queue.Queue a sweep uses.
type Publisher interface {
	Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error)
}

// Result counts what one run did. Complete is false when the run could not
// finish: the queue refused, or the budget ran out with leased rows left.
type Result struct {
	Leased      int `json:"leased"`
	Published   int `json:"published"`
	Republished int `json:"republished"`
	// Deduplicated counts messages the queue recognised by their key; only
	// a backend that deduplicates (rest, jetstream) reports any.
	Deduplicated   int     `json:"deduplicated"`
	Expired        int64   `json:"expired"`
	Released       int     `json:"released"`
	DurationMS     int64   `json:"duration_ms"`
	OldestOwedAgeS float64 `json:"oldest_owed_age_s"`
	Complete       bool    `json:"complete"`
	// Stalled is set when the run leased nothing while rows were owed and
	// free to lease: the silent-zero failure, reported loudly.
	Stalled bool   `json:"stalled,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Sweeper runs sweeps.
type Sweeper struct {
	ledger *ledger.Ledger
	queue  Publisher
	cfg    Config
	clock  clock.Clock
	log    zerolog.Logger
	// afterPublish, when set, runs after each chunk is accepted and before
	// the rows are marked queued (tests use it to lose the mark).
	afterPublish func(ids []int64) error
}

// New returns a Sweeper; cfg must be valid.
func New(l *ledger.Ledger, q Publisher, cfg Config, log zerolog.Logger) (*Sweeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	return &Sweeper{ledger: l, queue: q, cfg: cfg, clock: clk, log: log}, nil
}

// errBudget ends a run that reached its time budget.
var errBudget = errors.New("sweep: time budget reached with rows left")

// Run performs one sweep. Its error, when not nil, is also in Result.Error
// and Result.Complete is false; the counts say what was done before it.
func (s *Sweeper) Run(ctx context.Context) (res Result, err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Budget)
	defer cancel()
	defer func() {
		res.DurationMS = time.Since(start).Milliseconds()
		res.Complete = err == nil
		if err != nil {
			res.Error = err.Error()
		}
		s.logRun(res, err)
	}()

	// Expiry first, bounded like the lease: a row past its expires_at is
	// settled, never published.
	if res.Expired, err = s.ledger.ExpireOverdue(ctx, s.cfg.Batch); err != nil {
		return res, fmt.Errorf("expire overdue rows: %w", err)
	}
	leased, err := s.ledger.Lease(ctx, ledger.LeaseParams{
		Limit: s.cfg.Batch, Ahead: s.cfg.PublishAhead, For: s.cfg.Budget + leaseMargin,
	})
	if err != nil {
		return res, fmt.Errorf("lease owed rows: %w", err)
	}
	res.Leased = len(leased)
	if len(leased) == 0 {
		if res.Stalled, err = s.ledger.Leasable(ctx, s.cfg.PublishAhead); err != nil {
			return res, fmt.Errorf("check for leasable rows: %w", err)
		}
	}

	for i := 0; i < len(leased); i += publishChunk {
		chunk := leased[i:min(i+publishChunk, len(leased))]
		if time.Since(start) >= s.cfg.Budget {
			err = errBudget
		} else {
			err = s.publish(ctx, chunk, &res)
		}
		if err != nil {
			// Hand back what was not published so the next run takes it at
			// once. A context that ran out still gets its release: it uses
			// a fresh, short deadline.
			rest := ids(leased[i:])
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			n, rerr := s.ledger.ReleaseLeased(rctx, rest)
			rcancel()
			res.Released += int(n)
			if rerr != nil {
				s.log.Warn().Err(rerr).Int("rows", len(rest)).Msg("release leased rows failed; they heal when their lease runs out")
			}
			break
		}
	}
	if age, aerr := s.ledger.OldestOwedAge(context.WithoutCancel(ctx)); aerr == nil {
		res.OldestOwedAgeS = age.Seconds()
	}
	return res, err
}

// publish sends one chunk and marks the accepted rows queued.
func (s *Sweeper) publish(ctx context.Context, chunk []ledger.Leased, res *Result) error {
	now := s.clock.Now()
	msgs := make([]queue.Message, len(chunk))
	for i, r := range chunk {
		key := ledger.IdempotencyKey(s.cfg.KeyPrefix, r.ID, r.DueAt)
		body, err := envelope.Encode(envelope.Envelope{Tenant: r.Tenant, ID: r.ID, DueAt: r.DueAt, Key: key})
		if err != nil {
			return fmt.Errorf("encode row %d: %w", r.ID, err)
		}
		// The queue key adds the row's generation, so a deliberate
		// republish is never deduplicated away; the provider's key is the row's.
		msgs[i] = queue.Message{Key: ledger.QueueKey(s.cfg.KeyPrefix, r.ID, r.DueAt, r.QueueGeneration), Body: body}
		// Queues count delays in whole seconds and round up; rounding down
		// here instead lets the message surface up to a second early, and
		// the worker waits out the rest (within its early tolerance), so the
		// send lands at the due time rather than up to a second late. A row
		// due beyond the longest delay surfaces early and the worker returns
		// it until it is due.
		if wait := r.DueAt.Sub(now).Truncate(time.Second); wait > 0 {
			msgs[i].Delay = min(wait, queue.MaxDelay)
		}
	}
	results, err := s.queue.Publish(ctx, msgs)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if len(results) != len(msgs) {
		return fmt.Errorf("publish: queue answered %d results for %d messages", len(results), len(msgs))
	}
	var accepted, refused []int64
	var firstRefusal string
	for i, r := range results {
		if r.Err != nil {
			refused = append(refused, chunk[i].ID)
			if firstRefusal == "" {
				firstRefusal = r.Err.Error()
			}
			continue
		}
		accepted = append(accepted, chunk[i].ID)
		res.Published++
		if chunk[i].Republish {
			res.Republished++
		}
		if r.Deduplicated {
			res.Deduplicated++
		}
	}
	if s.afterPublish != nil {
		if err := s.afterPublish(accepted); err != nil {
			return err
		}
	}
	// The mark must outlive a cancelled run: the queue already holds these
	// messages, and a lost mark costs a republish (a second message,
	// absorbed by the worker's claim, or by the key where the queue
	// deduplicates).
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.ledger.MarkQueued(mctx, accepted, s.cfg.RequeueAfter); err != nil {
		return fmt.Errorf("mark %d rows queued: %w", len(accepted), err)
	}
	if len(refused) > 0 {
		n, err := s.ledger.ReleaseLeased(mctx, refused)
		res.Released += int(n)
		if err != nil {
			return fmt.Errorf("release %d refused rows: %w", len(refused), err)
		}
		return fmt.Errorf("queue refused %d of %d messages: %s", len(refused), len(msgs), firstRefusal)
	}
	return nil
}

func (s *Sweeper) logRun(res Result, err error) {
	ev := s.log.Info()
	switch {
	case res.Stalled:
		ev = s.log.Error().Str("fault", "leased nothing while rows are owed and free to lease")
	case err != nil:
		ev = s.log.Error().Err(err)
	}
	ev.Int("leased", res.Leased).Int("published", res.Published).Int("republished", res.Republished).
		Int("deduplicated", res.Deduplicated).Int64("expired", res.Expired).Int("released", res.Released).
		Int64("duration_ms", res.DurationMS).Float64("oldest_owed_age_s", res.OldestOwedAgeS).
		Bool("complete", err == nil).Msg("sweep")
}

func ids(rows []ledger.Leased) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
