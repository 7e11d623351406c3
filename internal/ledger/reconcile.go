package ledger

import (
	"context"
	"encoding/json"
	"time"

	"github.com/lib/pq"
)

// The materialiser's entry points (internal/materialise): the rows it
// writes follow their owed_items row (owed_notifications.materialised,
// internal/materialise/sql/items.sql). Cancel and
// Reschedule change every row of a subject, every recipient's and rows
// scheduled through the API alike, and a reschedule shifts the expiry by as
// much as the due time moves; an item is one recipient's, and its nudge
// expires when it starts whatever its lead. So these name rows by id, touch
// only rows marked materialised, and take the due time and expiry each row
// is to have. A row a live worker is sending is left to its send, as Cancel
// and Reschedule leave it: the change is recorded on it as an intent, which
// the trigger owed_apply_intent (sql/intents.sql) applies when the send
// ends.

// MaterialisedChange is the materialiser's change to one row it wrote.
type MaterialisedChange struct {
	ID int64 `json:"id"`
	// Cancel settles the row cancelled, with Reason as its last_error;
	// otherwise the row moves to DueAt and ExpiresAt.
	Cancel    bool      `json:"cancel"`
	Reason    string    `json:"reason,omitempty"`
	DueAt     time.Time `json:"due_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// MaterialisedChanges reports what ChangeMaterialised did.
type MaterialisedChanges struct {
	// Rescheduled counts rows moved, and rows in flight that took the move
	// as an intent.
	Rescheduled int64 `json:"rescheduled"`
	// Cancelled counts rows cancelled, rows in flight that took the cancel
	// as an intent, and rows cancelled because their recipient already had
	// a row at the due time they were to move to: that row is the nudge at
	// the new time.
	Cancelled int64 `json:"cancelled"`
	// Intents counts the rows in flight among them.
	Intents int64 `json:"intents"`
}

// The statements of ChangeMaterialised, in the order it runs them; what
// each changes, and which rows it never does, is in sql/queries.sql.
var (
	qLockMaterialised         = queries.Get("LockMaterialised")
	qCancelMaterialised       = queries.Get("CancelMaterialised")
	qCancelOntoTaken          = queries.Get("CancelOntoTaken")
	qMoveMaterialised         = queries.Get("MoveMaterialised")
	qRecordMaterialisedCancel = queries.Get("RecordMaterialisedCancel")
	qRecordMaterialisedMove   = queries.Get("RecordMaterialisedMove")
	qMarkMaterialised         = queries.Get("MarkMaterialised")
)

// ChangeMaterialised applies changes to tenant's rows in one transaction:
// open rows are cancelled or moved at once, rows a live worker is sending
// take the change as an intent. A row that is not the materialiser's, is
// settled or is another tenant's is left alone, and so is a row that
// already carries the change, so applying the same changes twice changes
// nothing the second time. At most MaxScheduleBatch changes per call.
func (l *Scheduling) ChangeMaterialised(ctx context.Context, tenant string, changes []MaterialisedChange) (MaterialisedChanges, error) {
	var res MaterialisedChanges
	if err := ValidateTenant(tenant); err != nil {
		return res, err
	}
	if len(changes) == 0 {
		return res, nil
	}
	if len(changes) > MaxScheduleBatch {
		v := &ValidationError{}
		v.add(-1, "changes", "%d rows exceeds the batch limit of %d", len(changes), MaxScheduleBatch)
		return res, v
	}
	in := make([]MaterialisedChange, len(changes))
	for i, c := range changes {
		v := &ValidationError{}
		if !c.Cancel {
			checkTime(v, i, "due_at", c.DueAt)
			checkTime(v, i, "expires_at", c.ExpiresAt)
			if !c.ExpiresAt.After(c.DueAt) {
				v.add(i, "expires_at", "must be after due_at")
			}
		}
		if err := v.orNil(); err != nil {
			return res, err
		}
		c.DueAt, c.ExpiresAt = c.DueAt.UTC().Truncate(time.Microsecond), c.ExpiresAt.UTC().Truncate(time.Microsecond)
		in[i] = c
	}
	doc, err := json.Marshal(in)
	if err != nil {
		return res, err
	}
	err = l.withTenant(ctx, tenant, func(tx *txn) error {
		var locked int64
		if err := tx.QueryRow(qLockMaterialised, tenant, string(doc)).Scan(&locked); err != nil {
			return err
		}
		for _, c := range []struct {
			query    string
			into     *int64
			inFlight bool
		}{
			{qCancelMaterialised, &res.Cancelled, false},
			{qCancelOntoTaken, &res.Cancelled, false},
			{qMoveMaterialised, &res.Rescheduled, false},
			{qRecordMaterialisedCancel, &res.Cancelled, true},
			{qRecordMaterialisedMove, &res.Rescheduled, true},
		} {
			r, err := tx.Exec(c.query, tenant, l.now(), string(doc))
			if err != nil {
				return err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return err
			}
			*c.into += n
			if c.inFlight {
				res.Intents += n
			}
		}
		// A moved nudge, or a move recorded on one in flight, takes the
		// quiet hours in force at its new time, as a reschedule does.
		for _, c := range in {
			if c.Cancel {
				continue
			}
			if _, err := l.rehold(tx, tenant, c.ID, "", ""); err != nil {
				return err
			}
			if _, _, err := l.reholdIntents(tx, tenant, c.ID, "", ""); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return MaterialisedChanges{}, err
	}
	return res, nil
}

// ScheduleMaterialised is Schedule for the materialiser: it schedules
// tenant's rows for its items and marks every row it answers for, created or
// found, as the materialiser's, in one transaction. Marked rows follow their
// items (ChangeMaterialised); an unmarked nudge would not, so a mark that
// failed after its rows were committed left a nudge the reconciliation never
// sees (a moved item got two, a deleted one still got its own). Now the
// rows and their mark commit together or not at all. A row already marked,
// or settled, is left alone.
func (l *Scheduling) ScheduleMaterialised(ctx context.Context, tenant string, rows []NewNotification) ([]Scheduled, error) {
	return l.schedule(ctx, tenant, rows, func(tx *txn, out []Scheduled) error {
		ids := make([]int64, len(out))
		for i, s := range out {
			ids[i] = s.ID
		}
		_, err := tx.Exec(qMarkMaterialised, tenant, pq.Array(ids))
		return err
	})
}
