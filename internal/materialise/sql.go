package materialise

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// SQLSource reads the owed_items table (sql/items.sql), which
// applications fill in their own tenant's scope.
//
// Its two reads are cross-tenant statements: the materialiser serves every
// tenant in one pass, so it calls owed_materialise_upcoming and
// owed_materialise_nudges (sql/items.sql), SECURITY
// DEFINER functions owned by owed_definer that the runtime role may execute,
// exactly as the ledger's sweeper statements do; no session setting opens
// every tenant. Nothing else in this package reads across tenants; the rows
// it produces and changes are written back through the ledger in each
// item's own tenant scope.
type SQLSource struct {
	db *sql.DB
}

// NewSQLSource returns a Source over db, connected as the application role.
func NewSQLSource(db *sql.DB) *SQLSource { return &SQLSource{db: db} }

var _ Source = (*SQLSource)(nil)

// The reads, each one SECURITY DEFINER function.
const (
	// qUpcoming is a range scan of owed_items_starts_at, ordered by tenant,
	// starts_at and id: the order makes a run's batches, and so its log,
	// reproducible. Cancelled items are left out.
	qUpcoming = `
SELECT id, tenant_id, recipient, channel, kind, ref_id, starts_at, lead_seconds, payload
  FROM owed_materialise_upcoming($1, $2)`

	// qNudges reads owed_notifications_materialised_owed from $1 (the
	// rows the materialiser marked, still owed and not expired), each
	// joined to its item by owed_items_key, ordered by tenant and id. A row
	// whose item was deleted comes back with a NULL item. It answers no
	// recipient and no payload.
	qNudges = `
SELECT id, tenant_id, due_at, expires_at, cancelling, moving, item_id, starts_at, lead_seconds, item_cancelled
  FROM owed_materialise_nudges($1)`
)

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
		if err := rows.Scan(&it.ID, &it.Tenant, &it.Recipient, &it.Channel, &it.Kind, &it.RefID, &it.StartsAt,
			&lead, &payload); err != nil {
			return nil, err
		}
		it.StartsAt = it.StartsAt.UTC()
		it.Payload = json.RawMessage(payload)
		it.Lead = leadOf(lead)
		items = append(items, it)
	}
	return items, rows.Err()
}

// Nudges returns the materialiser's rows still owed and expiring after now,
// across all tenants, each with its item as it is now.
func (s *SQLSource) Nudges(ctx context.Context, now time.Time) ([]Nudge, error) {
	rows, err := s.db.QueryContext(ctx, qNudges, now)
	if err != nil {
		return nil, fmt.Errorf("read materialised nudges: %w", err)
	}
	defer rows.Close()
	nudges := []Nudge{}
	for rows.Next() {
		var n Nudge
		var item sql.NullInt64
		var starts sql.NullTime
		var lead sql.NullInt64
		var cancelled sql.NullBool
		if err := rows.Scan(&n.ID, &n.Tenant, &n.DueAt, &n.ExpiresAt, &n.Cancelling, &n.Moving, &item, &starts,
			&lead, &cancelled); err != nil {
			return nil, err
		}
		n.DueAt, n.ExpiresAt = n.DueAt.UTC(), n.ExpiresAt.UTC()
		if item.Valid {
			n.Item = &NudgeItem{ID: item.Int64, StartsAt: starts.Time.UTC(), Lead: leadOf(lead),
				Cancelled: cancelled.Bool}
		}
		nudges = append(nudges, n)
	}
	return nudges, rows.Err()
}

// leadOf reads a lead_seconds column: NULL takes the default.
func leadOf(s sql.NullInt64) *time.Duration {
	if !s.Valid {
		return nil
	}
	d := time.Duration(s.Int64) * time.Second
	return &d
}
