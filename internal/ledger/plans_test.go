package ledger

import (
	"database/sql"
	"fmt"
	"regexp"
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
// of the ledger's) as its owner would run it, with args and under the
// function's own settings (its SET clauses), and returns the plan as
// EXPLAIN (FORMAT JSON) prints it: EXPLAIN of the function's call shows a
// Function Scan and hides the statement inside.
func explainBody(t *testing.T, b *bundle, fn string, args ...any) string {
	t.Helper()
	return explainBodyPlanned(t, b, false, fn, args...)
}

// explainBodyPlanned is explainBody, with generic: the plan made without
// the arguments' values (plan_cache_mode force_generic_plan), as a
// LANGUAGE sql function that is not inlined plans its statement, and as a
// PL/pgSQL function's cached statement may after five calls.
func explainBodyPlanned(t *testing.T, b *bundle, generic bool, fn string, args ...any) string {
	t.Helper()
	conn, err := b.db.Owner.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var body, types string
	var settings, names []string
	if err := conn.QueryRowContext(ctx, `SELECT prosrc, oidvectortypes(proargtypes), coalesce(proconfig, '{}'),
	        coalesce(proargnames[1:pronargs], '{}')
	    FROM pg_proc WHERE proname = $1`, fn).Scan(&body, &types, pq.Array(&settings), pq.Array(&names)); err != nil {
		t.Fatalf("find %s: %v", fn, err)
	}
	// A parameter the body names is written by its position, as a
	// prepared statement names it.
	for i, name := range names {
		if name != "" {
			body = regexp.MustCompile(`\b`+regexp.QuoteMeta(name)+`\b`).ReplaceAllString(body, fmt.Sprintf("$$%d", i+1))
		}
	}
	// A PL/pgSQL read (BEGIN RETURN QUERY …; END) is explained by its
	// statement, which names its parameters by position.
	if q, ok := strings.CutPrefix(strings.TrimSpace(body), "#variable_conflict use_column"); ok {
		body = q
	}
	if q, ok := strings.CutPrefix(strings.TrimSpace(body), "BEGIN"); ok {
		q, ok = strings.CutSuffix(strings.TrimSpace(q), "END")
		q, ok2 := strings.CutPrefix(strings.TrimSpace(q), "RETURN QUERY")
		if !ok || !ok2 || strings.Count(q, ";") != 1 {
			t.Fatalf("%s: not a single RETURN QUERY, which this plans:\n%s", fn, body)
		}
		body = strings.TrimSuffix(strings.TrimSpace(q), ";")
	}
	defer conn.ExecContext(ctx, "RESET ALL")
	if generic {
		settings = append(settings, "plan_cache_mode=force_generic_plan")
	}
	for _, kv := range settings {
		k, v, _ := strings.Cut(kv, "=")
		if _, err := conn.ExecContext(ctx, "SELECT set_config($1, $2, false)", k, v); err != nil {
			t.Fatalf("%s's setting %s: %v", fn, kv, err)
		}
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
		{"owed_ledger_stats_rows", []any{hour}},
		{"owed_ledger_stats_minutes", []any{b.now.Add(-24 * time.Hour)}},
		{"owed_ledger_receipt_stats_rows", []any{hour}},
		{"owed_ledger_receipt_stats_minutes", []any{b.now.Add(-24 * time.Hour)}},
		{"owed_ledger_backlog_owed", []any{b.now}},
		{"owed_ledger_sends_per_minute_rows", []any{hour}},
		{"owed_sweep_send_rates_rows", []any{b.now, 3600.0, 2000}},
		{"owed_ledger_tenants_of", []any{[]int64{1, 2, 3}}},
		{"owed_history_sample", []any{b.now, nil, HistoryKeep.Seconds()}},
	} {
		for _, generic := range []bool{false, true} {
			if plan := explainBodyPlanned(t, b, generic, c.fn, c.args...); seqScansBut(t, plan, empty) > 0 {
				t.Errorf("%s scans a ledger table (generic plan: %v):\n%s", c.fn, generic, plan)
			}
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

// The backlog (owed_ledger_backlog: owedctl stats, the console, the
// sweeper's /metrics gauges on every scrape) reads the owed rows through
// their index whatever their share of the ledger. With 6,000 rows owed
// beside 6,000 settled, the planner read the whole table: cheaper then,
// but the read then grows with every row settled after it.
func TestBacklogReadsTheOwedRowsAtAnyShare(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state,
		        settled_at, delivered_at, payload, created_at)
		    SELECT 't' || (g % 20), 'r' || g, 'sms', 'k', 'ref' || g, $1::timestamptz - g * interval '1 minute',
		           CASE WHEN g % 2 = 0 THEN 'delivered' ELSE 'pending' END,
		           CASE WHEN g % 2 = 0 THEN $1::timestamptz - g * interval '1 minute' END,
		           CASE WHEN g % 2 = 0 THEN $1::timestamptz - g * interval '1 minute' END, '{}',
		           $1::timestamptz - g * interval '1 minute'
		      FROM generate_series(1, 12000) g`, b.now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`VACUUM ANALYZE owed_notifications`); err != nil {
		t.Fatal(err)
	}
	if plan := explainBody(t, b, "owed_ledger_backlog_owed", b.now); seqScans(t, plan) > 0 {
		t.Errorf("owed_ledger_backlog with half the ledger owed scans it:\n%s", plan)
	}
	bl, err := b.l.Backlog(ctx)
	if err != nil || bl.Owed != 6000 || bl.ByState[StatePending] != 6000 {
		t.Errorf("backlog: %+v (%v), want 6,000 pending", bl, err)
	}
}

// An idle sweep (rows owed, none due) never reads the ledger
// sequentially: every statement a cron call makes when nothing is due (the
// expiry pass, the workers' send rates, the survey, the history sample) and
// those a notified run or a near-budget run adds (each lease slice, whose
// guard answers before the slice is planned, and the check for leasable
// rows) runs every minute at least, so a sequential scan in any of them
// costs every idle minute the whole ledger. Each statement runs in a
// transaction of its own, whose own count of scans
// (pg_stat_xact_user_tables) is read before the statistics are sent. Before
// the lease's guard was split by state, its OR over pending rows and
// expired leases read the table sequentially; before the survey asked for
// the earliest pending row in due order, its EXISTS over pending rows due
// by the horizon did.
func TestIdleSweepNeverScansTheLedger(t *testing.T) {
	b := setup(t)
	seedSettledLedger(t, b)
	if _, err := b.db.Owner.Exec(`UPDATE owed_notifications SET due_at = $1::timestamptz + interval '1 hour'
	    WHERE settled_at IS NULL`, b.now); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`ANALYZE owed_notifications`); err != nil {
		t.Fatal(err)
	}
	sh := Sharing{Accounts: []Account{{Name: "", Cap: 1000}}}
	lease := func(s Slice, share float64) []any {
		return LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute, Slice: s, Share: share, Sharing: sh,
			RequeueAfter: 10 * time.Minute}.leaseArgs(b.now)
	}
	for _, c := range []struct {
		name  string
		query string
		args  []any
	}{
		{"ExpireOverdue", qExpireOverdue, []any{b.now, 500}},
		{"SendRates", qSendRates, sendRatesArgs(b.now, time.Minute, 2000)},
		{"SurveyFair", qSurveyFair, surveyArgs(b.now, time.Minute, sh, 2000)},
		{"RecordHistory", qRecordHistory, []any{b.now, nil, HistoryKeep.Seconds()}},
		{"LeaseFair (requeues)", qLeaseFair, lease(SliceRequeue, 0.5)},
		{"LeaseFair (pending)", qLeaseFair, lease(SlicePending, 1)},
		{"LeaseFair (owed, no accounts)", qLeaseFair,
			LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute}.leaseArgs(b.now)},
		{"LeasableFair", qLeasableFair, leasableArgs(b.now, time.Minute, sh)},
	} {
		if scans := xactSeqScans(t, b, c.query, c.args...); scans != 0 {
			t.Errorf("%s with nothing due read a ledger table sequentially %d times, want 0", c.name, scans)
		}
	}
}

// xactSeqScans runs query with args as the application role in a
// transaction it rolls back, reads every row it answers, and counts the
// sequential scans of the ledger's tables the query made. The backend's
// own counts (pg_stat_xact_user_tables) are read before and after it in
// the transaction: they also hold what the connection's earlier
// transactions did and the backend has not yet reported, and a backend
// reports only between transactions.
func xactSeqScans(t *testing.T, b *bundle, query string, args ...any) int64 {
	t.Helper()
	tx, err := b.db.App.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	count := func() map[string]int64 {
		// A partition that holds nothing (no page: next month's, the
		// legacy partition of a fresh install) may be read sequentially
		// for free.
		rows, err := tx.QueryContext(ctx, `SELECT relname, seq_scan FROM pg_stat_xact_user_tables
		    WHERE pg_relation_size(relid) > 0`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := map[string]int64{}
		for rows.Next() {
			var rel string
			var scans int64
			if err := rows.Scan(&rel, &scans); err != nil {
				t.Fatal(err)
			}
			if ledgerTable(rel) {
				n[rel] = scans
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	for rows.Next() {
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	rows.Close()
	var scans int64
	for rel, n := range count() {
		if d := n - before[rel]; d > 0 {
			t.Logf("read %s sequentially %d times", rel, d)
			scans += d
		}
	}
	return scans
}

// The operators' reads of a window (owed_ledger_stats,
// owed_ledger_receipt_stats, owed_ledger_sends_per_minute) are PL/pgSQL
// definers around LANGUAGE sql reads, so each read is planned with the
// window's start. A LANGUAGE sql definer is never inlined, and its
// statement is planned without its parameters' values: for "settled_at >=
// $1" or "finished_at >= $1" the planner then guesses a third of the
// table, and at 20 million rows (bench/ledgerscale) it chose a parallel
// sequential scan of the ledger (owed_ledger_receipt_stats) or of the
// attempts (owed_ledger_sends_per_minute) for an hour's window, seconds a
// call. The plan tests above explain the reads with their values and
// cannot see that; this says the definers give the reads their values.
func TestWindowReadsArePlannedWithTheirStart(t *testing.T) {
	b := setup(t)
	for _, fn := range []string{"owed_ledger_stats", "owed_ledger_receipt_stats", "owed_ledger_sends_per_minute"} {
		var lang string
		if err := b.db.Owner.QueryRow(`SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
		    WHERE p.proname = $1`, fn).Scan(&lang); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		if lang != "plpgsql" {
			t.Errorf("%s is LANGUAGE %s: its statement is planned without the window's start", fn, lang)
		}
	}
}

// A month's partition early in the month holds little but the window an
// operator or the sweep asks about: on its first day every attempt of the
// current month finished in the last day. The planner then reads the whole
// partition rather than its index, which is cheap that day and grows with
// every row the month gains after it, and it cannot tell that day from a
// later one by the plan alone. bench/ledgerscale found it: its current
// month held nothing but the bench's own last hour, and the console's sends
// per minute read that month's attempts sequentially on every call. The
// reads of a window run with enable_seqscan off, as owed_ledger_stats_rows
// does.
func TestReadsOfAWindowReadTheIndexWhenTheWindowIsTheWholeMonth(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state,
			        settled_at, delivered_at, created_at, updated_at, payload, provider, provider_message_id)
			 SELECT 't' || (g % 20), 'r' || g, 'sms', 'k', 'ref' || g, s - interval '5 seconds', 'delivered', s, s,
			        s - interval '1 minute', s, '{}', 'twilio:AC', 'SM' || g
			   FROM generate_series(1, 6000) g, LATERAL (SELECT $1::timestamptz - g * interval '500 milliseconds' AS s) x`,
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
			        finished_at, outcome, provider_message_id)
			 SELECT id, tenant_id, 1, provider, delivered_at, delivered_at, 'accepted', provider_message_id
			   FROM owed_notifications`,
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
	for _, table := range []string{"owed_notifications", "owed_notification_attempts"} {
		if _, err := b.db.Owner.Exec(`VACUUM ANALYZE ` + table); err != nil {
			t.Fatal(err)
		}
	}
	hour := b.now.Add(-time.Hour)
	for _, c := range []struct {
		name  string
		query string
		args  []any
	}{
		{"SendsPerMinute", qSendsPerMinute, []any{hour}},
		{"SendRates", qSendRates, sendRatesArgs(b.now, time.Hour, 100000)},
		{"Stats", qStats, []any{hour}},
		{"ReceiptStats", qReceiptStats, []any{hour}},
	} {
		// Six calls: a session's PL/pgSQL statement may be given its
		// generic plan from the sixth.
		var scans int64
		for i := 0; i < 6; i++ {
			scans += xactSeqScans(t, b, c.query, c.args...)
		}
		if scans != 0 {
			t.Errorf("%s over a month whose rows all fall in its window read a ledger table sequentially %d times in 6 calls, want 0",
				c.name, scans)
		}
	}
}
