package ledger

import (
	"context"
	"database/sql"
	"time"
)

// TableVacuum is one of owed's tables as the statistics collector sees it:
// the row versions it holds alive and dead, and when a vacuum last
// finished. Dead versions are what a settle leaves behind and what the
// lease's partial indexes step over until a vacuum removes them
// (internal/ledger/sql/notifications.sql says why the ledger's autovacuum
// is tuned).
type TableVacuum struct {
	Table string
	Live  int64
	Dead  int64
	// LastVacuum is nil when no vacuum finished since the statistics were
	// reset.
	LastVacuum *time.Time
}

// TableVacuum reads the vacuum statistics of every owed table, partitions
// on their own, by name.
func (l *Reads) TableVacuum(ctx context.Context) ([]TableVacuum, error) {
	var out []TableVacuum
	err := l.queryAllTenants(ctx, qTableVacuum, nil, func(rows *sql.Rows) error {
		var v TableVacuum
		var last sql.NullTime
		if err := rows.Scan(&v.Table, &v.Live, &v.Dead, &last); err != nil {
			return err
		}
		v.LastVacuum = timePtr(last)
		out = append(out, v)
		return nil
	})
	return out, err
}

var qTableVacuum = queries.Get("TableVacuum")
