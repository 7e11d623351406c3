package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/queue"
)

// digestSend is the rest of a digest riding on a delivery: the delivery's
// own row and claim are the digest's lead (the member its message named,
// or the first one claimed), and members are the others the claim took.
// Every step of the delivery runs once, for the lead, and every write
// after it is made for the members too: the heartbeat and the check before
// the send extend their claims in one statement, an accepted send settles
// them in the same ledger commit as the lead (flushSettles), and any other
// outcome is written for each member after the lead's (follow). A member
// whose claim is lost or revoked before the send (a cancel, a reschedule,
// an update) leaves the digest and is not listed; its row is the ledger's
// again.
type digestSend struct {
	id int64

	mu      sync.Mutex
	members []ledger.Claim
}

// holds is the members' claims still in the digest.
func (d *digestSend) holds() []ledger.Hold {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ledger.Hold, len(d.members))
	for i, m := range d.members {
		out[i] = m.Hold
	}
	return out
}

// drop takes the members whose claim answered an error out of the digest.
func (d *digestSend) drop(holds []ledger.Hold, errs []error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.members = slices.DeleteFunc(d.members, func(m ledger.Claim) bool {
		i := slices.IndexFunc(holds, func(h ledger.Hold) bool { return h == m.Hold })
		return i >= 0 && errs[i] != nil
	})
}

// held says a digest still has members whose claims the worker holds; false
// for a row sent alone (d nil).
func (d *digestSend) held() bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.members) > 0
}

// rows is the members' rows still in the digest.
func (d *digestSend) rows() []ledger.Notification {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ledger.Notification, len(d.members))
	for i, m := range d.members {
		out[i] = m.Row
	}
	return out
}

// claimDigest claims every owed member of the digest a message stands for
// (ledger.ClaimDigest: one statement) and answers the delivery of its
// lead, as claim answers one row's. It returns false when the message
// needs no send and has been acked, returned or dead-lettered.
func (e *executor) claimDigest(ctx context.Context, msg queue.Delivery, env envelope.Envelope, log zerolog.Logger) (*delivery, bool) {
	m := e.metrics
	log = log.With().Int64("digest", env.Digest).Logger()
	asked, reading := e.clock.Now(), clock.Read(e.clock)
	cctx, cancel := detach(ctx)
	claims, err := e.ledger.ClaimDigest(cctx, env.Tenant, env.Digest, env.DueAt, ledger.ClaimParams{
		LeaseFor: e.leaseFor(), EarlyTolerance: e.earlyTolerance, Revocable: true,
	})
	cancel()
	var invalid *ledger.ValidationError
	switch {
	case errors.As(err, &invalid):
		e.completer.deadLetter(ctx, msg, "the ledger refuses the message: "+invalid.Error(), "invalid")
		m.outcome("poison")
		return nil, false
	case err != nil:
		log.Warn().Err(err).Msg("digest claim failed; message returns later")
		e.completer.returnAfter(ctx, msg, jitter(unavailableRetry), "ledger unavailable")
		m.outcome("retried")
		return nil, false
	}
	var taken []ledger.Claim
	var held, early time.Duration
	for _, c := range claims {
		switch c.Outcome {
		case ledger.ClaimSend:
			taken = append(taken, c)
		case ledger.ClaimHeld:
			held = max(held, c.Wait)
		case ledger.ClaimEarly:
			early = max(early, c.Wait)
		}
	}
	if len(taken) == 0 {
		switch {
		case held > 0:
			// Another worker holds members of the digest (a second message
			// of it): look again when their lease ends.
			m.outcome("held")
			e.completer.returnAfter(ctx, msg, max(held, time.Second), "held by another worker")
		case early > 0:
			m.outcome("early")
			e.completer.returnAfter(ctx, msg, early, "not due yet")
		default:
			// Every member is settled, cancelled or moved: a copy of a
			// digest already sent, or one that lost all its members.
			m.outcome("absorbed_duplicate")
			e.completer.ack(msg.Receipt)
		}
		return nil, false
	}
	// The lead is the member the message named when the claim took it.
	lead := max(0, slices.IndexFunc(taken, func(c ledger.Claim) bool { return c.Row.ID == env.ID }))
	c := taken[lead]
	d := &digestSend{id: env.Digest, members: slices.Delete(slices.Clone(taken), lead, lead+1)}
	maybe := false
	for _, t := range taken {
		maybe = maybe || t.PossibleDuplicate
	}
	// The message names the digest, not one row: the key the worker checks
	// it against (prepare) is the lead's, and the send carries the
	// digest's (digestRequest).
	env.ID, env.Key = c.Row.ID, ledger.IdempotencyKey(e.keyPrefix, c.Row.ID, c.Row.DueAt)
	// A digest is never sent after any member's expiry: the lead carries
	// the earliest, so the checks before the send and a retry's hold the
	// whole digest to it, and a digest that misses it expires whole
	// (docs/api.md, "Digests").
	row := c.Row
	for _, t := range taken {
		if exp := t.Row.ExpiresAt; exp != nil && (row.ExpiresAt == nil || exp.Before(*row.ExpiresAt)) {
			row.ExpiresAt = exp
		}
	}
	dl := &delivery{msg: msg, env: env, row: row, hold: c.Hold, asked: asked, claimedAt: c.Now, reading: reading,
		dueIn: c.Wait, possibleDuplicate: maybe, mark: c.Undeliverable, digest: d,
		log: log.With().Int64("id", c.Row.ID).Int("members", len(taken)).Logger()}
	dl.lease = e.holdClaim(dl, reading)
	return dl, true
}

// extendMembers extends the claims of dl's digest members as the lead's
// was (start: the check before the send, else the heartbeat) in one
// statement, and takes a member whose claim is lost, revoked or could not
// be confirmed out of the digest: an unconfirmed claim is never sent on.
func (e *executor) extendMembers(dl *delivery, start bool) {
	if dl.digest == nil {
		return
	}
	holds := dl.digest.holds()
	if len(holds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	var errs []error
	var err error
	if start {
		errs, err = e.ledger.StartSends(ctx, holds, e.leaseFor(), e.sendKeep())
	} else {
		errs, err = e.ledger.ExtendClaims(ctx, holds, e.leaseFor())
	}
	if err != nil {
		if !start {
			// The heartbeat tries again at the next beat.
			dl.log.Warn().Err(err).Msg("could not extend the digest members' claims")
			return
		}
		errs = fill(len(holds), err)
	}
	if errs != nil {
		dl.digest.drop(holds, errs)
	}
}

// take removes the first member still in the digest and returns it.
func (d *digestSend) take() (ledger.Claim, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.members) == 0 {
		return ledger.Claim{}, false
	}
	c := d.members[0]
	d.members = d.members[1:]
	return c, true
}

// promote makes the first member still held the digest's lead when the
// check before the send found the lead's claim revoked (the lead was
// cancelled, rescheduled or updated since the claim): the digest goes out
// without it, rather than its members waiting for their leases to run out.
// It reports whether a member took over; the members' claims are checked
// first (extendMembers), so the new lead's is confirmed for the send. The
// lead's earliest expiry of the digest stays. The heartbeat, which kept
// the members' claims meanwhile, keeps the new lead's from its next beat.
func (cl *claimLease) promote() bool {
	dl := cl.dl
	if dl.digest == nil {
		return false
	}
	asked := clock.Read(cl.e.clock)
	cl.e.extendMembers(dl, true)
	next, ok := dl.digest.take()
	if !ok {
		return false
	}
	next.Row.ExpiresAt = dl.row.ExpiresAt
	cl.mu.Lock()
	// The check granted the member sendKeep from the ledger's now, which
	// came after asked; the lead's own grants say nothing of it.
	dl.row, dl.hold, cl.lost, cl.until = next.Row, next.Hold, false, asked.Add(cl.e.sendKeep())
	cl.mu.Unlock()
	dl.log.Info().Int64("lead", next.Row.ID).Msg("the digest's lead left it before the send; the next member leads")
	return true
}

// digestRequest makes dl's request the digest's, once the check before the
// send has settled who is in it: one message listing the lead and every
// member still held (payload.Digest), under a key derived from their ids
// (ledger.DigestKey). A digest left with its lead alone is sent as that
// row, under the row's own key.
func (e *executor) digestRequest(dl *delivery) {
	if dl.digest == nil {
		return
	}
	// The lead may have changed since prepare (promote).
	dl.request.NotificationID = dl.row.ID
	rows := append([]ledger.Notification{dl.row}, dl.digest.rows()...)
	if len(rows) == 1 {
		// Sent as that row, with its own content and key, whichever
		// member it is.
		if content, err := payload.Parse(dl.row.Channel, dl.row.Payload); err == nil {
			dl.request.Content = content
		}
		dl.request.IdempotencyKey = ledger.IdempotencyKey(e.keyPrefix, dl.row.ID, dl.row.DueAt)
		return
	}
	slices.SortFunc(rows, func(a, b ledger.Notification) int { return int(a.ID - b.ID) })
	items := make([]payload.DigestItem, 0, len(rows))
	ids := make([]int64, 0, len(rows))
	for _, r := range rows {
		content, err := payload.Parse(r.Channel, r.Payload)
		if err != nil {
			// Checked when it was scheduled; listed without content
			// rather than holding the digest back.
			dl.log.Warn().Err(err).Int64("member", r.ID).Msg("digest member's payload is unreadable")
		}
		items = append(items, payload.DigestItem{ID: r.ID, Kind: r.Kind, RefID: r.RefID, Content: content})
		ids = append(ids, r.ID)
	}
	dl.request.Content = payload.Digest(dl.row.Channel, dl.digest.id, items)
	dl.request.IdempotencyKey = ledger.DigestKey(e.keyPrefix, dl.digest.id, ids)
	dl.log.Info().Int("members", len(rows)).Str("key", dl.request.IdempotencyKey).Msg("sending digest")
}

// follow writes, for every member of dl's digest, the outcome write just
// made for the lead (the same ledger call under the member's own claim),
// so the digest ends as one: skipped, expired, failed, released or handed
// back together. A member whose write fails is left to its lease: it runs
// out and the row is owed again.
func (c *completer) follow(ctx context.Context, dl *delivery, write func(context.Context, ledger.Hold) error) {
	if dl.digest == nil {
		return
	}
	for _, h := range dl.digest.holds() {
		if err := write(ctx, h); err != nil {
			dl.log.Warn().Err(err).Int64("member", h.ID).Msg("could not write the digest's outcome for a member; it is owed again once its lease runs out")
		}
	}
}

// settleRows is the rows an accepted send settles: the lead's, then, for
// a digest, each member's, under the same attempt (its provider message
// id). lead[i] is batch[i]'s place among them.
func settleRows(batch []settle) (rows []ledger.Delivered, lead []int) {
	lead = make([]int, len(batch))
	for i, s := range batch {
		lead[i] = len(rows)
		rows = append(rows, s.d)
		if s.dl.digest == nil {
			continue
		}
		for _, h := range s.dl.digest.holds() {
			rows = append(rows, ledger.Delivered{Hold: h, Attempt: s.d.Attempt})
		}
	}
	return rows, lead
}

// settledMembers logs the members of an accepted digest the ledger could
// not settle with it (errs: the batch's answers, from first).
func settledMembers(s settle, errs []error, first int) {
	if s.dl.digest == nil || errs == nil {
		return
	}
	for k, h := range s.dl.digest.holds() {
		if err := errs[first+1+k]; err != nil {
			s.dl.log.Warn().Err(err).Int64("member", h.ID).Msg("digest member not settled with the digest")
		}
	}
}
