// Package ledger owns the record of what is owed and what was sent: the
// owed_notifications table, its owed_notification_attempts, and every
// statement that reads or writes them. Nothing outside this package writes SQL against the ledger.
//
// Its operations are split by the role that calls them, each a handle on
// one shared core (pool, clock, prepared statements; roles.go): Sweep (the
// sweeper's survey, lease and its bookkeeping), Work (the worker's claim,
// heartbeat, settles and releases), Scheduling (the API's and the
// materialiser's writes), Reads (every read an operator or the API
// answers), Actions (on-call's audited writes) and Receipts (the
// providers' receipts). New returns a *Ledger holding every role; only a
// composition root holds it, and every other package takes the role it
// calls, so a package's dependency on the ledger is the part it uses.
//
// Row-level security is forced on both tables, and its policies name the
// roles they serve (sql/notifications.sql, sql/attempts.sql; the roles are
// internal/migrate/sql/roles.sql): owed_runtime, the services' group,
// sees a tenant's rows only in a transaction scoped to it by tenant.Enter.
// No setting opens every tenant. The cross-tenant statements are SECURITY
// DEFINER functions owned by owed_definer, a role no login is a member of,
// each answering only the columns its caller reads (sql/sweep.sql,
// sql/operator.sql):
//
//   - Survey, Lease, ExpireOverdue, MarkQueued and ReleaseLeased: the
//     sweeper's look at what is owed and held, its claim over every tenant's
//     owed rows and its bookkeeping of that claim (ExplainLease runs the
//     same claim under EXPLAIN and rolls it back);
//   - Backlog, Leasable and Stats: operator aggregates;
//   - GetAny and RedriveAny ask only whose rows the ids are, then read or
//     redrive each row in its own tenant's scope.
//
// The worker's claim and its delivered settle, the two statements every
// delivery runs, are ClaimForSendBatch and SettleDeliveredBatch; its claim
// heartbeat is ExtendClaims and its check before the send StartSends. They
// call the SQL functions owed_claim_many, owed_settle_delivered_many and
// owed_extend_many, each one set-based statement over the batch's rows,
// passed as arrays, in the scope of every tenant the batch names with each
// row matched to its own tenant (owed_tenant_scope), so a batch of many
// tenants' rows costs one round trip, one commit and one plan
// (sql/claim.sql, sql/settle.sql).
// ClaimForSend and SettleDelivered are the same statements for a batch of
// one. Only this package calls these functions and the cross-tenant ones
// above; their current definitions, and what each does, are in this
// package's sql folder (docs/sql.md), and sql/queries.sql holds each call.
//
// Every claim that takes a row moves its claim_seq on and hands the worker a
// Hold (the row and that token). Every write after the claim names the Hold
// and changes the row only while it is still the row's (fence.go): a worker
// whose claim was superseded gets ErrClaimLost and has changed nothing.
//
// Besides these functions, one trigger runs ledger SQL that no statement
// of this package names: owed_apply_intent (sql/intents.sql) applies a cancel
// or reschedule that Cancel or Reschedule recorded on a row in flight when
// the row leaves sending, whichever statement moves it, so the intent holds
// through every release and settle path without each statement knowing it.
//
// The scope is transaction-local, so a pooled connection never carries one
// request's tenant into the next. A statement run without it matches no
// row at all: an unscoped read is empty, not global.
//
// The Ledger's clock (clock.Clock, given to New) decides "now" for every
// statement: in production it leaves the instant to the database
// (coalesce($n, now())), so every process stamps leases and settles by one
// clock; a test's stub fixes it. The package never reads the wall clock for
// a row's times, and every lease is computed in SQL from that instant and a
// duration (a release's lease included), never from an instant a caller
// computed on its own clock. The claim returns its instant (Claim.Now), so a
// worker measures what the claim told it as durations from it.
//
// Two keys follow a row. Its provider idempotency key (IdempotencyKey:
// the row's id and due time) is the same on every send, so a provider that
// honours it never delivers the row twice. Its queue key (QueueKey) adds the
// row's queue_generation, which moves on with every deliberate republish: the
// sweep's requeue of a row published before, a reschedule, a Redrive. A
// queue that deduplicates by key therefore absorbs a repeat of one publish
// but never drops a republish that replaces a message lost, acked or
// dead-lettered. Deduplication is the queue's optimisation; the claim
// decides what is sent.
//
// A settled row is final, failed included: the worker's claim never takes
// one, so a stray copy of a failed row's message, or one redriven from the
// dead letters, is acked and dropped. The one way back is Redrive (or
// RedriveAny), an explicit ledger transition from failed to pending under a
// new generation, after which the sweep publishes a fresh message.
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

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/localtime"
	"github.com/owedhq/owed/internal/tenant"
)

// State is a ledger row's place in its life.
type State string

// The states a row moves through. The last five are settled: settled_at is
// set, and neither the sweeper's lease nor the worker's claim takes the row
// again; only Redrive reopens a failed one.
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

// IdempotencyKey derives the key every provider send of a row carries. It
// depends on the row alone, never on the attempt, the queue generation or
// the clock: a retried, requeued or redriven row keeps its key, so a
// provider that honours it never delivers the row twice, and a rescheduled
// row (new due_at) gets a new one.
func IdempotencyKey(prefix string, id int64, dueAt time.Time) string {
	return fmt.Sprintf("%s%d-%d", prefix, id, dueAt.UTC().UnixMicro())
}

// QueueKey derives the key of a row's queue message: its IdempotencyKey
// plus its queue generation (owed-<id>-<due µs>-g<generation>). The
// generation grows with every deliberate republish (a requeue of a row
// published before, a reschedule, a Redrive), so a queue that deduplicates
// by key never drops the new message as a copy of the one it replaces,
// while a repeat of the same publish (a sweep that died before marking its
// rows queued) keeps its key and is absorbed.
func QueueKey(prefix string, id int64, dueAt time.Time, generation int) string {
	return fmt.Sprintf("%s-g%d", IdempotencyKey(prefix, id, dueAt), generation)
}

// core is what every role shares: the pool, the clock and the prepared
// statements. Every role of one Ledger points at the same core, so a
// statement prepared for one role is reused by all of them.
type core struct {
	db *sql.DB
	// clk decides "now" for every statement (see the package doc).
	clk clock.Clock
	// stmts caches prepared statements by query text. A prepared statement
	// costs one round trip per execution instead of two, and Postgres plans
	// it once per connection instead of on every call: on the worker's hot
	// path that is most of the ledger's cost.
	stmts sync.Map
}

// DB returns the underlying pool (for health checks, and for the other
// packages' tables that live in the same database).
func (l *core) DB() *sql.DB { return l.db }

// now is the $n of every coalesce($n::timestamptz, now()): nil in
// production, so the database's clock decides.
func (l *core) now() *time.Time { return l.clk.NowOrNil() }

// ErrNotFound is returned when a row does not exist in the caller's scope.
var ErrNotFound = errors.New("ledger: notification not found")

// withTenant runs fn in a transaction scoped to id.
func (l *core) withTenant(ctx context.Context, id string, fn func(*txn) error) error {
	return l.inTx(ctx, func(tx *txn) error { return tenant.Enter(ctx, tx, id) }, fn)
}

func (l *core) inTx(ctx context.Context, enter, fn func(*txn) error) error {
	sqlTx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer sqlTx.Rollback()
	tx := &txn{ctx: ctx, tx: sqlTx, l: l}
	if err := enter(tx); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return sqlTx.Commit()
}

// prepared returns the pool-wide prepared statement for query.
func (l *core) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
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

// txn is one ledger transaction; its statements are prepared once per
// connection and reused. It is the tenant.Execer its scope is entered
// through, so the scope statement is prepared like the rest.
type txn struct {
	ctx context.Context
	tx  *sql.Tx
	l   *core
}

var _ tenant.Execer = (*txn)(nil)

func (t *txn) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s, err := t.l.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	// The transaction's copy is closed with the transaction; database/sql
	// reuses the connection's existing preparation.
	return t.tx.StmtContext(ctx, s), nil
}

// ExecContext runs one prepared statement in the transaction.
func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s, err := t.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.ExecContext(ctx, args...)
}

func (t *txn) Exec(query string, args ...any) (sql.Result, error) {
	return t.ExecContext(t.ctx, query, args...)
}

func (t *txn) Query(query string, args ...any) (*sql.Rows, error) {
	s, err := t.stmt(t.ctx, query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(t.ctx, args...)
}

// QueryRow returns a scanner; a preparation error surfaces from Scan.
func (t *txn) QueryRow(query string, args ...any) scanner {
	s, err := t.stmt(t.ctx, query)
	if err != nil {
		return errScanner{err}
	}
	return s.QueryRowContext(t.ctx, args...)
}

type errScanner struct{ err error }

func (e errScanner) Scan(...any) error { return e.err }

// Notification is one ledger row.
type Notification struct {
	ID     int64  `json:"id"`
	Tenant string `json:"tenant_id"`
	// NewNotification is what was scheduled; the fields below are the
	// row's life since.
	NewNotification
	State             State      `json:"state"`
	Attempts          int        `json:"attempts"`
	LeaseUntil        *time.Time `json:"lease_until,omitempty"`
	ClaimedAt         *time.Time `json:"claimed_at,omitempty"`
	PublishedAt       *time.Time `json:"published_at,omitempty"`
	DeliveredAt       *time.Time `json:"delivered_at,omitempty"`
	SettledAt         *time.Time `json:"settled_at,omitempty"`
	Provider          string     `json:"provider,omitempty"`
	ProviderMessageID string     `json:"provider_message_id,omitempty"`
	LastError         string     `json:"last_error,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	UpdatedAt         time.Time  `json:"updated_at"`
	// QueueGeneration counts the row's deliberate republishes (QueueKey).
	QueueGeneration int `json:"queue_generation"`
	// ClaimSeq counts the worker claims that took the row; the latest is
	// the token of the claim that holds it now (Hold).
	ClaimSeq int64 `json:"claim_seq"`
	// Hold says, while quiet hours hold the row, until when: "held for
	// quiet hours until 2027-03-29T08:00:00+02:00", in the row's zone.
	Hold string `json:"hold,omitempty"`
	// DigestID names the digest the row is in (sql/digests.sql): one
	// provider call lists its members, each settled with that call's
	// provider message id. Zero for a row sent alone.
	DigestID int64 `json:"digest_id,omitempty"`
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
		&provider, &providerMsg, &lastErr, &n.CreatedAt, &n.UpdatedAt, &n.QueueGeneration, &n.ClaimSeq}
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

// scanRow reads the columns of notificationColumns and localColumns, as
// the reads that answer callers select them, then extra.
func scanRow(s scanner, extra ...any) (Notification, error) {
	var zone sql.NullString
	var local, held, digestFrom sql.NullTime
	var urgent bool
	var digest sql.NullInt64
	n, err := scanNotification(s, append([]any{&zone, &local, &held, &urgent, &digest, &digestFrom}, extra...)...)
	if err != nil {
		return n, err
	}
	n.TimeZone, n.Urgent, n.DigestID, n.DigestFrom = zone.String, urgent, digest.Int64, timePtr(digestFrom)
	if local.Valid {
		n.DueLocal = localtime.FormatCivil(local.Time)
	}
	if n.HeldFrom = timePtr(held); n.HeldFrom != nil && n.SettledAt == nil {
		until := n.DueAt
		if loc, err := localtime.LoadZone(n.TimeZone); err == nil {
			until = until.In(loc)
		}
		n.Hold = "held for quiet hours until " + until.Format(time.RFC3339)
	}
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
