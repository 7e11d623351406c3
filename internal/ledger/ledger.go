// Package ledger owns the record of what is owed and what was sent: the
// notifications table, its attempts, and every statement that reads or
// writes them. Nothing outside this package writes SQL against the ledger.
//
// Row-level security is forced on both tables. Every statement runs inside a
// transaction that names its tenant (set_config('owed.tenant_id', …, true)),
// except exactly these cross-tenant statements, which set the
// transaction-local bypass flag owed.bypass_rls instead:
//
//   - Lease, ExpireOverdue, MarkQueued and ReleaseLeased: the sweeper's claim
//     over every tenant's owed rows and its bookkeeping of that claim
//     (ExplainLease runs the same claim under EXPLAIN and rolls it back);
//   - Backlog, OldestOwedAge, Leasable, GetAny and Stats: operator
//     aggregates and look-ups.
//
// The worker's claim and its delivered settle, the two statements every
// delivery runs, call the SQL functions owed_claim and owed_settle_delivered
// (migrations/00007_ledger_functions.sql). They set the tenant scope
// themselves, so each costs one round trip; they are the only ledger SQL
// kept outside this package, and only this package calls them.
//
// Both settings are transaction-local, so a pooled connection never carries
// one request's tenant into the next. A statement run with neither setting
// matches no row at all: an unscoped read is empty, not global.
//
// The package never marks a row delivered before the provider accepted it:
// claimed_at records that a worker took the row, delivered_at that the
// provider said yes.
package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// State is a ledger row's place in its life.
type State string

// The states a row moves through. The last five are settled: settled_at is
// set and the sweeper never leases the row again.
const (
	StatePending   State = "pending"
	StateLeased    State = "leased"
	StateQueued    State = "queued"
	StateSending   State = "sending"
	StateDelivered State = "delivered"
	StateSkipped   State = "skipped"
	StateExpired   State = "expired"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
)

// Settled reports whether s is a final state.
func (s State) Settled() bool {
	switch s {
	case StateDelivered, StateSkipped, StateExpired, StateFailed, StateCancelled:
		return true
	}
	return false
}

// States lists every state in life order.
var States = []State{StatePending, StateLeased, StateQueued, StateSending,
	StateDelivered, StateSkipped, StateExpired, StateFailed, StateCancelled}

// DefaultIdempotencyPrefix starts every idempotency key unless configured.
const DefaultIdempotencyPrefix = "owed-"

// IdempotencyKey derives the key a row's queue message and provider sends
// carry. It depends on the row alone, never on the attempt or the clock: a
// retried row keeps its key, and a rescheduled row (new due_at) gets a new one.
func IdempotencyKey(prefix string, id int64, dueAt time.Time) string {
	return fmt.Sprintf("%s%d-%d", prefix, id, dueAt.UTC().UnixMicro())
}

// Ledger runs the named ledger operations against a database connected as
// the application role.
type Ledger struct {
	db *sql.DB
	// stmts caches prepared statements by query text. A prepared statement
	// costs one round trip per execution instead of two, and Postgres plans
	// it once per connection instead of on every call: on the worker's hot
	// path that is most of the ledger's cost.
	stmts sync.Map
	// Clock returns the current time. Tests replace it to say "an hour has
	// passed" without waiting an hour.
	Clock func() time.Time
}

// New returns a Ledger using db.
func New(db *sql.DB) *Ledger {
	return &Ledger{db: db, Clock: time.Now}
}

// DB returns the underlying pool (for health checks).
func (l *Ledger) DB() *sql.DB { return l.db }

func (l *Ledger) now() time.Time {
	// Postgres keeps microseconds; rounding here makes a value read back
	// compare equal to the one written.
	return l.Clock().UTC().Truncate(time.Microsecond)
}

// ErrNotFound is returned when a row does not exist in the caller's scope.
var ErrNotFound = errors.New("ledger: notification not found")

// withTenant runs fn in a transaction scoped to tenant.
func (l *Ledger) withTenant(ctx context.Context, tenant string, fn func(*txn) error) error {
	if tenant == "" {
		return errors.New("ledger: tenant is required")
	}
	return l.inTx(ctx, qSetTenant, tenant, fn)
}

// withBypass runs fn in a transaction that may see every tenant. Only the
// statements listed in the package doc use it.
func (l *Ledger) withBypass(ctx context.Context, fn func(*txn) error) error {
	return l.inTx(ctx, qSetBypass, nil, fn)
}

func (l *Ledger) inTx(ctx context.Context, scope string, arg any, fn func(*txn) error) error {
	sqlTx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer sqlTx.Rollback()
	tx := &txn{ctx: ctx, tx: sqlTx, l: l}
	if arg != nil {
		_, err = tx.Exec(scope, arg)
	} else {
		_, err = tx.Exec(scope)
	}
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return sqlTx.Commit()
}

// prepared returns the pool-wide prepared statement for query.
func (l *Ledger) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	if s, ok := l.stmts.Load(query); ok {
		return s.(*sql.Stmt), nil
	}
	s, err := l.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := l.stmts.LoadOrStore(query, s); loaded {
		s.Close()
		return prev.(*sql.Stmt), nil
	}
	return s, nil
}

// queryRow runs one prepared statement outside a transaction: the
// functions owed_claim and owed_settle_delivered scope themselves.
func (l *Ledger) queryRow(ctx context.Context, query string, args ...any) scanner {
	s, err := l.prepared(ctx, query)
	if err != nil {
		return errScanner{err}
	}
	return s.QueryRowContext(ctx, args...)
}

// txn is one ledger transaction; its statements are prepared once per
// connection and reused.
type txn struct {
	ctx context.Context
	tx  *sql.Tx
	l   *Ledger
}

func (t *txn) stmt(query string) (*sql.Stmt, error) {
	s, err := t.l.prepared(t.ctx, query)
	if err != nil {
		return nil, err
	}
	// The transaction's copy is closed with the transaction; database/sql
	// reuses the connection's existing preparation.
	return t.tx.StmtContext(t.ctx, s), nil
}

func (t *txn) Exec(query string, args ...any) (sql.Result, error) {
	s, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(t.ctx, args...)
}

func (t *txn) Query(query string, args ...any) (*sql.Rows, error) {
	s, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(t.ctx, args...)
}

// QueryRow returns a scanner; a preparation error surfaces from Scan.
func (t *txn) QueryRow(query string, args ...any) scanner {
	s, err := t.stmt(query)
	if err != nil {
		return errScanner{err}
	}
	return s.QueryRowContext(t.ctx, args...)
}

type errScanner struct{ err error }

func (e errScanner) Scan(...any) error { return e.err }

// Notification is one ledger row.
type Notification struct {
	ID                int64           `json:"id"`
	Tenant            string          `json:"tenant_id"`
	Recipient         string          `json:"recipient"`
	Channel           string          `json:"channel"`
	Kind              string          `json:"kind"`
	RefID             string          `json:"ref_id"`
	DueAt             time.Time       `json:"due_at"`
	ExpiresAt         *time.Time      `json:"expires_at,omitempty"`
	Payload           json.RawMessage `json:"payload"`
	State             State           `json:"state"`
	Attempts          int             `json:"attempts"`
	LeaseUntil        *time.Time      `json:"lease_until,omitempty"`
	ClaimedAt         *time.Time      `json:"claimed_at,omitempty"`
	PublishedAt       *time.Time      `json:"published_at,omitempty"`
	DeliveredAt       *time.Time      `json:"delivered_at,omitempty"`
	SettledAt         *time.Time      `json:"settled_at,omitempty"`
	Provider          string          `json:"provider,omitempty"`
	ProviderMessageID string          `json:"provider_message_id,omitempty"`
	LastError         string          `json:"last_error,omitempty"`
	CreatedAt         time.Time       `json:"created_at"`
	UpdatedAt         time.Time       `json:"updated_at"`
}

type scanner interface{ Scan(...any) error }

// scanNotification reads the columns of notificationColumns, then extra.
func scanNotification(s scanner, extra ...any) (Notification, error) {
	var n Notification
	var exp, lease, claimed, published, delivered, settled sql.NullTime
	var provider, providerMsg, lastErr sql.NullString
	var payload []byte
	dest := []any{&n.ID, &n.Tenant, &n.Recipient, &n.Channel, &n.Kind, &n.RefID, &n.DueAt, &exp,
		&payload, &n.State, &n.Attempts, &lease, &claimed, &published, &delivered, &settled,
		&provider, &providerMsg, &lastErr, &n.CreatedAt, &n.UpdatedAt}
	err := s.Scan(append(dest, extra...)...)
	if err != nil {
		return n, err
	}
	n.Payload = json.RawMessage(payload)
	n.ExpiresAt, n.LeaseUntil, n.ClaimedAt = timePtr(exp), timePtr(lease), timePtr(claimed)
	n.PublishedAt, n.DeliveredAt, n.SettledAt = timePtr(published), timePtr(delivered), timePtr(settled)
	n.Provider, n.ProviderMessageID, n.LastError = provider.String, providerMsg.String, lastErr.String
	n.DueAt = n.DueAt.UTC()
	n.CreatedAt, n.UpdatedAt = n.CreatedAt.UTC(), n.UpdatedAt.UTC()
	return n, nil
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func seconds(d time.Duration) float64 { return d.Seconds() }
