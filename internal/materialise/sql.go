package materialise

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// SQLSource reads the owed_items table (migrations/00003_items.sql), which
// applications fill in their own tenant's scope.
//
// Its read is a cross-tenant statement: the materialiser serves every tenant
// in one pass, so it calls owed_materialise_upcoming, a SECURITY DEFINER
// function owned by owed_definer that the runtime role may execute
// (migrations/00019), exactly as the ledger's sweeper statements do; no
// session setting opens every tenant. Nothing else in this package reads
// across tenants; the rows it produces are written back through the ledger in
// each item's own tenant scope.
type SQLSource struct {
	db *sql.DB
}

// NewSQLSource returns a Source over db, connected as the application role.
func NewSQLSource(db *sql.DB) *SQLSource { return &SQLSource{db: db} }

var _ Source = (*SQLSource)(nil)

// qUpcoming is a range scan of owed_items_starts_at, ordered by tenant,
// starts_at and id: the order makes a run's batches, and so its log,
// reproducible.
const qUpcoming = `
SELECT tenant_id, recipient, channel, kind, ref_id, starts_at, lead_seconds, payload
  FROM owed_materialise_upcoming($1, $2)`

// Upcoming returns every item starting in (from, to], across all tenants.
func (s *SQLSource) Upcoming(ctx context.Context, from, to time.Time) ([]Item, error) {
	rows, err := s.db.QueryContext(ctx, qUpcoming, from, to)
	if err != nil {
		return nil, fmt.Errorf("read owed_items: %w", err)
	}
	defer rows.Close()
	items := []Item{}
	for rows.Next() {
		var it Item
		var lead sql.NullInt64
		var payload []byte
		if err := rows.Scan(&it.Tenant, &it.Recipient, &it.Channel, &it.Kind, &it.RefID, &it.StartsAt,
			&lead, &payload); err != nil {
			return nil, err
		}
		it.StartsAt = it.StartsAt.UTC()
		it.Payload = json.RawMessage(payload)
		if lead.Valid {
			d := time.Duration(lead.Int64) * time.Second
			it.Lead = &d
		}
		items = append(items, it)
	}
	return items, rows.Err()
}
