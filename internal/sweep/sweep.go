// Package sweep is one run of the minute sweep: settle what expired, then
// lease bounded slices of what is owed (a pending row is written queued by
// the lease itself, as published: ledger.LeaseParams.RequeueAfter), publish
// one queue message per row, and mark the requeued rows queued once their
// messages are accepted, slice after slice, until nothing leasable is
// left, the run's time budget is near, or each provider account has a few
// seconds of its sending published (backpressure); and the counters of
// those runs (Metrics). Each slice is shared, not one oldest-first line:
// between provider accounts, each under its own cap (its pace, or what its
// workers were seen to send, times OWED_QUEUE_DEPTH), and within an account
// round-robin between the tenants with rows waiting, each tenant's rows
// oldest owed first (ledger.LeaseSlice); a paused tenant or a held account
// takes none of it. Rows whose lease ran out get a slice of their own each
// run, at most half the room, so they never starve rows falling due. It
// never leaves a row queued whose message the queue refused (it hands it
// back), never marks a requeued row queued that the queue did not accept,
// never publishes a
// row past its expiry, publishes in the lease's order with delays counted
// from the database's clock, and hands back every row it leased and did not
// publish. A row that cannot be published (its message cannot be built, or
// its due time no message can carry) is set aside (settled failed with the
// reason), never allowed to stop the run. A run started by a due-now
// notification or a top-up (RunNotify) leases the same way but leaves
// expiry and the survey to the cron's runs. Runs may overlap (the cron, the
// fast path): SKIP LOCKED keeps them off each other's rows. The service that
// calls it (the cron endpoint, the top-ups, the configuration, the
// scrape-time backlog and queue gauges) is package sweeper.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue"
)

// Defaults for Config; the sweeper's configuration applies them, and New
// applies those of RequeueBatch, MaxOutstanding and QueueDepth to a library
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
	// MaxOutstandingDefault bounds every account's cap, the rows it may
	// have in flight (leased, queued, sending), however fast it sends.
	MaxOutstandingDefault = 100000
	// QueueDepthDefault is how much of each account's sending the sweeper
	// keeps published: a row that falls due waits behind at most about
	// this much of other rows in the queue, whatever another tenant
	// scheduled (every account's, since the accounts share one queue). The
	// sweeper tops the queue up while rows wait (TopUpEvery), so the depth
	// need only outlast a top-up and the workers' own reach: a worker of one
	// paced account takes its slots up to worker.PaceMaxWaitDefault (500 ms)
	// ahead and receives a message for each, so a queue shallower than that
	// leaves slots unused, and so does a top-up that comes late. Measured on
	// a quiet machine (bench/fairness, docs/fairness.md): with a 500 ms
	// reach, 1 s kept the paced account at 94 % of its pace (A's drain
	// 1.06× its provider bound, short of 1.05×), 1.5 s at 97.6 % (1.02×)
	// while another account's rows, which wait behind this depth in the one
	// queue, still went out within 0.6 s (p99), inside their 2 s bound; 2 s
	// had made them wait up to 2 s.
	QueueDepthDefault = 1500 * time.Millisecond
	// topUpEveryMax bounds TopUpEvery: a deep queue is still topped up
	// twice a second.
	topUpEveryMax = 500 * time.Millisecond
	// leaseMargin is added to the budget for the sweeper's own lease, so a
	// run that is still inside its budget never loses its rows to another.
	leaseMargin = 10 * time.Second
	// publishChunk is how many rows one Publish carries (the backend splits
	// it into its own batches); requeued rows are marked queued after each
	// chunk, so a crash mid-run leaves at most one chunk of them to heal
	// when the run's lease runs out. The pending rows of a slice the crash
	// left unpublished heal later, when the lease the lease wrote them with
	// (OWED_REQUEUE_AFTER past their due time) runs out.
	publishChunk = 100
	// sendRateWindow is how far back an unpaced account's sends are
	// counted.
	sendRateWindow = 5 * time.Second
)

// Account is one provider account the workers send through: the channels
// they route to it and its pace. An unpaced account's depth follows what
// its workers were seen to send (Sweeper.caps).
type Account struct {
	// Name is the provider's name (providers.Sandbox, "twilio", …): an
	// on-call hold of any of the provider's accounts holds it.
	Name     string
	Channels []string
	Rate     pace.Rate
}

// Config shapes every run.
type Config struct {
	// Batch caps the rows leased by one slice (OWED_SWEEP_BATCH), and is
	// the least an unpaced account's cap is.
	Batch int
	// Budget is a run's time budget (OWED_SWEEP_BUDGET): no slice starts
	// when less than twice the slowest slice so far is left of it.
	Budget time.Duration
	// PublishAhead leases rows falling due within this window and publishes
	// them with a delay (OWED_PUBLISH_AHEAD), room allowing.
	PublishAhead time.Duration
	// RequeueAfter republishes a queued row still unsettled this long after
	// its due time (OWED_REQUEUE_AFTER).
	RequeueAfter time.Duration
	// RequeueBatch caps the rows whose lease ran out that one run leases
	// (OWED_SWEEP_REQUEUE_BATCH); zero is RequeueBatchDefault.
	RequeueBatch int
	// MaxOutstanding bounds every account's cap (OWED_SWEEP_MAX_OUTSTANDING);
	// zero is MaxOutstandingDefault. See Caps.
	MaxOutstanding int
	// QueueDepth is how much of each account's sending the sweeper keeps
	// published (OWED_QUEUE_DEPTH); zero is QueueDepthDefault.
	QueueDepth time.Duration
	// Accounts are the provider accounts the workers send through; the
	// first carries every channel none lists. None is one account for
	// every channel at ProviderRate.
	Accounts []Account
	// ProviderRate is the pace of the one account of a Config without
	// Accounts; the zero Rate is unpaced.
	ProviderRate pace.Rate
	// KeyPrefix starts every idempotency key (OWED_IDEMPOTENCY_PREFIX).
	KeyPrefix string
}

// withDefaults fills the zero settings New defaults.
func (c Config) withDefaults() Config {
	if c.RequeueBatch == 0 {
		c.RequeueBatch = RequeueBatchDefault
	}
	if c.MaxOutstanding == 0 {
		c.MaxOutstanding = MaxOutstandingDefault
	}
	if c.QueueDepth == 0 {
		c.QueueDepth = QueueDepthDefault
	}
	if len(c.Accounts) == 0 {
		c.Accounts = []Account{{Rate: c.ProviderRate}}
	}
	return c
}

// Validate names the first unusable setting. New applies the defaults of
// the settings that have them first; Validate alone takes none, so a
// variable set to zero fails here.
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
	case c.RequeueBatch <= 0:
		return fmt.Errorf("OWED_SWEEP_REQUEUE_BATCH=%d must be above zero", c.RequeueBatch)
	case c.MaxOutstanding <= 0:
		return fmt.Errorf("OWED_SWEEP_MAX_OUTSTANDING=%d must be above zero", c.MaxOutstanding)
	case c.QueueDepth < 100*time.Millisecond || c.QueueDepth > time.Hour:
		return fmt.Errorf("OWED_QUEUE_DEPTH=%s must be 100ms to 1h: how much of each provider account's sending the sweeper keeps published", c.QueueDepth)
	// The key is a webhook's webhook-id, and the signature covers
	// "id.timestamp.body": a '.' in the id would blur where it ends.
	case c.KeyPrefix == "" || len(c.KeyPrefix) > 64 || strings.Contains(c.KeyPrefix, "."):
		return fmt.Errorf("OWED_IDEMPOTENCY_PREFIX=%q must be 1 to 64 bytes without '.'", c.KeyPrefix)
	}
	for _, r := range append([]pace.Rate{c.ProviderRate}, rates(c.Accounts)...) {
		if r.Count < 0 || (r.Count > 0) != (r.Per > 0) {
			return fmt.Errorf("OWED_PROVIDER_RATE=%+v is not a rate: read it with pace.ParseRate", r)
		}
	}
	return nil
}

func rates(accts []Account) []pace.Rate {
	out := make([]pace.Rate, len(accts))
	for i, a := range accts {
		out[i] = a.Rate
	}
	return out
}

// PacedCap is a paced account's cap: its pace times the queue depth, at
// least one row and at most MaxOutstanding. The room under it is what a
// slice may lease for the account; rows beyond it wait in the ledger, where
// the lease's order, not the queue's, decides who goes next.
func (c Config) PacedCap(r pace.Rate) int {
	c = c.withDefaults()
	sends := math.Ceil(float64(r.Count) * c.QueueDepth.Seconds() / r.Per.Seconds())
	return int(max(1, min(sends, float64(c.MaxOutstanding))))
}

// TopUpEvery is how long after a run that left rows for want of room the
// sweeper tops the queue up (internal/sweeper): half the queue depth, at
// most topUpEveryMax, so the workers find work whenever they take it.
func (c Config) TopUpEvery() time.Duration {
	return min(c.withDefaults().QueueDepth/2, topUpEveryMax)
}

// UnpacedCap is an unpaced account's cap when its workers were seen to send
// perSecond: that times the queue depth plus one slice (so an idle
// account, or one speeding up, still gets a slice's worth), at most
// MaxOutstanding.
func (c Config) UnpacedCap(perSecond float64) int {
	c = c.withDefaults()
	return int(min(math.Ceil(perSecond*c.QueueDepth.Seconds())+float64(c.Batch), float64(c.MaxOutstanding)))
}

// Publisher is the part of queue.Queue a sweep uses.
type Publisher interface {
	Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error)
}

// Why a run stopped with rows still leasable (Result.HeldBack).
const (
	// HeldBackpressure: an account's rows in flight reached its cap.
	HeldBackpressure = "backpressure"
	// HeldBudget: too little of the budget was left for another slice.
	HeldBudget = "budget"
)

// What started a run (Result.Trigger).
const (
	// TriggerCron is a call of the cron endpoint (Run).
	TriggerCron = "cron"
	// TriggerNotify is a due-now notification or a top-up (RunNotify).
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
	// Outstanding is the rows a live lease held when the run began, every
	// account's; MaxOutstanding is the sum of the accounts' caps.
	Outstanding    int `json:"outstanding"`
	MaxOutstanding int `json:"max_outstanding"`
	// Accounts is each account's part of the run, in Config.Accounts'
	// order.
	Accounts []AccountResult `json:"accounts,omitempty"`
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

// AccountResult is one account's part of a run.
type AccountResult struct {
	// Account is the provider's name (empty for the one account of a
	// Config without Accounts).
	Account string `json:"account"`
	// InFlight is the rows a live lease held when the run began, Cap the
	// most it may hold, Leased what the run leased for it, and Held the
	// rows its last slice left for want of room.
	InFlight int `json:"in_flight"`
	Cap      int `json:"cap"`
	Leased   int `json:"leased"`
	Held     int `json:"held,omitempty"`
}

// Sweeper runs sweeps. Its Run is safe to call concurrently.
type Sweeper struct {
	ledger *ledger.Sweep
	queue  Publisher
	cfg    Config
	log    zerolog.Logger
	// afterPublish, when set, runs after each chunk is accepted and before
	// the rows are marked queued (tests use it to lose the mark).
	afterPublish func(ids []int64) error
}

// New returns a Sweeper over l's Sweep role; cfg must be valid.
func New(l ledger.HasSweep, q Publisher, cfg Config, log zerolog.Logger) (*Sweeper, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sweeper{ledger: l.SweepRole(), queue: q, cfg: cfg, log: log}, nil
}

// sharing is how a run shares its slices: the accounts with their caps
// now (a paced account's from its pace, an unpaced one's from what its
// workers sent in the last sendRateWindow), and how far ahead a live
// lease may end: a queued row's lease ends OWED_REQUEUE_AFTER after its
// due time, at most the publish-ahead window away, and the sweep's own
// after the budget; a lease ending later is a wait parked in the ledger.
func (s *Sweeper) sharing(ctx context.Context) (ledger.Sharing, error) {
	sh := ledger.Sharing{LiveFor: s.cfg.RequeueAfter + s.cfg.PublishAhead + s.cfg.Budget + leaseMargin}
	var sends map[string]int64
	for _, a := range s.cfg.Accounts {
		if a.Rate.IsUnlimited() && sends == nil {
			var err error
			if sends, err = s.sendCounts(ctx); err != nil {
				return sh, fmt.Errorf("count the workers' sends: %w", err)
			}
		}
	}
	for _, a := range s.cfg.Accounts {
		acct := ledger.Account{Name: a.Name, Channels: a.Channels}
		if a.Rate.IsUnlimited() {
			n := sends[a.Name]
			if a.Name == "" {
				// The one account of a Config without Accounts carries
				// every provider's sends.
				n = 0
				for _, v := range sends {
					n += v
				}
			}
			acct.Cap = s.cfg.UnpacedCap(float64(n) / sendRateWindow.Seconds())
		} else {
			acct.Cap = s.cfg.PacedCap(a.Rate)
		}
		sh.Accounts = append(sh.Accounts, acct)
	}
	return sh, nil
}

// sendCounts is the ledger's count of sends per provider over the last
// sendRateWindow, read once per run. It counts no further than the most an
// account's cap can use.
func (s *Sweeper) sendCounts(ctx context.Context) (map[string]int64, error) {
	upTo := int(math.Ceil(float64(s.cfg.MaxOutstanding) * sendRateWindow.Seconds() / s.cfg.QueueDepth.Seconds()))
	return s.ledger.SendRates(ctx, sendRateWindow, min(upTo, math.MaxInt32))
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
	sh, err := s.sharing(ctx)
	if err != nil {
		return res, err
	}
	sv, err := s.ledger.Survey(ctx, s.cfg.PublishAhead, sh, countUpTo(sh))
	if err != nil {
		return res, fmt.Errorf("survey owed rows: %w", err)
	}
	res.OldestOwedAgeS = sv.OldestOwedAge.Seconds()
	d := newDrain(s, &res, start, sh)
	d.count(sv.InFlight)
	if err = d.run(ctx, sv); err != nil {
		return res, err
	}
	if res.Leased == 0 && res.SetAside == 0 && res.HeldBack == "" && (sv.Pending || sv.Requeues) {
		// The survey saw rows to lease and the slices got none. A
		// concurrent run may have taken them since, or they are a paused
		// tenant's; asked again, a lease that cannot see what is owed
		// still finds rows, and is reported.
		if res.Stalled, err = s.ledger.Leasable(ctx, s.cfg.PublishAhead, sh); err != nil {
			return res, fmt.Errorf("check for leasable rows: %w", err)
		}
	}
	return res, nil
}

// countUpTo bounds the survey's read of the rows in flight: twice every
// account's cap, so each account's count is whole while it is near its cap.
func countUpTo(sh ledger.Sharing) int {
	n := 0
	for _, a := range sh.Accounts {
		n += a.Cap
	}
	return min(2*n, math.MaxInt32)
}

// RunNotify performs the run a due-now notification or a top-up starts:
// Run's slices, shared the same way under the same caps — first the rows
// whose lease ran out, in a slice of their own that takes at most half of
// each account's room, then pending slices — but no expiry and no survey
// (the cron's runs settle expired rows, and the lease never takes one). A
// slice with nothing to lease answers from one static check, so a run that
// finds one row due is that check, one lease (which counts the work in
// flight in the same statement) and one mark. A row due now goes out in its
// tenant's turn: ahead of another tenant's backlog, behind its own tenant's
// rows owed before it, beside (never behind) its tenant's requeues, which
// drain at the workers' pace between cron calls.
func (s *Sweeper) RunNotify(ctx context.Context) (res Result, err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Budget)
	defer cancel()
	res.Trigger = TriggerNotify
	defer func() { s.finish(&res, err, start) }()
	sh, err := s.sharing(ctx)
	if err != nil {
		return res, err
	}
	d := newDrain(s, &res, start, sh)
	if _, err = d.slice(ctx, ledger.SliceRequeue, s.cfg.RequeueBatch, 0.5); err != nil {
		return res, err
	}
	for more := true; more; {
		if more, err = d.slice(ctx, ledger.SlicePending, s.cfg.Batch, 1); err != nil {
			return res, err
		}
	}
	return res, nil
}

// LeftRows says a run left rows to lease for want of room or because its
// requeue slice was full: the sweeper tops the queue up after it.
func (s *Sweeper) LeftRows(res Result) bool {
	return res.HeldBack == HeldBackpressure || res.Requeued >= s.cfg.RequeueBatch
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
		Interface("accounts", res.Accounts).
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
