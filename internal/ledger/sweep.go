package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lib/pq"
)

// Leased is one row the sweeper holds and must publish.
type Leased struct {
	ID     int64
	Tenant string
	DueAt  time.Time
	// Republish is true when the row was published before (its message was
	// lost, acked or dead-lettered, and its lease ran out); the message goes
	// out again under the same idempotency key but a new queue generation.
	Republish bool
	// QueueGeneration is the row's queue generation as leased: its message
	// goes out under QueueKey(prefix, ID, DueAt, QueueGeneration).
	QueueGeneration int
}

// Slice says which owed rows one Lease takes.
type Slice int

const (
	// SliceOwed takes every owed row: pending, or its lease ran out.
	SliceOwed Slice = iota
	// SlicePending takes pending rows only (never published, handed back,
	// rescheduled or redriven), after LeaseParams.After.
	SlicePending
	// SliceRequeue takes only rows whose lease ran out (leased, queued or
	// sending): a sweep that died before its mark, a lost message, a worker
	// that died. A run gives them a slice of their own so they never
	// starve pending rows.
	SliceRequeue
)

// Cursor is a place in the lease's order, oldest due first and then by id.
type Cursor struct {
	DueAt time.Time
	ID    int64
}

// LeaseParams bound one slice of a sweep.
type LeaseParams struct {
	// Limit caps the rows leased (OWED_SWEEP_BATCH).
	Limit int
	// Ahead also leases rows falling due within this window, to be published
	// with a delay so they surface at their due second (OWED_PUBLISH_AHEAD).
	Ahead time.Duration
	// For is how long the sweeper holds the rows before another sweep may
	// take them (a crashed sweeper heals when it runs out).
	For time.Duration
	// Slice picks the rows; the zero value is SliceOwed.
	Slice Slice
	// After, for SlicePending, takes only rows after it in the lease's
	// order: a run passes the last row of its previous slice. The zero
	// Cursor starts at the oldest.
	After Cursor
}

func (p LeaseParams) validate() error {
	switch {
	case p.Limit <= 0:
		return fmt.Errorf("ledger: lease limit must be above zero, got %d", p.Limit)
	case p.For <= 0:
		return fmt.Errorf("ledger: lease duration must be above zero, got %s", p.For)
	case p.Ahead < 0:
		return fmt.Errorf("ledger: publish-ahead window must not be negative, got %s", p.Ahead)
	case p.Slice < SliceOwed || p.Slice > SliceRequeue:
		return fmt.Errorf("ledger: unknown lease slice %d", p.Slice)
	}
	return nil
}

// args returns the arguments of qLease and qExplainLease for p: the slice
// travels as its number, which owed_sweep_lease_sql reads (0 owed, 1
// pending, 2 requeue).
func (p LeaseParams) args(now any) []any {
	return []any{int(p.Slice), now, seconds(p.For), seconds(p.Ahead), p.Limit, p.After.DueAt, p.After.ID}
}

// Lease claims up to p.Limit owed rows of p.Slice across every tenant,
// oldest due first, in one statement: rows that are pending, or whose lease
// (leased, queued or sending) ran out. Rows past their expiry are never
// returned. Concurrent calls never return the same row. A row published
// before gets its next queue generation here (see qLease). The rows come
// back in the lease's order, so the last one is the next slice's Cursor.
func (l *Ledger) Lease(ctx context.Context, p LeaseParams) ([]Leased, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	var out []Leased
	err := l.queryAllTenants(ctx, qLease, p.args(l.now()), func(rows *sql.Rows) error {
		var r Leased
		if err := rows.Scan(&r.ID, &r.Tenant, &r.DueAt, &r.Republish, &r.QueueGeneration); err != nil {
			return err
		}
		r.DueAt = r.DueAt.UTC()
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortLeased(out)
	return out, nil
}

// Survey is what a sweep run sees before it leases.
type Survey struct {
	// Outstanding counts the rows a live lease holds (leased, queued or
	// sending), up to the limit Survey was given.
	Outstanding int
	// Pending and Requeues say whether a pending row, and a row whose lease
	// ran out, is owed by the publish-ahead horizon.
	Pending, Requeues bool
	// OldestOwedAge is how long the oldest unsettled, already due row has
	// been owed; zero when nothing due is owed.
	OldestOwedAge time.Duration
}

// Survey reads, in one statement across every tenant, the work outstanding
// (counted up to countUpTo, so the count never costs more than the
// backpressure cap), whether anything waits to be leased within ahead, and
// the oldest owed age (see qSurvey).
func (l *Ledger) Survey(ctx context.Context, ahead time.Duration, countUpTo int) (Survey, error) {
	if countUpTo <= 0 {
		return Survey{}, fmt.Errorf("ledger: survey count limit must be above zero, got %d", countUpTo)
	}
	var s Survey
	var oldest sql.NullTime
	var now time.Time
	if err := l.queryRowAllTenants(ctx, qSurvey, l.now(), countUpTo, seconds(ahead)).
		Scan(&s.Outstanding, &s.Pending, &s.Requeues, &oldest, &now); err != nil {
		return Survey{}, err
	}
	if oldest.Valid {
		s.OldestOwedAge = now.Sub(oldest.Time)
	}
	return s, nil
}

// ExpireOverdue settles up to limit owed rows whose expires_at has passed as
// expired, across every tenant, and returns how many it settled.
func (l *Ledger) ExpireOverdue(ctx context.Context, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("ledger: expiry limit must be above zero, got %d", limit)
	}
	return l.execAllTenants(ctx, qExpireOverdue, l.now(), limit)
}

// MarkQueued records that the queue accepted the messages of rows ids. A
// queued row that stays unsettled for requeueAfter past its due time is
// leased and published again (OWED_REQUEUE_AFTER).
func (l *Ledger) MarkQueued(ctx context.Context, ids []int64, requeueAfter time.Duration) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return l.execAllTenants(ctx, qMarkQueued, pq.Array(ids), l.now(), seconds(requeueAfter))
}

// ReleaseLeased hands back leased rows whose messages the queue did not
// accept, so the next sweep takes them without waiting for the lease.
func (l *Ledger) ReleaseLeased(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return l.execAllTenants(ctx, qReleaseLeased, pq.Array(ids), l.now())
}

// execAllTenants runs one of the sweeper's cross-tenant updates, a
// function that answers how many rows it changed.
func (l *Ledger) execAllTenants(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := l.queryRowAllTenants(ctx, query, args...).Scan(&n)
	return n, err
}

// queryRowAllTenants runs one cross-tenant statement, a call of one of the
// SECURITY DEFINER functions of sql/sweep.sql or sql/operator.sql (see the
// package doc), as
// a prepared statement of its own transaction: no scope is entered, since
// the function's owner, not the caller's setting, is what sees every
// tenant.
func (l *Ledger) queryRowAllTenants(ctx context.Context, query string, args ...any) scanner {
	s, err := l.prepared(ctx, query)
	if err != nil {
		return errScanner{err}
	}
	return s.QueryRowContext(ctx, args...)
}

// queryAllTenants is queryRowAllTenants for a function answering rows:
// scan reads each.
func (l *Ledger) queryAllTenants(ctx context.Context, query string, args []any, scan func(*sql.Rows) error) error {
	s, err := l.prepared(ctx, query)
	if err != nil {
		return err
	}
	rows, err := s.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ExplainLease runs the lease statement under EXPLAIN (ANALYZE, BUFFERS)
// (owed_sweep_explain_lease runs the text owed_sweep_lease runs) in a
// transaction it rolls back, so nothing is leased, and returns the plan
// and the server-side execution time. Operators and the benchmark use it to
// check that the lease reads the partial index and costs what is owed, not
// what the ledger holds.
func (l *Ledger) ExplainLease(ctx context.Context, p LeaseParams) (plan string, execution time.Duration, err error) {
	if err := p.validate(); err != nil {
		return "", 0, err
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return "", 0, err
	}
	defer tx.Rollback()
	var doc []byte
	if err := tx.QueryRowContext(ctx, qExplainLease, p.args(l.now())...).Scan(&doc); err != nil {
		return "", 0, err
	}
	var parsed []struct {
		ExecutionTime float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(doc, &parsed); err != nil || len(parsed) == 0 {
		return string(doc), 0, fmt.Errorf("ledger: read EXPLAIN output: %v", err)
	}
	return string(doc), time.Duration(parsed[0].ExecutionTime * float64(time.Millisecond)), nil
}
