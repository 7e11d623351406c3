// Package sweep is one run of the minute sweep: settle what expired, then
// lease bounded oldest-first slices of what is owed, publish one queue
// message per row, and mark the rows queued, slice after slice, until
// nothing leasable is left, the run's time budget is near, or the work
// outstanding reaches what the workers can send before the next sweep
// (backpressure); and the counters of those runs (Metrics). Rows whose lease
// ran out get a capped slice of their own each run, so they never starve
// rows falling due. It never marks a row queued that the queue did not
// accept, never publishes a row past its expiry, and hands back every row it
// leased and did not publish. A row whose message cannot be built is set
// aside (settled failed with the reason), never allowed to stop the run. A
// run started by a due-now notification (RunNotify) leases the same way but
// leaves expiry and the survey to the cron's runs. Runs may overlap (the
// cron, the fast path): SKIP LOCKED keeps them off each other's rows. The service that calls it (the
// cron endpoint, the configuration, the scrape-time backlog and queue
// gauges) is package sweeper.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue"
)

// Defaults for Config; the sweeper's configuration applies them, and New
// applies those of RequeueBatch, MaxOutstanding and Interval to a library
// caller's zero settings.
const (
	BatchDefault        = 500
	BudgetDefault       = 50 * time.Second
	PublishAheadDefault = 60 * time.Second
	RequeueAfterDefault = 10 * time.Minute
	KeyPrefixDefault    = "owed-"
	// RequeueBatchDefault caps the rows whose lease ran out that one run
	// leases: as many as one slice of new rows.
	RequeueBatchDefault = BatchDefault
	// MaxOutstandingDefault caps the rows held by a live lease (leased,
	// queued, sending) when the provider is not paced: workers that send
	// about 830 a second drain it in the two minutes the paced cap also
	// looks ahead (the cron interval plus the publish-ahead window).
	MaxOutstandingDefault = 100000
	// IntervalDefault is how often the cron calls the sweep.
	IntervalDefault = time.Minute
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
	// Batch caps the rows leased by one slice (OWED_SWEEP_BATCH).
	Batch int
	// Budget is a run's time budget (OWED_SWEEP_BUDGET): no slice starts
	// when less than twice the slowest slice so far is left of it.
	Budget time.Duration
	// PublishAhead leases rows falling due within this window and publishes
	// them with a delay (OWED_PUBLISH_AHEAD).
	PublishAhead time.Duration
	// RequeueAfter republishes a queued row still unsettled this long after
	// its due time (OWED_REQUEUE_AFTER).
	RequeueAfter time.Duration
	// RequeueBatch caps the rows whose lease ran out that one run leases
	// (OWED_SWEEP_REQUEUE_BATCH); zero is RequeueBatchDefault.
	RequeueBatch int
	// MaxOutstanding caps the rows a live lease holds, above which a run
	// leases nothing more (OWED_SWEEP_MAX_OUTSTANDING); zero is
	// MaxOutstandingDefault. See OutstandingCap.
	MaxOutstanding int
	// Interval is how often the cron calls the sweep (OWED_SWEEP_INTERVAL);
	// zero is IntervalDefault.
	Interval time.Duration
	// ProviderRate is the workers' pace (OWED_PROVIDER_RATE); the zero Rate
	// is unpaced.
	ProviderRate pace.Rate
	// KeyPrefix starts every idempotency key (OWED_IDEMPOTENCY_PREFIX).
	KeyPrefix string
	// Clock tells the time the publish delays count from; nil is
	// clock.Real(). Give the ledger the same clock. The budget is measured
	// on a timer, never on the clock.
	Clock clock.Clock
}

// withDefaults fills the zero settings New defaults.
func (c Config) withDefaults() Config {
	if c.RequeueBatch == 0 {
		c.RequeueBatch = RequeueBatchDefault
	}
	if c.MaxOutstanding == 0 {
		c.MaxOutstanding = MaxOutstandingDefault
	}
	if c.Interval == 0 {
		c.Interval = IntervalDefault
	}
	return c
}

// Validate names the first unusable setting. New applies the defaults of
// the settings that have them first; Validate alone takes none, so a
// variable set to zero fails here.
func (c Config) Validate() error {
	r := c.ProviderRate
	switch {
	case c.Batch <= 0:
		return fmt.Errorf("OWED_SWEEP_BATCH=%d must be above zero", c.Batch)
	case c.Budget <= 0:
		return fmt.Errorf("OWED_SWEEP_BUDGET=%s must be above zero (hosted runners cap a run at 900s)", c.Budget)
	case c.PublishAhead < 0 || c.PublishAhead > queue.MaxDelay:
		return fmt.Errorf("OWED_PUBLISH_AHEAD=%s must be 0 to %s, the longest delay every queue backend takes", c.PublishAhead, queue.MaxDelay)
	case c.RequeueAfter <= 0:
		return fmt.Errorf("OWED_REQUEUE_AFTER=%s must be above zero", c.RequeueAfter)
	case c.RequeueBatch <= 0:
		return fmt.Errorf("OWED_SWEEP_REQUEUE_BATCH=%d must be above zero", c.RequeueBatch)
	case c.MaxOutstanding <= 0:
		return fmt.Errorf("OWED_SWEEP_MAX_OUTSTANDING=%d must be above zero", c.MaxOutstanding)
	case c.Interval <= 0:
		return fmt.Errorf("OWED_SWEEP_INTERVAL=%s must be above zero: how often the cron calls /cron/sweep", c.Interval)
	case r.Count < 0 || (r.Count > 0) != (r.Per > 0):
		return fmt.Errorf("OWED_PROVIDER_RATE=%+v is not a rate: read it with pace.ParseRate", r)
	// The key is a webhook's webhook-id, and the signature covers
	// "id.timestamp.body": a '.' in the id would blur where it ends.
	case c.KeyPrefix == "" || len(c.KeyPrefix) > 64 || strings.Contains(c.KeyPrefix, "."):
		return fmt.Errorf("OWED_IDEMPOTENCY_PREFIX=%q must be 1 to 64 bytes without '.'", c.KeyPrefix)
	}
	return nil
}

// OutstandingCap is the backpressure cap: the rows a live lease may hold
// (leased, queued or sending) before a run leases no more. Paced, it is what
// the workers can send before the next sweep, the rate times the cron
// interval plus the publish-ahead window (whose rows are published a window
// early), and at most MaxOutstanding; unpaced, MaxOutstanding. The pace is
// the one OWED_PROVIDER_RATE gives every account, so the cap counts one
// account's sends.
func (c Config) OutstandingCap() int {
	c = c.withDefaults()
	r := c.ProviderRate
	if r.IsUnlimited() {
		return c.MaxOutstanding
	}
	sends := math.Ceil(float64(r.Count) * (c.Interval + c.PublishAhead).Seconds() / r.Per.Seconds())
	return int(max(1, min(sends, float64(c.MaxOutstanding))))
}

// Publisher is the part of queue.Queue a sweep uses.
type Publisher interface {
	Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error)
}

// Why a run stopped with rows still leasable (Result.HeldBack).
const (
	// HeldBackpressure: the work outstanding reached OutstandingCap.
	HeldBackpressure = "backpressure"
	// HeldBudget: too little of the budget was left for another slice.
	HeldBudget = "budget"
)

// What started a run (Result.Trigger).
const (
	// TriggerCron is a call of the cron endpoint (Run).
	TriggerCron = "cron"
	// TriggerNotify is a due-now notification (RunNotify).
	TriggerNotify = "notify"
)

// Result counts what one run did. Complete is false when the run could not
// finish: the queue refused, or the budget ran out while a slice was being
// published. A run that stops early on purpose (HeldBack) is complete.
type Result struct {
	// Trigger is what started the run: TriggerCron or TriggerNotify.
	Trigger string `json:"trigger"`
	// Slices counts the lease statements that leased rows.
	Slices int `json:"slices"`
	Leased int `json:"leased"`
	// Requeued counts the rows leased because their lease ran out (the
	// run's requeue slice).
	Requeued    int `json:"requeued"`
	Published   int `json:"published"`
	Republished int `json:"republished"`
	// Deduplicated counts messages the queue recognised by their key; only
	// a backend that deduplicates (rest, jetstream) reports any.
	Deduplicated int   `json:"deduplicated"`
	Expired      int64 `json:"expired"`
	Released     int   `json:"released"`
	// SetAside counts leased rows whose message could not be built: each
	// is settled failed with the reason in last_error, and the run goes on.
	SetAside int `json:"set_aside"`
	// Outstanding is the rows a live lease held when the run began,
	// counted up to MaxOutstanding, the run's backpressure cap.
	Outstanding    int `json:"outstanding"`
	MaxOutstanding int `json:"max_outstanding"`
	// HeldBack says why the run stopped while rows were still leasable:
	// HeldBackpressure or HeldBudget; empty when it leased all it found.
	HeldBack       string  `json:"held_back,omitempty"`
	DurationMS     int64   `json:"duration_ms"`
	OldestOwedAgeS float64 `json:"oldest_owed_age_s"`
	Complete       bool    `json:"complete"`
	// Stalled is set when the run leased nothing while rows were owed and
	// free to lease: the silent-zero failure, reported loudly.
	Stalled bool   `json:"stalled,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Sweeper runs sweeps. Its Run is safe to call concurrently.
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
	cfg = cfg.withDefaults()
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

// Run performs one sweep, the cron's. Its error, when not nil, is also in
// Result.Error and Result.Complete is false; the counts say what was done
// before it.
func (s *Sweeper) Run(ctx context.Context) (res Result, err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Budget)
	defer cancel()
	res.Trigger = TriggerCron
	defer func() { s.finish(&res, err, start) }()

	// Expiry first, bounded like a slice: a row past its expires_at is
	// settled, never published.
	if res.Expired, err = s.ledger.ExpireOverdue(ctx, s.cfg.Batch); err != nil {
		return res, fmt.Errorf("expire overdue rows: %w", err)
	}
	limit := s.cfg.OutstandingCap()
	sv, err := s.ledger.Survey(ctx, s.cfg.PublishAhead, limit)
	if err != nil {
		return res, fmt.Errorf("survey owed rows: %w", err)
	}
	res.Outstanding, res.MaxOutstanding, res.OldestOwedAgeS = sv.Outstanding, limit, sv.OldestOwedAge.Seconds()
	d := &drain{s: s, res: &res, start: start, room: limit - sv.Outstanding}
	if err = d.run(ctx, sv); err != nil {
		return res, err
	}
	if res.Leased == 0 && res.HeldBack == "" && (sv.Pending || sv.Requeues) {
		// The survey saw rows to lease and the slices got none. A
		// concurrent run may have taken them since; asked again, a claim
		// that cannot see what is owed still finds rows, and is reported.
		if res.Stalled, err = s.ledger.Leasable(ctx, s.cfg.PublishAhead); err != nil {
			return res, fmt.Errorf("check for leasable rows: %w", err)
		}
	}
	return res, nil
}

// RunNotify performs the run a due-now notification starts: the slices of
// Run, oldest pending first, under the same backpressure cap, but no expiry
// and no survey (the cron's runs settle expired rows, and the lease never
// takes one) and no requeue slice, so a run that finds one row due is one
// lease (which counts the outstanding work in the same statement) and one
// mark. Taking the oldest pending rows first is what keeps the ordering
// rule: a row due now never jumps rows owed before it; behind a backlog the
// run drains the backlog's head, as far as the cap has room.
func (s *Sweeper) RunNotify(ctx context.Context) (res Result, err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Budget)
	defer cancel()
	res.Trigger = TriggerNotify
	defer func() { s.finish(&res, err, start) }()
	res.MaxOutstanding = s.cfg.OutstandingCap()
	d := &drain{s: s, res: &res, start: start, room: res.MaxOutstanding, uncounted: true}
	for more := true; more; {
		if more, err = d.slice(ctx, ledger.SlicePending, s.cfg.Batch); err != nil {
			return res, err
		}
	}
	return res, nil
}

// finish completes a run's result and logs it.
func (s *Sweeper) finish(res *Result, err error, start time.Time) {
	res.DurationMS = time.Since(start).Milliseconds()
	res.Complete = err == nil
	if err != nil {
		res.Error = err.Error()
	}
	s.logRun(*res, err)
}

func (s *Sweeper) logRun(res Result, err error) {
	ev := s.log.Info()
	switch {
	case res.Stalled:
		ev = s.log.Error().Str("fault", "leased nothing while rows are owed and free to lease")
	case err != nil:
		ev = s.log.Error().Err(err)
	}
	ev.Str("trigger", res.Trigger).Int("slices", res.Slices).Int("leased", res.Leased).Int("requeued", res.Requeued).
		Int("published", res.Published).Int("republished", res.Republished).Int("deduplicated", res.Deduplicated).
		Int64("expired", res.Expired).Int("released", res.Released).Int("set_aside", res.SetAside).
		Int("outstanding", res.Outstanding).Int("max_outstanding", res.MaxOutstanding).Str("held_back", res.HeldBack).
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
