package materialise

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/sqlfile"
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

// queriesSQL is every statement the materialiser runs, by name, with what
// each reads: sql/queries.sql (docs/sql.md).
//
//go:embed sql/queries.sql
var queriesSQL string

var queries = sqlfile.MustParse("internal/materialise/sql/queries.sql", queriesSQL)

// The reads, each one SECURITY DEFINER function.
var (
	qUpcoming = queries.Get("Upcoming")
	qNudges   = queries.Get("Nudges")
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
