package ledger

import (
	"context"
	"encoding/json"
	"time"

	"github.com/lib/pq"
)

// The materialiser's entry points (internal/materialise): the rows it
// writes follow their owed_items row (migrations/00026). Cancel and
// Reschedule change every row of a subject, every recipient's and rows
// scheduled through the API alike, and a reschedule shifts the expiry by as
// much as the due time moves; an item is one recipient's, and its nudge
// expires when it starts whatever its lead. So these name rows by id, touch
// only rows marked materialised, and take the due time and expiry each row
// is to have. A row a live worker is sending is left to its send, as Cancel
// and Reschedule leave it: the change is recorded on it as an intent, which
// the trigger owed_apply_intent (migrations/00013) applies when the send
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

// The statements of ChangeMaterialised, in the order it runs them. $1 is
// the tenant, $2 now, $3 the changes as a JSON array. A row changes only
// while it is marked materialised and unsettled, so a row that settled
// since the materialiser read it (delivered above all) is never changed.
const (
	materialisedInput = `
  FROM jsonb_to_recordset($3::jsonb) AS i(id bigint, cancel boolean, reason text,
                                          due_at timestamptz, expires_at timestamptz)
 WHERE n.id = i.id AND n.tenant_id = $1 AND n.materialised AND n.settled_at IS NULL`

	// materialisedOpen is an open row, as subjectOpenRows says: one no
	// live worker is sending, a row whose claim is still revocable
	// included.
	materialisedOpen = materialisedInput + `
   AND (n.state <> 'sending' OR n.lease_until <= coalesce($2::timestamptz, now()) OR n.claim_revocable)`

	// materialisedInFlight is a row a live worker is sending.
	materialisedInFlight = materialisedInput + `
   AND n.state = 'sending' AND n.lease_until > coalesce($2::timestamptz, now()) AND NOT n.claim_revocable`

	// cancelWaits is a cancel still waiting on the row's send.
	cancelWaits = `(n.intent IS NOT DISTINCT FROM 'cancel' AND n.intent_outcome IS NULL)`

	// takenKey is a row other than n holding the schedule key n is to move
	// to, which the move would violate.
	takenKey = `EXISTS (SELECT 1 FROM owed_notifications o
                WHERE o.tenant_id = n.tenant_id AND o.recipient = n.recipient AND o.kind = n.kind
                  AND o.ref_id = n.ref_id AND o.due_at = i.due_at AND o.id <> n.id)`

	// qLockMaterialised ($1 the tenant, $2 the changes) locks every row
	// the changes name first, in id order, as every multi-row update a
	// worker may race does (see qMarkQueued), so no release or settle slips
	// between the statements below.
	qLockMaterialised = `
SELECT count(*) FROM (SELECT n.id FROM owed_notifications n, jsonb_to_recordset($2::jsonb) AS i(id bigint)
                       WHERE n.id = i.id AND n.tenant_id = $1 AND n.materialised AND n.settled_at IS NULL
                       ORDER BY n.id FOR UPDATE OF n) l`

	// qCancelMaterialised settles open rows cancelled, as qCancel does.
	qCancelMaterialised = `
UPDATE owed_notifications n
   SET state = 'cancelled', settled_at = coalesce($2::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($2::timestamptz, now()), last_error = coalesce(i.reason, 'cancelled')` +
		materialisedOpen + ` AND i.cancel`

	// qCancelOntoTaken cancels an open row whose recipient already has a
	// row at the due time it is to move to: that row is the nudge at the
	// new time, as owed_apply_intent decides for a move in flight.
	qCancelOntoTaken = `
UPDATE owed_notifications n
   SET state = 'cancelled', settled_at = coalesce($2::timestamptz, now()), lease_until = NULL,
       updated_at = coalesce($2::timestamptz, now()),
       last_error = 'rescheduled onto a row already scheduled at that due time'` +
		materialisedOpen + ` AND NOT i.cancel AND ` + takenKey

	// qMoveMaterialised moves open rows as qReschedule does (a new due time
	// is a new idempotency key; pending, never published under it, a new
	// queue generation, claimed_at kept as the possible-duplicate mark), to
	// the expiry named rather than a shifted one. A row already there is
	// left as it is.
	qMoveMaterialised = `
UPDATE owed_notifications n
   SET due_at = i.due_at, expires_at = i.expires_at,
       state = 'pending', lease_until = NULL, published_at = NULL,
       queue_generation = n.queue_generation + 1,
       updated_at = coalesce($2::timestamptz, now())` +
		materialisedOpen + ` AND NOT i.cancel AND NOT ` + takenKey + `
   AND (n.due_at <> i.due_at OR n.expires_at IS DISTINCT FROM i.expires_at)`

	// qRecordMaterialisedCancel records a cancel on rows in flight, as
	// qRecordCancel does, replacing a reschedule still waiting; a row whose
	// cancel already waits is left alone, so a second run changes nothing.
	qRecordMaterialisedCancel = `
UPDATE owed_notifications n
   SET intent = 'cancel', intent_due_at = NULL, intent_expires_at = NULL,
       intent_at = coalesce($2::timestamptz, now()), intent_outcome = NULL,
       updated_at = coalesce($2::timestamptz, now())` +
		materialisedInFlight + ` AND i.cancel AND NOT ` + cancelWaits

	// qRecordMaterialisedMove records a move on rows in flight, as
	// qRecordReschedule does, except on a row whose cancel waits (it came
	// first and wins) or whose same move waits already. A clash with a row
	// at the new due time is left to owed_apply_intent, which cancels the
	// row in flight in favour of that row when the send is handed back.
	qRecordMaterialisedMove = `
UPDATE owed_notifications n
   SET intent = 'reschedule', intent_due_at = i.due_at, intent_expires_at = i.expires_at,
       intent_at = coalesce($2::timestamptz, now()), intent_outcome = NULL,
       updated_at = coalesce($2::timestamptz, now())` +
		materialisedInFlight + ` AND NOT i.cancel AND NOT ` + cancelWaits + `
   AND NOT (n.intent IS NOT DISTINCT FROM 'reschedule' AND n.intent_outcome IS NULL
            AND n.intent_due_at = i.due_at AND n.intent_expires_at IS NOT DISTINCT FROM i.expires_at)`

	// qMarkMaterialised marks the unsettled rows of $2 (ids) as the
	// materialiser's, so they follow their items from now on.
	qMarkMaterialised = `
UPDATE owed_notifications SET materialised = true
 WHERE tenant_id = $1 AND id = ANY($2) AND settled_at IS NULL AND NOT materialised`
)

// ChangeMaterialised applies changes to tenant's rows in one transaction:
// open rows are cancelled or moved at once, rows a live worker is sending
// take the change as an intent. A row that is not the materialiser's, is
// settled or is another tenant's is left alone, and so is a row that
// already carries the change, so applying the same changes twice changes
// nothing the second time. At most MaxScheduleBatch changes per call.
func (l *Ledger) ChangeMaterialised(ctx context.Context, tenant string, changes []MaterialisedChange) (MaterialisedChanges, error) {
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
func (l *Ledger) ScheduleMaterialised(ctx context.Context, tenant string, rows []NewNotification) ([]Scheduled, error) {
	return l.schedule(ctx, tenant, rows, func(tx *txn, out []Scheduled) error {
		ids := make([]int64, len(out))
		for i, s := range out {
			ids[i] = s.ID
		}
		_, err := tx.Exec(qMarkMaterialised, tenant, pq.Array(ids))
		return err
	})
}
