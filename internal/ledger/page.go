package ledger

import (
	"context"
	"time"
)

// Position is where a page of Find's order (newest due first) ends: the due
// time and id of its last row. The next page starts strictly after it, so
// rows scheduled between two page reads never shift a page (keyset
// pagination, not an offset).
type Position struct {
	DueAt time.Time
	ID    int64
}

var (
	qFindPage     = queries.Get("FindPage")
	qFindPagePlan = queries.Get("FindPagePlan")
	qCountFind    = queries.Get("CountFind")
)

// FindPage lists one page of tenant's rows matching f, newest due first,
// starting after from (nil: the first page). next is the position to ask
// for the following page, nil when this page is the last.
func (l *Reads) FindPage(ctx context.Context, tenant string, f Filter, from *Position) (rows []Notification,
	next *Position, err error) {
	if err := ValidateTenant(tenant); err != nil {
		return nil, nil, err
	}
	if f.Limit <= 0 || f.Limit > MaxFindLimit {
		f.Limit = MaxFindLimit
	}
	due, id := "infinity", int64(0)
	if from != nil {
		due, id = from.DueAt.UTC().Format(time.RFC3339Nano), from.ID
	}
	rows = []Notification{}
	err = l.withTenant(ctx, tenant, func(tx *txn) error {
		var setting string
		if err := tx.QueryRow(qFindPagePlan).Scan(&setting); err != nil {
			return err
		}
		rs, err := tx.Query(qFindPage, append(f.args(tenant), due, id, f.Limit+1)...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			n, err := scanRow(rs)
			if err != nil {
				return err
			}
			rows = append(rows, n)
		}
		return rs.Err()
	})
	if err != nil {
		return nil, nil, err
	}
	if len(rows) > f.Limit {
		rows = rows[:f.Limit]
		last := rows[len(rows)-1]
		next = &Position{DueAt: last.DueAt, ID: last.ID}
	}
	return rows, next, nil
}

// MaxCount bounds how many rows Count reads.
const MaxCount = 10000

// Counts are how many of a tenant's rows match a filter, by state.
type Counts struct {
	ByState map[State]int64 `json:"by_state"`
	Total   int64           `json:"total"`
	// AtLeast is set when the count stopped at MaxCount rows: there may be
	// more.
	AtLeast bool `json:"at_least"`
}

// Count counts tenant's rows matching f by state (f.Limit is ignored),
// reading at most MaxCount of them.
func (l *Reads) Count(ctx context.Context, tenant string, f Filter) (Counts, error) {
	if err := ValidateTenant(tenant); err != nil {
		return Counts{}, err
	}
	c := Counts{ByState: map[State]int64{}}
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		rs, err := tx.Query(qCountFind, append(f.args(tenant), MaxCount)...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var st State
			var n int64
			if err := rs.Scan(&st, &n); err != nil {
				return err
			}
			c.ByState[st] = n
			c.Total += n
		}
		return rs.Err()
	})
	c.AtLeast = c.Total >= MaxCount
	return c, err
}
