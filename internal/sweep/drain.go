package sweep

import (
	"context"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

// drain is one run's slices: the room left under the backpressure cap, the
// cursor of its pending slices, and its slowest slice, which says when the
// budget is near.
type drain struct {
	s       *Sweeper
	res     *Result
	start   time.Time
	room    int
	cursor  ledger.Cursor
	slowest time.Duration
	// held is set once a slice was held back: the run leases no more.
	held bool
	// uncounted is set while the run has not counted the work outstanding
	// (a notify run, which has no survey): room is then the whole cap, and
	// the first slice counts in the statement that leases.
	uncounted bool
}

// run leases slice after slice. The first slice of pending rows leaves room
// for the requeue slice, at most half of it, so neither kind starves the
// other when the cap is tight; the requeue slice comes next, then pending
// slices until none is full.
func (d *drain) run(ctx context.Context, sv ledger.Survey) error {
	keep := 0
	if sv.Requeues {
		keep = min(d.s.cfg.RequeueBatch, (d.room+1)/2)
	}
	more := sv.Pending
	var err error
	if more && d.room-keep > 0 {
		if more, err = d.slice(ctx, ledger.SlicePending, min(d.s.cfg.Batch, d.room-keep)); err != nil {
			return err
		}
	}
	if sv.Requeues {
		if _, err = d.slice(ctx, ledger.SliceRequeue, d.s.cfg.RequeueBatch); err != nil {
			return err
		}
	}
	for more {
		if more, err = d.slice(ctx, ledger.SlicePending, d.s.cfg.Batch); err != nil {
			return err
		}
	}
	return nil
}

// slice leases at most limit rows of kind, never more than the room, and
// publishes them. It reports whether it took all it asked for, so more may
// wait; a slice held back (by the cap or the budget) takes nothing and says
// why in the result.
func (d *drain) slice(ctx context.Context, kind ledger.Slice, limit int) (bool, error) {
	limit = min(limit, d.room)
	switch {
	case limit <= 0:
		return false, d.hold(ctx, HeldBackpressure)
	case time.Since(d.start)+2*d.slowest >= d.s.cfg.Budget:
		return false, d.hold(ctx, HeldBudget)
	}
	began := time.Now()
	p := ledger.LeaseParams{Limit: limit, Ahead: d.s.cfg.PublishAhead,
		For: d.s.cfg.Budget + leaseMargin, Slice: kind, After: d.cursor}
	var leased []ledger.Leased
	var err error
	if d.uncounted {
		var held int
		leased, held, err = d.s.ledger.LeaseDue(ctx, p, d.room)
		d.uncounted = false
		d.res.Outstanding, d.room = held, d.room-held
		limit = min(limit, max(d.room, 0))
	} else {
		leased, err = d.s.ledger.Lease(ctx, p)
	}
	if err != nil {
		return false, fmt.Errorf("lease owed rows: %w", err)
	}
	if len(leased) == 0 {
		if limit == 0 {
			// The count in the lease found the cap reached.
			return false, d.hold(ctx, HeldBackpressure)
		}
		return false, nil
	}
	d.res.Slices++
	d.res.Leased += len(leased)
	d.room -= len(leased)
	if kind == ledger.SliceRequeue {
		d.res.Requeued += len(leased)
	} else {
		last := leased[len(leased)-1]
		d.cursor = ledger.Cursor{DueAt: last.DueAt, ID: last.ID}
	}
	if err := d.s.publishSlice(ctx, leased, d.start, d.res); err != nil {
		return false, err
	}
	d.slowest = max(d.slowest, time.Since(began))
	return len(leased) == limit, nil
}

// hold ends the run's slices for reason, which the result reports only when
// a row is still leasable: the last slice may have taken the last one.
func (d *drain) hold(ctx context.Context, reason string) error {
	if d.held {
		return nil
	}
	d.held = true
	left, err := d.s.ledger.Leasable(ctx, d.s.cfg.PublishAhead)
	if err != nil {
		return fmt.Errorf("check for leasable rows: %w", err)
	}
	if left {
		d.res.HeldBack = reason
	}
	return nil
}

// publishSlice publishes a slice chunk by chunk. When a chunk fails, or the
// budget ran out, it hands back what was not published so the next run
// takes it at once. A context that ran out still gets its release: it uses
// a fresh, short deadline.
func (s *Sweeper) publishSlice(ctx context.Context, leased []ledger.Leased, start time.Time, res *Result) error {
	for i := 0; i < len(leased); i += publishChunk {
		var err error
		if time.Since(start) >= s.cfg.Budget {
			err = errBudget
		} else {
			err = s.publish(ctx, leased[i:min(i+publishChunk, len(leased))], res)
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

// publish sends one chunk and marks the accepted rows queued. A row whose
// message cannot be built is set aside first, and the rest go out.
func (s *Sweeper) publish(ctx context.Context, chunk []ledger.Leased, res *Result) error {
	now := s.clock.Now()
	chunk, bodies, err := s.encodeChunk(ctx, chunk, res)
	if err != nil || len(chunk) == 0 {
		return err
	}
	msgs := make([]queue.Message, len(chunk))
	for i, r := range chunk {
		// The queue key adds the row's generation, so a deliberate
		// republish is never deduplicated away; the provider's key is the row's.
		msgs[i] = queue.Message{Key: ledger.QueueKey(s.cfg.KeyPrefix, r.ID, r.DueAt, r.QueueGeneration), Body: bodies[i]}
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

// encodeChunk builds the message body of each row of chunk and returns
// the rows it could build with their bodies. A row whose message cannot be
// built (a tenant id the services refuse, written straight into the table)
// is settled failed with the reason and logged: one such row used to end
// every run, for every tenant. The settle outlives a cancelled run like the
// mark: the row is no use to anyone leased.
func (s *Sweeper) encodeChunk(ctx context.Context, chunk []ledger.Leased, res *Result) ([]ledger.Leased, [][]byte, error) {
	keep, bodies := make([]ledger.Leased, 0, len(chunk)), make([][]byte, 0, len(chunk))
	for _, r := range chunk {
		key := ledger.IdempotencyKey(s.cfg.KeyPrefix, r.ID, r.DueAt)
		body, err := envelope.Encode(envelope.Envelope{Tenant: r.Tenant, ID: r.ID, DueAt: r.DueAt, Key: key})
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
