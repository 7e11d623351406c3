package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"
)

// The operators' reads and the audit trail behind the console
// (internal/console) and owedctl: sends per minute across every tenant, the
// rows a list of ids names (a dead letter's row), and the append-only
// record of operator actions (owed_operator_audit, sql/operator.sql).
var (
	qSendsPerMinute  = queries.Get("SendsPerMinute")
	qRowsIn          = queries.Get("RowsIn")
	qRecordAction    = queries.Get("RecordAction")
	qOperatorActions = queries.Get("OperatorActions")
)

// MinuteSends is one minute's finished send attempts.
type MinuteSends struct {
	Minute   time.Time `json:"minute"`
	Accepted int64     `json:"accepted"`
	// Other counts the attempts that were not accepted: skipped,
	// transient and permanent failures.
	Other int64 `json:"other"`
}

// SendsPerMinute counts the send attempts finished in each minute since
// since, across every tenant, oldest first; a minute without one is absent.
func (l *Reads) SendsPerMinute(ctx context.Context, since time.Time) ([]MinuteSends, error) {
	out := []MinuteSends{}
	err := l.queryAllTenants(ctx, qSendsPerMinute, []any{since}, func(rows *sql.Rows) error {
		var m MinuteSends
		if err := rows.Scan(&m.Minute, &m.Accepted, &m.Other); err != nil {
			return err
		}
		m.Minute = m.Minute.UTC()
		out = append(out, m)
		return nil
	})
	return out, err
}

// RowsAny reads the rows ids name, of any tenant, for operators: like
// GetAny, the one cross-tenant step is asking whose the ids are; each
// tenant's rows are then read in its own scope. An id of no row is absent.
func (l *Reads) RowsAny(ctx context.Context, ids []int64) (map[int64]Notification, error) {
	owners, err := l.tenantsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	byTenant := map[string][]int64{}
	for id, t := range owners {
		byTenant[t] = append(byTenant[t], id)
	}
	out := make(map[int64]Notification, len(owners))
	for t, mine := range byTenant {
		err := l.withTenant(ctx, t, func(tx *txn) error {
			rows, err := tx.Query(qRowsIn, pq.Array(mine))
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				n, err := scanRow(rows)
				if err != nil {
					return err
				}
				out[n.ID] = n
			}
			return rows.Err()
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// OperatorAction is one line of the operators' audit trail.
type OperatorAction struct {
	ID       int64     `json:"id"`
	At       time.Time `json:"at"`
	Operator string    `json:"operator"`
	// Action names what was done: dlq_redrive, dlq_delete, payload_read,
	// account_pause, tenant_resume, ….
	Action string `json:"action"`
	// Target is the ids or the filter the action named.
	Target string `json:"target"`
	// Count is how many things the action touched.
	Count  int    `json:"count"`
	Reason string `json:"reason"`
}

// Audit trail bounds, as owed_operator_audit's checks hold them
// (sql/operator.sql); RecordOperatorAction
// cuts longer values rather than lose the line.
const (
	MaxAuditOperator = 256
	maxAuditAction   = 64
	maxAuditTarget   = 4096
	MaxAuditReason   = 1024
)

// RecordOperatorAction appends a to the audit trail; its ID and At are the
// database's.
func (l *Actions) RecordOperatorAction(ctx context.Context, a OperatorAction) (int64, error) {
	var id int64
	err := l.queryRowAllTenants(ctx, qRecordAction, l.auditArgs(a)...).Scan(&id)
	return id, err
}

// recordAction appends a to the audit trail through queryRow: a
// transaction's, so the line commits with the write it describes.
func (l *Actions) recordAction(queryRow func(string, ...any) scanner, a OperatorAction) error {
	var id int64
	if err := queryRow(qRecordAction, l.auditArgs(a)...).Scan(&id); err != nil {
		return fmt.Errorf("record the audit line: %w", err)
	}
	return nil
}

// auditArgs are qRecordAction's arguments for a, cut to the trail's bounds.
func (l *Actions) auditArgs(a OperatorAction) []any {
	return []any{l.now(), cutBytes(a.Operator, MaxAuditOperator), cutBytes(a.Action, maxAuditAction),
		cutBytes(a.Target, maxAuditTarget), max(a.Count, 0), cutBytes(a.Reason, MaxAuditReason)}
}

// OperatorActions reads the latest limit lines of the audit trail, newest
// first.
func (l *Reads) OperatorActions(ctx context.Context, limit int) ([]OperatorAction, error) {
	rows, err := l.db.QueryContext(ctx, qOperatorActions, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []OperatorAction{}
	for rows.Next() {
		var a OperatorAction
		if err := rows.Scan(&a.ID, &a.At, &a.Operator, &a.Action, &a.Target, &a.Count, &a.Reason); err != nil {
			return nil, err
		}
		a.At = a.At.UTC()
		out = append(out, a)
	}
	return out, rows.Err()
}

// cutBytes shortens s to at most n bytes, dropping a rune cut in half.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
