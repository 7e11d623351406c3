package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/tenant"
)

// Redriven reports what Redrive did with one row, in input order.
type Redriven struct {
	ID int64 `json:"id"`
	// Tenant is the row's tenant ("" when it was not found).
	Tenant string `json:"tenant_id,omitempty"`
	// Reopened is true when the row was failed and is pending again under a
	// new queue generation: the next sweep publishes a fresh message for it.
	Reopened bool `json:"reopened"`
	// State is the row's state after the call ("" when it was not found).
	State State `json:"state,omitempty"`
	// QueueGeneration is the row's queue generation after the call.
	QueueGeneration int `json:"queue_generation"`
	// Reason says why a row was not reopened; empty when it was.
	Reason string `json:"reason,omitempty"`
	// Permanent is set when the row's last attempt failed permanently (the
	// provider refused this message or this recipient): such a row is
	// reopened only when forced, since sent again unchanged it fails the
	// same way.
	Permanent bool `json:"permanent,omitempty"`
}

// ErrPermanentNeedsForce begins the Reason of a row a redrive kept because
// its last attempt failed permanently; the console and owedctl show it.
const ErrPermanentNeedsForce = "failed permanently"

// Redrive reopens tenant's failed rows among ids: an operator's decision to
// try them again, and the only way a failed row is ever sent again (the
// worker's claim refuses every settled row, so a dead-lettered message that
// is redriven, or any stray copy, is acked and dropped). Each reopened row
// goes back to pending, unsettled, with its queue generation moved on and
// last_error saying it was redriven after what; the next sweep leases it
// and publishes a new message under a new queue key, while every send keeps
// the row's provider idempotency key.
//
// attempts is kept, not reset: it counts the sends tried and numbers the
// attempt history, which a compliance question reads. Since the worker
// fails a row once attempts reach OWED_MAX_ATTEMPTS, a row that failed for
// exhausted attempts gets one more send per redrive, and a row that failed
// on a permanent error what was left of its budget: a redrive never starts
// an unattended series of retries. A mark that the next send may duplicate
// an earlier one is kept (see qRedrive).
//
// A row whose last attempt failed permanently (a recipient that bounced,
// a message the provider refused) is kept failed, with a Reason saying so:
// sent again unchanged it fails the same way in the same second. Only an
// operator's forced redrive (RedriveAny with force) reopens it, once the
// cause is fixed.
//
// A row that is not failed (delivered, pending, cancelled…), or failed but
// past its expiry, is left exactly as it was and reported with
// Reopened=false and the Reason; an id not visible in tenant's scope is
// reported with Reason "not found". Redriving a row twice reopens it once.
func (l *Actions) Redrive(ctx context.Context, tenant string, ids ...int64) ([]Redriven, error) {
	return l.RedriveTenant(ctx, tenant, false, ids...)
}

// RedriveTenant is Redrive, forced when force is set: a row whose last
// attempt failed permanently is reopened too (the console's redrive of one
// notification, which writes its own audit line).
func (l *Actions) RedriveTenant(ctx context.Context, tenant string, force bool, ids ...int64) ([]Redriven, error) {
	if err := ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	found := make(map[int64]Redriven, len(ids))
	err := l.withTenant(ctx, tenant, func(tx *txn) error { return l.redriveIn(tx, ids, force, found) })
	if err != nil {
		return nil, err
	}
	return inOrder(ids, found), nil
}

// RedriveAny is Redrive across every tenant, for operators (owedctl dlq
// redrive, the console: a dead letter names its row's tenant and id, and
// one call reopens the rows of many tenants). The one cross-tenant step is
// asking whose rows the ids are (qTenantsOf); each tenant's rows are then
// redriven in that tenant's scope, all in one transaction, which also
// writes by's line of the operators' audit trail with the count of rows
// reopened: the ledger must be on-call's login (owed_operator), and no
// redrive commits without its line. force reopens a row whose last attempt
// failed permanently too. by.Action is "redrive" unless the caller names
// another (ops: dlq_redrive).
func (l *Actions) RedriveAny(ctx context.Context, by OperatorAction, force bool, ids ...int64) ([]Redriven, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	owners, err := l.tenantsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	// Each tenant's pass names every id; its scope lets only its own rows
	// through, so each row is redriven once, by its tenant's pass.
	seen := map[string]bool{}
	var tenants []string
	for _, id := range ids {
		if owner, ok := owners[id]; ok && !seen[owner] {
			seen[owner] = true
			tenants = append(tenants, owner)
		}
	}
	found := make(map[int64]Redriven, len(ids))
	err = l.inTx(ctx, func(*txn) error { return nil }, func(tx *txn) error {
		for _, owner := range tenants {
			if err := tenant.Enter(ctx, tx, owner); err != nil {
				return err
			}
			if err := l.redriveIn(tx, ids, force, found); err != nil {
				return err
			}
		}
		if by.Action == "" {
			by.Action = "redrive"
		}
		by.Count = 0
		for _, r := range found {
			if r.Reopened {
				by.Count++
			}
		}
		return l.recordAction(tx.QueryRow, by)
	})
	if err != nil {
		return nil, err
	}
	return inOrder(ids, found), nil
}

// redriveIn runs qRedrive on ids in tx's tenant scope and adds each row it
// saw to found.
func (l *Actions) redriveIn(tx *txn, ids []int64, force bool, found map[int64]Redriven) error {
	rows, err := tx.Query(qRedrive, pq.Array(ids), l.now(), force)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r Redriven
		var exp sql.NullTime
		var now time.Time
		var permanent sql.NullString
		if err := rows.Scan(&r.ID, &r.Tenant, &r.State, &r.QueueGeneration, &r.Reopened, &exp, &now, &permanent); err != nil {
			return err
		}
		r.Permanent = permanent.Valid
		switch {
		case r.Reopened:
		case r.State != StateFailed:
			r.Reason = fmt.Sprintf("row is %s: only a failed row is redriven", r.State)
		case exp.Valid && !exp.Time.After(now):
			r.Reason = fmt.Sprintf("row expired at %s: a redrive never sends a nudge past its expiry",
				exp.Time.UTC().Format(time.RFC3339))
		default:
			r.Reason = fmt.Sprintf("%s (%s): sent again unchanged it fails the same way; fix the cause, then force the redrive",
				ErrPermanentNeedsForce, permanent.String)
		}
		found[r.ID] = r
	}
	return rows.Err()
}

// inOrder answers for each of ids, in input order, what found says of it.
func inOrder(ids []int64, found map[int64]Redriven) []Redriven {
	out := make([]Redriven, len(ids))
	reported := make(map[int64]bool, len(ids))
	for i, id := range ids {
		r, ok := found[id]
		switch {
		case !ok:
			r = Redriven{ID: id, Reason: "not found"}
		case reported[id] && r.Reopened:
			// The same id twice is one row: only its first mention reopened it.
			r.Reopened, r.Reason = false, "listed twice: reopened by its first mention"
		}
		reported[id] = true
		out[i] = r
	}
	return out
}
