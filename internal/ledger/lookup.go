package ledger

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/lib/pq"
)

// Detail is one row with every send tried and every receipt the providers
// sent back: the compliance answer to "was this customer notified, and
// when". Outcome is the provider's confirmed word (receipts.go).
type Detail struct {
	Notification
	History []Attempt `json:"attempts"`
	Outcome
	Receipts []Receipt `json:"receipts"`
}

// Get returns one of tenant's rows with its attempts.
func (l *Reads) Get(ctx context.Context, tenant string, id int64) (Detail, error) {
	var d Detail
	err := l.withTenant(ctx, tenant, func(tx *txn) error { return getDetail(tx, id, &d) })
	return d, err
}

// GetAny returns a row of any tenant, for operators (owedctl): the one
// cross-tenant step is asking whose row id is (qTenantsOf); the row and its
// attempts are then read in that tenant's scope, as Get reads them.
func (l *Reads) GetAny(ctx context.Context, id int64) (Detail, error) {
	owners, err := l.tenantsOf(ctx, []int64{id})
	if err != nil {
		return Detail{}, err
	}
	owner, ok := owners[id]
	if !ok {
		return Detail{}, ErrNotFound
	}
	return l.Get(ctx, owner, id)
}

// tenantsOf says whose rows ids are; an id of no row is absent.
func (l *core) tenantsOf(ctx context.Context, ids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(ids))
	err := l.queryAllTenants(ctx, qTenantsOf, []any{pq.Array(ids)}, func(rows *sql.Rows) error {
		var id int64
		var owner string
		if err := rows.Scan(&id, &owner); err != nil {
			return err
		}
		out[id] = owner
		return nil
	})
	return out, err
}

func getDetail(tx *txn, id int64, d *Detail) error {
	n, err := scanRow(tx.QueryRow(qGet, id))
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	d.Notification = n
	rows, err := tx.Query(qAttempts, id)
	if err != nil {
		return err
	}
	defer rows.Close()
	d.History = []Attempt{}
	for rows.Next() {
		var a Attempt
		var msgID, errText sql.NullString
		var status sql.NullInt64
		if err := rows.Scan(&a.Attempt, &a.Provider, &a.StartedAt, &a.FinishedAt, &a.Outcome, &msgID, &status,
			&errText, &a.PossibleDuplicate); err != nil {
			return err
		}
		a.StartedAt, a.FinishedAt = a.StartedAt.UTC(), a.FinishedAt.UTC()
		a.ProviderMessageID, a.HTTPStatus, a.Error = msgID.String, int(status.Int64), errText.String
		d.History = append(d.History, a)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return readReceipts(tx, id, d)
}

// Filter selects a tenant's rows; empty fields match everything.
type Filter struct {
	Recipient string
	RefID     string
	Kind      string
	State     State
	Channel   string
	// RecipientPrefix matches the recipients that start with it.
	RecipientPrefix string
	// DueFrom and DueTo bound the due time, [from, to); SettledFrom and
	// SettledTo the settle time. A zero time leaves its side open.
	DueFrom, DueTo         time.Time
	SettledFrom, SettledTo time.Time
	Limit                  int // default and cap: MaxFindLimit
}

// args are f's parameters of the findFilter fragment (sql/queries.sql).
func (f Filter) args(tenant string) []any {
	from, to := "-infinity", "infinity"
	if !f.DueFrom.IsZero() {
		from = f.DueFrom.UTC().Format(time.RFC3339Nano)
	}
	if !f.DueTo.IsZero() {
		to = f.DueTo.UTC().Format(time.RFC3339Nano)
	}
	open := func(t time.Time) sql.NullTime { return sql.NullTime{Time: t.UTC(), Valid: !t.IsZero()} }
	return []any{tenant, f.Recipient, f.RefID, f.Kind, string(f.State), f.Channel, f.RecipientPrefix, from, to,
		open(f.SettledFrom), open(f.SettledTo)}
}

// MaxFindLimit caps how many rows Find returns.
const MaxFindLimit = 500

// Find lists tenant's rows matching f, newest due first: FindPage's first
// page.
func (l *Reads) Find(ctx context.Context, tenant string, f Filter) ([]Notification, error) {
	rows, _, err := l.FindPage(ctx, tenant, f, nil)
	return rows, err
}

// AuditRow is one row as an invariant check reads it: how it ended and how
// many sends the provider accepted.
type AuditRow struct {
	ID        int64
	State     State
	ExpiresAt *time.Time
	SettledAt *time.Time
	// Accepted counts the sends the provider accepted.
	Accepted int
	// PossibleDuplicate is set when any send was recorded as a possible
	// duplicate.
	PossibleDuplicate bool
}

// Audit returns every one of tenant's rows with its sends summarised, for
// the reliability drill's checks.
func (l *Reads) Audit(ctx context.Context, tenant string) ([]AuditRow, error) {
	var out []AuditRow
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		rows, err := tx.Query(qAudit, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r AuditRow
			var exp, settled sql.NullTime
			if err := rows.Scan(&r.ID, &r.State, &exp, &settled, &r.Accepted, &r.PossibleDuplicate); err != nil {
				return err
			}
			r.ExpiresAt, r.SettledAt = timePtr(exp), timePtr(settled)
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// Backlog is what is still owed, across every tenant.
type Backlog struct {
	// ByState counts unsettled rows per state.
	ByState map[State]int64 `json:"by_state"`
	// Owed is every unsettled row, due or not.
	Owed int64 `json:"owed"`
	// OldestDueAt is the due time of the oldest unsettled row that is
	// already due; nil when nothing due is owed.
	OldestDueAt *time.Time `json:"oldest_due_at,omitempty"`
	// OldestOwedAge is now minus OldestDueAt (zero when nothing is due).
	OldestOwedAge time.Duration `json:"oldest_owed_age"`
}

// Backlog counts owed rows by state and finds the oldest one already due.
// A growing OldestOwedAge while sweeps report nothing leased is the silent
// failure the design warns about: a claim that matches nothing.
func (l *Reads) Backlog(ctx context.Context) (Backlog, error) {
	var now time.Time
	b := Backlog{ByState: map[State]int64{}}
	err := l.queryAllTenants(ctx, qBacklog, []any{l.now()}, func(rows *sql.Rows) error {
		var s State
		var n int64
		var oldest sql.NullTime
		if err := rows.Scan(&s, &n, &oldest, &now); err != nil {
			return err
		}
		b.ByState[s] = n
		b.Owed += n
		if oldest.Valid && (b.OldestDueAt == nil || oldest.Time.Before(*b.OldestDueAt)) {
			t := oldest.Time.UTC()
			b.OldestDueAt = &t
		}
		return nil
	})
	if b.OldestDueAt != nil {
		b.OldestOwedAge = now.Sub(*b.OldestDueAt)
	}
	return b, err
}

// Stats summarises delivery since a point in time, for `owedctl stats`.
type Stats struct {
	Since     time.Time `json:"since"`
	Delivered int64     `json:"delivered"`
	Expired   int64     `json:"expired"`
	Failed    int64     `json:"failed"`
	Skipped   int64     `json:"skipped"`
	Cancelled int64     `json:"cancelled"`
	// Lag is delivered_at − due_at over rows delivered since Since.
	LagP50 time.Duration `json:"lag_p50"`
	LagP95 time.Duration `json:"lag_p95"`
	LagMax time.Duration `json:"lag_max"`
	// DuplicateRows counts rows the provider accepted more than once.
	DuplicateRows int64 `json:"duplicate_rows"`
	// PossibleDuplicates counts resends after a worker died mid-send.
	PossibleDuplicates int64 `json:"possible_duplicates"`
}

// Stats reads delivery figures since since, across every tenant.
func (l *Reads) Stats(ctx context.Context, since time.Time) (Stats, error) {
	s := Stats{Since: since.UTC()}
	var p50, p95, max float64
	if err := l.queryRowAllTenants(ctx, qStats, since).Scan(&s.Delivered, &s.Expired, &s.Failed, &s.Skipped,
		&s.Cancelled, &p50, &p95, &max, &s.DuplicateRows, &s.PossibleDuplicates); err != nil {
		return s, err
	}
	s.LagP50, s.LagP95, s.LagMax = secondsToDuration(p50), secondsToDuration(p95), secondsToDuration(max)
	return s, nil
}

func secondsToDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
