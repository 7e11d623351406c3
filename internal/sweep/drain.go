package sweep

import (
	"context"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

// drain is one run's slices: how they are shared (the accounts and their
// caps), what the run saw of each account, and its slowest slice, which
// says when the budget is near.
type drain struct {
	s       *Sweeper
	res     *Result
	start   time.Time
	sh      ledger.Sharing
	slowest time.Duration
	// counted is set once the run knows each account's rows in flight:
	// from the survey (Run), or from its first slice (RunNotify), which
	// counts them in the statement that leases.
	counted bool
	// stop is set when the run leases no more (the budget is near).
	stop bool
}

func newDrain(s *Sweeper, res *Result, start time.Time, sh ledger.Sharing) *drain {
	res.Accounts = make([]AccountResult, len(sh.Accounts))
	for i, a := range sh.Accounts {
		res.Accounts[i] = AccountResult{Account: a.Name, Cap: a.Cap}
		res.MaxOutstanding += a.Cap
	}
	return &drain{s: s, res: res, start: start, sh: sh}
}

// count records each account's rows in flight when the run began.
func (d *drain) count(inFlight []int) {
	if d.counted {
		return
	}
	d.counted = true
	for i, n := range inFlight {
		if i < len(d.res.Accounts) {
			d.res.Accounts[i].InFlight = n
			d.res.Outstanding += n
		}
	}
}

// run leases slice after slice: first the rows whose lease ran out, in a
// slice of their own that takes at most half of each account's room while
// pending rows wait, so neither kind starves the other when the caps are
// tight; then pending slices until one comes back with nothing more.
func (d *drain) run(ctx context.Context, sv ledger.Survey) error {
	if sv.Requeues {
		share := 1.0
		if sv.Pending {
			share = 0.5
		}
		if _, err := d.slice(ctx, ledger.SliceRequeue, d.s.cfg.RequeueBatch, share); err != nil {
			return err
		}
	}
	for more := sv.Pending; more; {
		var err error
		if more, err = d.slice(ctx, ledger.SlicePending, d.s.cfg.Batch, 1); err != nil {
			return err
		}
	}
	return nil
}

// slice leases at most limit rows of kind, taking share of each account's
// room, and publishes them in the lease's order. It reports whether more
// may wait: the slice took all it asked for, or a tenant had more rows
// than its part of the slice. A slice that leaves rows for want of room
// says so in the result (HeldBackpressure); a run near its budget leases
// nothing (HeldBudget).
func (d *drain) slice(ctx context.Context, kind ledger.Slice, limit int, share float64) (bool, error) {
	if d.stop {
		return false, nil
	}
	if time.Since(d.start)+2*d.slowest >= d.s.cfg.Budget {
		d.stop = true
		return false, d.holdForBudget(ctx)
	}
	began := time.Now()
	r, err := d.s.ledger.LeaseSlice(ctx, ledger.LeaseParams{Limit: limit, Ahead: d.s.cfg.PublishAhead,
		For: d.s.cfg.Budget + leaseMargin, RequeueAfter: d.s.cfg.RequeueAfter, Slice: kind, Share: share, Sharing: d.sh})
	if err != nil {
		return false, fmt.Errorf("lease owed rows: %w", err)
	}
	answered := time.Now()
	inFlight := make([]int, len(r.Accounts))
	held, more := false, false
	for i, a := range r.Accounts {
		inFlight[i] = a.InFlight
		if i < len(d.res.Accounts) {
			d.res.Accounts[i].Held = a.Held
		}
		held = held || a.Held > 0
		more = more || a.More
	}
	if r.Counted {
		d.count(inFlight)
	}
	for _, id := range r.SetAside {
		d.res.SetAside++
		d.s.log.Error().Int64("id", id).Str("reason", "its due time cannot be carried by a message, or the lease could not apply it; see last_error").
			Msg("sweep: row set aside, settled failed")
	}
	if len(r.Rows) > 0 {
		d.res.Slices++
		d.res.Leased += len(r.Rows)
		for _, row := range r.Rows {
			if row.Account < len(d.res.Accounts) {
				d.res.Accounts[row.Account].Leased++
			}
		}
		for _, row := range r.Rows {
			if row.Requeue {
				d.res.Requeued++
			}
		}
		// Publish delays count from the database's instant of the lease,
		// moved on by the time since it answered (a monotonic reading):
		// one clock, whatever the sweeper's own wall clock says.
		at := func() time.Time { return r.Now.Add(time.Since(answered)) }
		if err := d.s.publishSlice(ctx, r.Rows, at, d.start, d.res); err != nil {
			return false, err
		}
		d.slowest = max(d.slowest, time.Since(began))
	}
	taken := len(r.Rows) + len(r.SetAside)
	next := taken >= limit || (taken > 0 && more)
	if !next && held {
		d.res.HeldBack = HeldBackpressure
	}
	return next, nil
}

// holdForBudget ends the run's slices near its budget, which the result
// reports only when a row is still leasable: the last slice may have taken
// the last one.
func (d *drain) holdForBudget(ctx context.Context) error {
	left, err := d.s.ledger.Leasable(ctx, d.s.cfg.PublishAhead, d.sh)
	if err != nil {
		return fmt.Errorf("check for leasable rows: %w", err)
	}
	if left && d.res.HeldBack == "" {
		d.res.HeldBack = HeldBudget
	}
	return nil
}

// publishSlice publishes a slice chunk by chunk, at tells the database's
// instant. When a chunk fails, or the budget ran out, it hands back what
// was not published so the next run takes it at once. A context that ran
// out still gets its release: it uses a fresh, short deadline.
func (s *Sweeper) publishSlice(ctx context.Context, leased []ledger.Leased, at func() time.Time, start time.Time, res *Result) error {
	for i := 0; i < len(leased); i += publishChunk {
		var err error
		if time.Since(start) >= s.cfg.Budget {
			err = errBudget
		} else {
			err = s.publish(ctx, leased[i:min(i+publishChunk, len(leased))], at(), res)
		}
		if err != nil {
			rest := ids(leased[i:])
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			n, rerr := s.ledger.ReleaseLeased(rctx, rest)
			rcancel()
			res.Released += int(n)
			if rerr != nil {
				s.log.Warn().Err(rerr).Int("rows", len(rest)).Msg("release leased rows failed; they heal when their lease runs out")
			}
			return err
		}
	}
	return nil
}

// publish sends one chunk, in the lease's order, and marks the accepted
// rows the lease left leased queued (the lease wrote the others queued);
// now is the database's instant. A row whose message cannot
// be built is set aside first, and the rest go out.
func (s *Sweeper) publish(ctx context.Context, chunk []ledger.Leased, now time.Time, res *Result) error {
	chunk, digests, err := s.foldDigests(ctx, chunk)
	if err != nil {
		return err
	}
	chunk, bodies, err := s.encodeChunk(ctx, chunk, digests, res)
	if err != nil || len(chunk) == 0 {
		return err
	}
	msgs := make([]queue.Message, len(chunk))
	for i, r := range chunk {
		// The queue key adds the row's generation, so a deliberate
		// republish is never deduplicated away; the provider's key is the
		// row's. The tenant is the message's group: a backend that serves
		// groups fairly keeps one tenant's messages from delaying another's.
		msgs[i] = queue.Message{Key: ledger.QueueKey(s.cfg.KeyPrefix, r.ID, r.DueAt, r.QueueGeneration), Body: bodies[i],
			Group: r.Tenant}
		// Queues count delays in whole seconds and round up; rounding down
		// here instead lets the message surface up to a second early, and
		// the worker waits out the rest (within its early tolerance), so the
		// send lands at the due time rather than up to a second late. A row
		// due beyond the longest delay surfaces early and the worker returns
		// it until it is due.
		wait := r.DueAt.Sub(now).Truncate(time.Second)
		// A row a worker handed back to the ledger surfaces at its
		// not-before, never before it: the worker waits out a due time,
		// not a not-before, so that delay rounds up.
		if nb := r.NotBefore.Sub(now); nb > wait {
			wait = (nb + time.Second - 1).Truncate(time.Second)
		}
		if wait > 0 {
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
	// accepted are the rows whose messages the queue took, unmarked those
	// of them the lease left leased (a requeue): the lease wrote the
	// others queued already (ledger.Leased.Queued).
	var accepted, unmarked, refused []int64
	var firstRefusal string
	for i, r := range results {
		// A digest's message stands for every member the chunk leased.
		rows := digests.rows(chunk[i].ID)
		if r.Err != nil {
			refused = append(refused, rows...)
			if firstRefusal == "" {
				firstRefusal = r.Err.Error()
			}
			continue
		}
		accepted = append(accepted, rows...)
		// A digest's members may have been leased apart from their lead:
		// the mark, which changes only leased rows, looks at them all.
		if !chunk[i].Queued || len(rows) > 1 {
			unmarked = append(unmarked, rows...)
		}
		res.Published += len(rows)
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
	if _, err := s.ledger.MarkQueued(mctx, unmarked, s.cfg.RequeueAfter); err != nil {
		return fmt.Errorf("mark %d rows queued: %w", len(unmarked), err)
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

// encodeChunk builds the message body of each row of chunk and returns
// the rows it could build with their bodies. A row whose message cannot be
// built (a tenant id the services refuse, written straight into the table)
// is settled failed with the reason and logged: one such row used to end
// every run, for every tenant. The settle outlives a cancelled run like the
// mark: the row is no use to anyone leased.
func (s *Sweeper) encodeChunk(ctx context.Context, chunk []ledger.Leased, digests folded, res *Result) ([]ledger.Leased, [][]byte, error) {
	keep, bodies := make([]ledger.Leased, 0, len(chunk)), make([][]byte, 0, len(chunk))
	for _, r := range chunk {
		key := ledger.IdempotencyKey(s.cfg.KeyPrefix, r.ID, r.DueAt)
		body, err := envelope.Encode(envelope.Envelope{Tenant: r.Tenant, ID: r.ID, DueAt: r.DueAt, Key: key,
			Digest: digests.digest[r.ID]})
		if err == nil {
			keep, bodies = append(keep, r), append(bodies, body)
			continue
		}
		reason := "cannot be published: " + err.Error()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, serr := s.ledger.SetAside(sctx, r.ID, reason)
		cancel()
		if serr != nil {
			return nil, nil, fmt.Errorf("set aside row %d (%s): %w", r.ID, reason, serr)
		}
		res.SetAside++
		s.log.Error().Int64("id", r.ID).Str("reason", reason).Msg("sweep: row set aside, settled failed")
	}
	return keep, bodies, nil
}
