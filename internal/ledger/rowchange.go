package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/lib/pq"
)

// An operator's change of one row, from the console's notification page:
// cancel it, move it to another due time, or send it now. Cancel and
// Reschedule (schedule.go) change every row of a subject, the API's unit;
// these change the one row an operator is looking at. A settled row is
// never changed, and neither is a row a live worker is sending: its send's
// outcome is the truth, and the operator looks again once it settles.

var (
	qLockRow   = queries.Get("LockRow")
	qCancelRow = queries.Get("CancelRow")
	qMoveRow   = queries.Get("MoveRow")
)

// RowRefused is a change the row's state does not allow, with the reason
// an operator reads.
type RowRefused struct {
	ID     int64
	State  State
	Reason string
}

func (e *RowRefused) Error() string { return fmt.Sprintf("notification %d: %s", e.ID, e.Reason) }

// RowChange is what a change of one row did.
type RowChange struct {
	ID     int64  `json:"id"`
	Tenant string `json:"tenant_id"`
	// Was is the row's state before the change, State after it.
	Was   State     `json:"was"`
	State State     `json:"state"`
	DueAt time.Time `json:"due_at"`
	// ExpiresAt is the row's expiry after the change, nil for none.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// lockedRow is what LockRow reads.
type lockedRow struct {
	state     State
	due       time.Time
	expires   *time.Time
	settledAt *time.Time
	inFlight  bool
	now       time.Time
}

// CancelRowReason is the last error a cancelled row keeps.
const CancelRowReason = "cancelled by an operator"

// CancelRow settles tenant's row id cancelled.
func (l *Actions) CancelRow(ctx context.Context, tenant string, id int64) (RowChange, error) {
	return l.changeRow(ctx, tenant, id, func(tx *txn, r lockedRow, c *RowChange) error {
		c.State = StateCancelled
		_, err := tx.Exec(qCancelRow, id, l.now(), CancelRowReason)
		return err
	})
}

// RescheduleRow moves tenant's row id to newDue, its expiry by as much (the
// window it is worth sending in keeps its length), as Reschedule moves a
// subject's rows. A due time its recipient already has a row at for the
// same kind and ref is ErrConflict.
func (l *Actions) RescheduleRow(ctx context.Context, tenant string, id int64, newDue time.Time) (RowChange, error) {
	if !InRange(newDue) {
		return RowChange{}, fmt.Errorf("due_at %s is outside the years 1 to 9999", newDue.Format(time.RFC3339))
	}
	due := newDue.UTC().Truncate(time.Microsecond)
	return l.changeRow(ctx, tenant, id, func(tx *txn, r lockedRow, c *RowChange) error {
		var exp *time.Time
		if r.expires != nil {
			window := r.expires.Sub(r.due)
			moved := due.Add(window)
			// A window too long for a time.Duration saturates: such an
			// expiry has no room to move.
			if moved.After(MaxTime) || window == math.MaxInt64 {
				return &RowRefused{ID: id, State: r.state, Reason: fmt.Sprintf("a due time of %s moves the expiry "+
					"past %s, the last instant the ledger holds: choose an earlier one", due.Format(time.RFC3339), MaxTime.Format(time.RFC3339))}
			}
			exp = &moved
		}
		return moveRow(tx, l, id, due, exp, c)
	})
}

// SendNowRow moves tenant's row id, due later, to now: the owed_due
// wake-up has the sweeper publish it at once. Its expiry stays: a row that
// is already past it is never sent, and a row already due is the sweep's
// to send (if it waits, a pause or the backlog holds it).
func (l *Actions) SendNowRow(ctx context.Context, tenant string, id int64) (RowChange, error) {
	return l.changeRow(ctx, tenant, id, func(tx *txn, r lockedRow, c *RowChange) error {
		switch {
		case r.expires != nil && !r.expires.After(r.now):
			return &RowRefused{ID: id, State: r.state, Reason: "it expired at " + r.expires.Format(time.RFC3339) +
				": a notification is never sent past its expiry"}
		case !r.due.After(r.now):
			return &RowRefused{ID: id, State: r.state, Reason: "it is due already (since " + r.due.Format(time.RFC3339) +
				"): the sweep sends it; if it waits, look at the pauses and the backlog"}
		}
		return moveRow(tx, l, id, r.now, r.expires, c)
	})
}

func moveRow(tx *txn, l *Actions, id int64, due time.Time, exp *time.Time, c *RowChange) error {
	var e sql.NullTime
	if exp != nil {
		e = sql.NullTime{Time: exp.UTC(), Valid: true}
	}
	_, err := tx.Exec(qMoveRow, id, l.now(), due.UTC(), e)
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23505" {
		return ErrConflict
	}
	c.State, c.DueAt, c.ExpiresAt = StatePending, due.UTC(), exp
	return err
}

// changeRow locks tenant's row id, refuses a settled one or one a live
// worker is sending, and runs change on it, in one transaction.
func (l *Actions) changeRow(ctx context.Context, tenant string, id int64,
	change func(*txn, lockedRow, *RowChange) error) (RowChange, error) {
	if err := ValidateTenant(tenant); err != nil {
		return RowChange{}, err
	}
	c := RowChange{ID: id, Tenant: tenant}
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		var r lockedRow
		var exp, settled sql.NullTime
		err := tx.QueryRow(qLockRow, id, l.now()).Scan(&r.state, &r.due, &exp, &settled, &r.inFlight, &r.now)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		r.due, r.now, r.expires, r.settledAt = r.due.UTC(), r.now.UTC(), timePtr(exp), timePtr(settled)
		c.Was, c.State, c.DueAt, c.ExpiresAt = r.state, r.state, r.due, r.expires
		switch {
		case r.settledAt != nil:
			return &RowRefused{ID: id, State: r.state, Reason: fmt.Sprintf("it is %s (settled at %s): a settled row is never changed",
				r.state, r.settledAt.Format(time.RFC3339))}
		case r.inFlight:
			return &RowRefused{ID: id, State: r.state, Reason: "a worker is sending it right now: the send's outcome decides; look again once it settles"}
		}
		return change(tx, r, &c)
	})
	if err != nil {
		return RowChange{}, err
	}
	return c, nil
}
