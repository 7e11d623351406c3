package materialise

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// Nudge is a row the materialiser wrote that is still owed, with its item as
// it is now. It names no recipient.
type Nudge struct {
	ID     int64
	Tenant string
	// DueAt and ExpiresAt are where the row is headed: its own, or the
	// target of a move waiting on its send (Moving).
	DueAt, ExpiresAt time.Time
	// Cancelling says a cancel waits on the row's send: the row is going
	// whatever its item does. Moving says a move does.
	Cancelling, Moving bool
	// Item is the owed_items row of the same (tenant, recipient, kind,
	// ref_id); nil when it was deleted.
	Item *NudgeItem
}

// NudgeItem is what the reconciliation reads of a nudge's item.
type NudgeItem struct {
	ID       int64
	StartsAt time.Time
	// Lead is the item's own; nil takes the default.
	Lead *time.Duration
	// Cancelled says the application set the item's cancelled_at.
	Cancelled bool
}

// The reasons a nudge is cancelled, kept on the row as its last_error.
const (
	reasonDeleted   = "cancelled: its item was deleted"
	reasonCancelled = "cancelled: its item was cancelled"
	reasonStarted   = "cancelled: its item was moved to %s, which has already begun"
	reasonSecond    = "cancelled: its item has another nudge"
)

// plan decides what the nudges of one run need, from their items as they
// are now: per tenant, the rows to move or cancel, and the items whose
// nudge is held (kept or moved), which the run does not schedule again.
//
// An item deleted, cancelled or moved to a time already begun cancels its
// nudges. Otherwise the item keeps one nudge, due at starts_at − lead and
// expiring at starts_at. The one kept is a row already there, else the row
// already at that due time (so the move never lands on a key one of the
// item's own rows holds), else the oldest, and it moves there; any other is
// a second nudge for the item and is cancelled. A row already headed where
// it belongs, and a row whose cancel waits, need nothing: a second run over
// the same items plans no change.
func (m *Materialiser) plan(nudges []Nudge, now time.Time) (map[string][]ledger.MaterialisedChange, map[int64]bool) {
	changes := map[string][]ledger.MaterialisedChange{}
	held := map[int64]bool{}
	cancel := func(n Nudge, reason string) {
		changes[n.Tenant] = append(changes[n.Tenant], ledger.MaterialisedChange{ID: n.ID, Cancel: true, Reason: reason})
	}
	byItem := map[int64][]Nudge{}
	var order []int64
	for _, n := range nudges {
		switch {
		case n.Cancelling:
		case n.Item == nil:
			cancel(n, reasonDeleted)
		case n.Item.Cancelled:
			cancel(n, reasonCancelled)
		case !n.Item.StartsAt.After(now):
			cancel(n, fmt.Sprintf(reasonStarted, n.Item.StartsAt.UTC().Format(time.RFC3339)))
		default:
			if byItem[n.Item.ID] == nil {
				order = append(order, n.Item.ID)
			}
			byItem[n.Item.ID] = append(byItem[n.Item.ID], n)
		}
	}
	for _, id := range order {
		rows := byItem[id]
		it := rows[0].Item
		due, expires := m.due(it.StartsAt, it.Lead), it.StartsAt.UTC()
		rank := func(n Nudge) int {
			switch {
			case n.DueAt.Equal(due) && n.ExpiresAt.Equal(expires) && !n.Moving:
				return 0
			case n.DueAt.Equal(due) && n.ExpiresAt.Equal(expires):
				return 1
			case n.DueAt.Equal(due):
				return 2
			}
			return 3
		}
		// The rows come ordered by id, so a tie keeps the oldest.
		keep := 0
		for k, n := range rows {
			if rank(n) < rank(rows[keep]) {
				keep = k
			}
		}
		for k, n := range rows {
			switch {
			case k != keep:
				cancel(n, reasonSecond)
			case rank(n) > 1:
				changes[n.Tenant] = append(changes[n.Tenant],
					ledger.MaterialisedChange{ID: n.ID, DueAt: due, ExpiresAt: expires})
			}
		}
		held[id] = true
	}
	return changes, held
}

// reconcile moves and cancels the nudges whose items changed, in each
// tenant's own scope, counting into res. It returns the items whose nudge
// is held and the tenants whose changes failed: the run schedules neither,
// since a new row for an item whose old one could not move would be the
// second nudge reconciliation exists to prevent.
func (m *Materialiser) reconcile(ctx context.Context, nudges []Nudge, now time.Time, res *Result) (held map[int64]bool, failed map[string]bool, errs []error) {
	changes, held := m.plan(nudges, now)
	failed = map[string]bool{}
	for _, tenant := range sortedKeys(changes) {
		// Each batch is one ledger call, within its bounds.
		for chunk := range slices.Chunk(changes[tenant], ledger.MaxScheduleBatch) {
			out, err := m.ledger.ChangeMaterialised(ctx, tenant, chunk)
			if err != nil {
				failed[tenant] = true
				errs = append(errs, fmt.Errorf("materialise: tenant %q: reconcile %d rows: %w", tenant, len(chunk), err))
				continue
			}
			res.Rescheduled += int(out.Rescheduled)
			res.Cancelled += int(out.Cancelled)
			res.Intents += int(out.Intents)
		}
	}
	return held, failed, errs
}
