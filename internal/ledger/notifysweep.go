package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
)

// The sweep's two statements beside sweep.go's: the fast path's lease, which
// counts the work outstanding in the statement that leases (a run started
// by a due-now notification is one lease and one mark, two transactions),
// and the setting aside of a leased row whose message cannot be built.

// LeaseDue is Lease of pending rows (p.Slice is ignored) bounded by the
// backpressure cap as well: in one statement it counts the rows a live lease
// holds by the publish-ahead horizon (leased, queued or sending, counted up
// to capacity, as Survey counts them), and leases at most p.Limit of the
// pending rows after p.After, oldest first, and never more than capacity
// minus that count. It returns the rows and the count, which a run that
// leased nothing still learns.
func (l *Ledger) LeaseDue(ctx context.Context, p LeaseParams, capacity int) ([]Leased, int, error) {
	p.Slice = SlicePending
	if err := p.validate(); err != nil {
		return nil, 0, err
	}
	if capacity <= 0 {
		return nil, 0, fmt.Errorf("ledger: lease capacity must be above zero, got %d", capacity)
	}
	args := append(p.args(l.now())[1:], capacity)
	var out []Leased
	held := 0
	err := l.queryAllTenants(ctx, qLeaseDue, args, func(rows *sql.Rows) error {
		var id, gen sql.NullInt64
		var ten sql.NullString
		var due sql.NullTime
		var republish sql.NullBool
		if err := rows.Scan(&held, &id, &ten, &due, &republish, &gen); err != nil {
			return err
		}
		if id.Valid {
			out = append(out, Leased{ID: id.Int64, Tenant: ten.String, DueAt: due.Time.UTC(),
				Republish: republish.Bool, QueueGeneration: int(gen.Int64)})
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	sortLeased(out)
	return out, held, nil
}

// sortLeased puts rows in the lease's order, oldest due first and then by
// id: UPDATE … RETURNING has none, and a sweep publishes oldest first.
func sortLeased(out []Leased) {
	sort.Slice(out, func(i, j int) bool {
		if !out[i].DueAt.Equal(out[j].DueAt) {
			return out[i].DueAt.Before(out[j].DueAt)
		}
		return out[i].ID < out[j].ID
	})
}

// SetAside settles a row the sweep leased and cannot publish (its message
// cannot be encoded: a tenant id the services refuse, written straight
// into the table) as failed with reason, so it no longer stops every run
// and the reason is on the row for the operator. It reports whether the row
// was still leased.
func (l *Ledger) SetAside(ctx context.Context, id int64, reason string) (bool, error) {
	n, err := l.execAllTenants(ctx, qSetAside, id, l.now(), reason)
	return n == 1, err
}

// The fast path's statements, calls of the SECURITY DEFINER functions
// owed_sweep_lease_due and owed_sweep_set_aside (sql/sweep.sql; see the
// package doc).
var (
	qLeaseDue = queries.Get("LeaseDue")
	qSetAside = queries.Get("SetAside")
)
