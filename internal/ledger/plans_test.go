package ledger

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
)

// ledgerTable says whether rel is one of the tables that grow with the
// ledger, or a partition of one (owed_notifications_y2026m03, the legacy
// partition): the tables no operator read may scan.
func ledgerTable(rel string) bool {
	for _, t := range []string{"owed_notifications", "owed_notification_attempts", "owed_receipts"} {
		if rel == t || strings.HasPrefix(rel, t+"_") {
			return true
		}
	}
	return false
}

// seedSettledLedger fills b's database, as the owner, with 60 days of
// settled rows (one a minute, delivered with an accepted attempt
// and a receipt, a tenth expired), 9,000 owed rows (a tenth, as a busy ledger holds), and analyzes the tables,
// so the planner chooses as it would on a ledger in production rather than
// on an empty one, where a sequential scan is cheapest.
func seedSettledLedger(t *testing.T, b *bundle) {
	t.Helper()
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state,
			        settled_at, delivered_at, created_at, updated_at, payload, provider, provider_message_id)
			 SELECT 't' || (g % 20), 'r' || g, 'sms', 'k', 'ref' || g, s - interval '5 seconds',
			        CASE WHEN g % 10 = 0 THEN 'expired' ELSE 'delivered' END, s,
			        CASE WHEN g % 10 = 0 THEN NULL ELSE s END, s - interval '1 minute', s, '{}',
			        'twilio:AC', 'SM' || g
			   FROM generate_series(1, 86400) g, LATERAL (SELECT $1::timestamptz - g * interval '1 minute' AS s) x`,
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
			        finished_at, outcome, provider_message_id)
			 SELECT id, tenant_id, 1, provider, delivered_at, delivered_at, 'accepted', provider_message_id
			   FROM owed_notifications WHERE state = 'delivered'`,
			`INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, received_at)
			 SELECT tenant_id, id, 'twilio', provider_message_id, 'delivered', delivered_at
			   FROM owed_notifications WHERE state = 'delivered'`,
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload, created_at)
			 SELECT 't' || (g % 20), 'owed' || g, 'sms', 'k', 'owed' || g, $1::timestamptz - g * interval '1 second', '{}', $1
			   FROM generate_series(1, 9000) g`,
		} {
			var args []any
			if strings.Contains(q, "$1") {
				args = append(args, b.now)
			}
			if _, err := tx.Exec(q, args...); err != nil {
				return fmt.Errorf("%w\n%s", err, q)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"owed_notifications", "owed_notification_attempts", "owed_receipts"} {
		if _, err := b.db.Owner.Exec(`VACUUM ANALYZE ` + table); err != nil {
			t.Fatal(err)
		}
	}
}

// explainBody plans the SQL body of function fn (a LANGUAGE sql function
// of the ledger's) as its owner would run it, with args, and returns the
// plan as EXPLAIN (FORMAT JSON) prints it: EXPLAIN of the function's call
// shows a Function Scan and hides the statement inside.
func explainBody(t *testing.T, b *bundle, fn string, args ...any) string {
	t.Helper()
	conn, err := b.db.Owner.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var body, types string
	if err := conn.QueryRowContext(ctx, `SELECT prosrc, oidvectortypes(proargtypes) FROM pg_proc WHERE proname = $1`,
		fn).Scan(&body, &types); err != nil {
		t.Fatalf("find %s: %v", fn, err)
	}
	return explainSQL(t, conn, fn, body, types, args...)
}

// explainSQL PREPAREs query with the parameter types types (comma
// separated) on conn and explains its execution with args.
func explainSQL(t *testing.T, conn *sql.Conn, name, query, types string, args ...any) string {
	t.Helper()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PREPARE p_plan (%s) AS %s", types, query)); err != nil {
		t.Fatalf("prepare %s: %v", name, err)
	}
	defer conn.ExecContext(ctx, "DEALLOCATE p_plan")
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = literal(a)
	}
	var plan string
	if err := conn.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) EXECUTE p_plan ("+strings.Join(lits, ", ")+")").
		Scan(&plan); err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	return plan
}

// literal writes a test's argument as an SQL literal for EXECUTE, which
// takes no bind parameters of its own.
func literal(a any) string {
	switch v := a.(type) {
	case time.Time:
		return pq.QuoteLiteral(v.Format(time.RFC3339Nano))
	case string:
		return pq.QuoteLiteral(v)
	case []int64:
		parts := make([]string, len(v))
		for i, id := range v {
			parts[i] = fmt.Sprint(id)
		}
		return "ARRAY[" + strings.Join(parts, ",") + "]::bigint[]"
	case nil:
		return "NULL"
	default:
		return fmt.Sprint(v)
	}
}

// The operators' reads (owedctl stats, the console's dashboard, the
// sweeper's /metrics backlog gauges, a row's look-up by id, and
// GET /v1/notifications' first page) never read a ledger table
// sequentially: on a ledger of 60 days their plans read indexes, so their
// cost follows the window or the backlog they ask about, not the months
// the ledger holds. Before owed_notifications_settled, owed_ledger_stats
// and owed_ledger_receipt_stats scanned the whole table.
func TestOperatorReadsNeverScanTheLedger(t *testing.T) {
	b := setup(t)
	seedSettledLedger(t, b)
	empty := b.emptyPartitions(t)
	hour := b.now.Add(-time.Hour)
	for _, c := range []struct {
		fn   string
		args []any
	}{
		{"owed_ledger_stats", []any{hour}},
		{"owed_ledger_receipt_stats", []any{hour}},
		{"owed_ledger_backlog", []any{b.now}},
		{"owed_ledger_sends_per_minute", []any{hour}},
		{"owed_ledger_tenants_of", []any{[]int64{1, 2, 3}}},
	} {
		if plan := explainBody(t, b, c.fn, c.args...); seqScansBut(t, plan, empty) > 0 {
			t.Errorf("%s scans a ledger table:\n%s", c.fn, plan)
		}
	}

	conn, err := b.db.Owner.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		name, types string
		args        []any
	}{
		{"FindPage", "text, text, text, text, text, text, text, timestamptz, timestamptz, timestamptz, timestamptz, " +
			"timestamptz, bigint, integer",
			[]any{"t3", "", "", "", "", "", "", "-infinity", "infinity", nil, nil, "infinity", int64(0), 51}},
		{"Get", "bigint", []any{int64(7)}},
		{"Attempts", "bigint", []any{int64(7)}},
		{"Receipts", "bigint", []any{int64(7)}},
	} {
		if plan := explainSQL(t, conn, c.name, queries.Get(c.name), c.types, c.args...); seqScansBut(t, plan, empty) > 0 {
			t.Errorf("%s scans a ledger table:\n%s", c.name, plan)
		}
	}
}

// An idle lease (rows owed, none due) never reads the ledger sequentially:
// its guard (owed_sweep_lease_fair's check that anything is leasable,
// sweep.sql) runs on every sweep, so a sequential scan there costs every
// idle sweep the whole ledger. The count is the transaction's own
// (pg_stat_xact_user_tables), read before the statistics are sent. Before
// the guard was split by state, its OR over pending and expired leases
// read the table sequentially.
func TestIdleLeaseNeverScansTheLedger(t *testing.T) {
	b := setup(t)
	seedSettledLedger(t, b)
	if _, err := b.db.Owner.Exec(`UPDATE owed_notifications SET due_at = $1::timestamptz + interval '1 hour'
	    WHERE settled_at IS NULL`, b.now); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`ANALYZE owed_notifications`); err != nil {
		t.Fatal(err)
	}
	tx, err := b.db.App.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	p := LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute}
	rows, err := tx.QueryContext(ctx, qLeaseFair, p.args(b.now)...)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	var scans int64
	// A partition that holds nothing (no page: next month's, the legacy
	// partition of a fresh install) may be read sequentially for free.
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(s.seq_scan), 0) FROM pg_stat_xact_user_tables s
	    JOIN pg_class c ON c.oid = s.relid
	    WHERE (s.relname = 'owed_notifications' OR s.relname LIKE 'owed\_notifications\_%') AND c.relpages > 0`).Scan(&scans); err != nil {
		t.Fatal(err)
	}
	if n != 0 || scans != 0 {
		t.Errorf("the idle lease answered %d rows and read owed_notifications sequentially %d times, want 0 and 0", n, scans)
	}
}
