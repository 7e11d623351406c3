package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/tenant"
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

// LeaseParams bound one sweep's claim.
type LeaseParams struct {
	// Limit caps the rows leased (OWED_SWEEP_BATCH).
	Limit int
	// Ahead also leases rows falling due within this window, to be published
	// with a delay so they surface at their due second (OWED_PUBLISH_AHEAD).
	Ahead time.Duration
	// For is how long the sweeper holds the rows before another sweep may
	// take them (a crashed sweeper heals when it runs out).
	For time.Duration
}

func (p LeaseParams) validate() error {
	switch {
	case p.Limit <= 0:
		return fmt.Errorf("ledger: lease limit must be above zero, got %d", p.Limit)
	case p.For <= 0:
		return fmt.Errorf("ledger: lease duration must be above zero, got %s", p.For)
	case p.Ahead < 0:
		return fmt.Errorf("ledger: publish-ahead window must not be negative, got %s", p.Ahead)
	}
	return nil
}

// Lease claims up to p.Limit owed rows across every tenant, oldest due
// first, in one statement: rows that are pending, or whose lease (leased,
// queued or sending) ran out. Rows past their expiry are never returned.
// Concurrent calls never return the same row. A row published before gets
// its next queue generation here (see qLease).
func (l *Ledger) Lease(ctx context.Context, p LeaseParams) ([]Leased, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	var out []Leased
	err := l.withAllTenants(ctx, func(tx *txn) error {
		rows, err := tx.Query(qLease, l.now(), seconds(p.For), seconds(p.Ahead), p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Leased
			if err := rows.Scan(&r.ID, &r.Tenant, &r.DueAt, &r.Republish, &r.QueueGeneration); err != nil {
				return err
			}
			r.DueAt = r.DueAt.UTC()
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	// UPDATE … RETURNING has no order; publish oldest first all the same.
	sort.Slice(out, func(i, j int) bool {
		if !out[i].DueAt.Equal(out[j].DueAt) {
			return out[i].DueAt.Before(out[j].DueAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
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

// execAllTenants runs one of the sweeper's cross-tenant updates and returns
// how many rows it changed.
func (l *Ledger) execAllTenants(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := l.withAllTenants(ctx, func(tx *txn) error {
		res, err := tx.Exec(query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// ExplainLease runs the lease statement under EXPLAIN (ANALYZE, BUFFERS) in
// a transaction it rolls back, so nothing is leased, and returns the plan
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
	if err := tenant.EnterAllTenants(ctx, tx); err != nil {
		return "", 0, err
	}
	rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+qLease,
		l.now(), seconds(p.For), seconds(p.Ahead), p.Limit)
	if err != nil {
		return "", 0, err
	}
	defer rows.Close()
	var doc []byte
	for rows.Next() {
		if err := rows.Scan(&doc); err != nil {
			return "", 0, err
		}
	}
	if err := rows.Err(); err != nil {
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
