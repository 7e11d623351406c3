package ledger

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// statsRow is one answer of owed_ledger_stats_rows or
// owed_ledger_stats_minutes.
type statsRow struct {
	delivered, expired, failed, skipped, cancelled int64
	p50, p95, max                                  float64
	duplicateRows, possibleDuplicates              int64
}

func readStats(t *testing.T, b *bundle, fn string, since time.Time) statsRow {
	t.Helper()
	var s statsRow
	if err := b.db.Owner.QueryRow(`SELECT * FROM `+fn+`($1)`, since).Scan(&s.delivered, &s.expired, &s.failed,
		&s.skipped, &s.cancelled, &s.p50, &s.p95, &s.max, &s.duplicateRows, &s.possibleDuplicates); err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
	return s
}

// The per-minute counters (owed_ledger_minutes, kept by the statements
// that settle rows and insert attempts) answer what the rows answer, for
// windows that start anywhere within a minute: the same counts of every
// final state, the same maximum lag and duplicate counts, and percentiles
// within one lag bucket (19%) of percentile_cont's. The rows settle by
// every path a counter must follow: inserted settled, settled by an
// update, cancelled through the API in a tenant's scope, and a failed row
// redriven (it leaves its minute) and settled again.
func TestStatsFromMinutesMatchTheRows(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			// Two days of settled rows, one every 20 seconds, inserted
			// settled; delivered with lags from 0 to about 3 minutes.
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state,
			        settled_at, delivered_at, payload, created_at)
			 SELECT 't' || (g % 7), 'r' || g, 'sms', 'k', 'ref' || g, s - lag,
			        (ARRAY['delivered', 'delivered', 'delivered', 'expired', 'failed', 'skipped', 'cancelled'])[g % 7 + 1],
			        s, CASE WHEN g % 7 < 3 THEN s END, '{}', s - lag - interval '1 minute'
			   FROM generate_series(1, 8640) g,
			        LATERAL (SELECT $1::timestamptz - g * interval '20 seconds' AS s,
			                        ((g * 37) % 1800) * interval '100 milliseconds' + (g % 5) * interval '1 millisecond'
			                          AS lag) x`,
			// Rows inserted owed, then settled by an update.
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload, created_at)
			 SELECT 'u' || (g % 3), 'owed' || g, 'sms', 'k', 'owed' || g, $1::timestamptz - g * interval '7 minutes',
			        '{}', $1::timestamptz - interval '3 days'
			   FROM generate_series(1, 300) g`,
			`UPDATE owed_notifications
			    SET state = CASE WHEN id % 4 = 0 THEN 'failed' ELSE 'delivered' END,
			        settled_at = due_at + (id % 50) * interval '1 second',
			        delivered_at = CASE WHEN id % 4 = 0 THEN NULL ELSE due_at + (id % 50) * interval '1 second' END
			  WHERE ref_id LIKE 'owed%' AND id % 3 <> 0`,
			// Each delivered row's accepted attempt; a tenth accepted twice,
			// and every eleventh flagged a possible duplicate.
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
			        finished_at, outcome, possible_duplicate)
			 SELECT id, tenant_id, 1, 'sandbox', delivered_at, delivered_at, 'accepted', id % 11 = 0
			   FROM owed_notifications WHERE state = 'delivered'`,
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
			        finished_at, outcome, possible_duplicate)
			 SELECT id, tenant_id, 2, 'sandbox', delivered_at, delivered_at + interval '3 seconds', 'accepted', true
			   FROM owed_notifications WHERE state = 'delivered' AND id % 10 = 0`,
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
	// A cancel through the API (an update in the tenant's scope, as the
	// runtime role), and an operator's redrive of a failed row, which
	// takes it off its minute, then its settle again.
	mustSchedule(t, b, "acme", row("ann", "c-1", b.now.Add(time.Hour)))
	if _, err := b.l.Cancel(ctx, "acme", "follow_up", "c-1"); err != nil {
		t.Fatal(err)
	}
	var failed int64
	var tenant string
	if err := b.db.Owner.QueryRow(`SELECT id, tenant_id FROM owed_notifications WHERE state = 'failed'
	    AND settled_at > $1::timestamptz - interval '2 hours' ORDER BY id LIMIT 1`, b.now).Scan(&failed, &tenant); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.Redrive(ctx, tenant, failed); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`UPDATE owed_notifications SET state = 'skipped', settled_at = $2
	    WHERE id = $1`, failed, b.now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}

	var counters int64
	if err := b.db.Owner.QueryRow(`SELECT count(*) FROM owed_ledger_minutes`).Scan(&counters); err != nil || counters == 0 {
		t.Fatalf("the settles wrote %d counter rows (%v)", counters, err)
	}
	hoursSumTheMinutes(t, b)
	for i, since := range []time.Time{
		b.now.Add(-25*time.Hour + 17*time.Second),
		b.now.Add(-3 * time.Hour),
		b.now.Add(-90 * time.Minute).Truncate(time.Minute),
		b.now.Add(-7 * 24 * time.Hour),
		// The same, on a ledger whose hours were summed from five hours
		// ago (owed_ledger_minutes_from.hours): the minutes before then
		// are read instead.
		b.now.Add(-25*time.Hour + 17*time.Second),
		b.now.Add(-3 * time.Hour),
		b.now.Add(-7 * 24 * time.Hour),
	} {
		if i == 4 {
			hoursFrom(t, b, b.now.Add(-5*time.Hour))
		}
		rows, minutes := readStats(t, b, "owed_ledger_stats_rows", since), readStats(t, b, "owed_ledger_stats_minutes", since)
		if rows.delivered == 0 || rows.cancelled == 0 || rows.duplicateRows == 0 {
			t.Fatalf("since %s: the rows say %+v; the fixture settles too little", since, rows)
		}
		exact := rows
		exact.p50, exact.p95 = minutes.p50, minutes.p95
		if minutes != exact {
			t.Errorf("since %s: the counters say %+v, the rows %+v", since, minutes, rows)
		}
		// Stats asks owed_ledger_stats, which reads a window this long
		// (the database's clock is months past the test's) from the
		// counters.
		st, err := b.l.Stats(ctx, since)
		if err != nil || st.Delivered != minutes.delivered || st.Cancelled != minutes.cancelled ||
			st.LagP95 != secondsToDuration(minutes.p95) || st.DuplicateRows != minutes.duplicateRows {
			t.Errorf("since %s: Stats answered %+v (%v), want the counters' %+v", since, st, err, minutes)
		}
		for _, p := range []struct {
			name       string
			rows, mins float64
		}{{"p50", rows.p50, minutes.p50}, {"p95", rows.p95, minutes.p95}} {
			if math.Abs(p.mins-p.rows) > 0.19*p.rows+0.001 {
				t.Errorf("since %s: lag %s from the counters %.4fs, from the rows %.4fs: more than a bucket apart",
					since, p.name, p.mins, p.rows)
			}
		}
	}
}

// receiptStatsRow is one answer of owed_ledger_receipt_stats_rows or
// owed_ledger_receipt_stats_minutes.
type receiptStatsRow struct{ accepted, delivered, bounced, failed, unconfirmed int64 }

func readReceiptStats(t *testing.T, b *bundle, fn string, since time.Time) receiptStatsRow {
	t.Helper()
	var s receiptStatsRow
	if err := b.db.Owner.QueryRow(`SELECT * FROM `+fn+`($1)`, since).Scan(&s.accepted, &s.delivered, &s.bounced,
		&s.failed, &s.unconfirmed); err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
	return s
}

// The receipt stats of a long window (owed_ledger_receipt_stats_minutes,
// from the per-minute counters) answer what the rows answer
// (owed_ledger_receipt_stats_rows), exactly, for windows that start
// anywhere within a minute, whichever way a row got its receipt's word:
// inserted with it, a receipt recorded through the API after the row
// settled (an interim word, then a final one that moves the row's counter
// from none to delivered, and a bounce), a word changed by an update of
// many rows, and rows settled by an update after their receipt. A window
// reaching before the receipts' words were counted
// (owed_ledger_minutes_from.receipts) reads the rows for that part.
func TestReceiptStatsFromMinutesMatchTheRows(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			// Two days of settled rows, one every 20 seconds, inserted
			// settled; five in six delivered, with every receipt word.
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state, settled_at,
			        delivered_at, receipt_status, payload, created_at, provider, provider_message_id)
			 SELECT 't' || (g % 7), 'r' || g, 'sms', 'k', 'ref' || g, s - interval '2 seconds',
			        CASE WHEN g % 6 = 0 THEN 'expired' ELSE 'delivered' END, s, CASE WHEN g % 6 <> 0 THEN s END,
			        CASE WHEN g % 6 <> 0 THEN (ARRAY[NULL, 'sent', 'deferred', 'delivered', 'bounced', 'failed'])[g % 5 + 1] END,
			        '{}', s - interval '1 minute', 'twilio:AC', 'SM' || g
			   FROM generate_series(1, 8640) g, LATERAL (SELECT $1::timestamptz - g * interval '20 seconds' AS s) x`,
			// Rows inserted owed with an interim word, then settled
			// delivered by an update.
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, receipt_status,
			        payload, created_at)
			 SELECT 'u' || (g % 3), 'owed' || g, 'sms', 'k', 'owed' || g, $1::timestamptz - g * interval '7 minutes',
			        CASE WHEN g % 2 = 0 THEN 'delivered' END, '{}', $1::timestamptz - interval '3 days'
			   FROM generate_series(1, 300) g`,
			`UPDATE owed_notifications SET state = 'delivered', settled_at = due_at + interval '1 second',
			        delivered_at = due_at + interval '1 second'
			  WHERE ref_id LIKE 'owed%' AND id % 3 <> 0`,
			// An operator's correction of many rows' words at once.
			`UPDATE owed_notifications SET receipt_status = 'failed' WHERE ref_id LIKE 'ref%' AND id % 13 = 0`,
			// Each delivered row's accepted send, for the callbacks below.
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
			        finished_at, outcome, provider_message_id)
			 SELECT id, tenant_id, 1, provider, delivered_at, delivered_at, 'accepted', provider_message_id
			   FROM owed_notifications WHERE state = 'delivered' AND provider_message_id IS NOT NULL`,
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
	// Callbacks on rows that had no word: sent, then delivered; and a
	// bounce.
	var ids []string
	rows, err := b.db.Owner.Query(`SELECT provider_message_id FROM owed_notifications
	    WHERE state = 'delivered' AND receipt_status IS NULL AND provider_message_id IS NOT NULL ORDER BY id LIMIT 40`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil || len(ids) < 40 {
		t.Fatalf("found %d rows without a word (%v)", len(ids), err)
	}
	for i, id := range ids {
		words := []ReceiptStatus{"sent", "delivered"}
		if i%4 == 0 {
			words = []ReceiptStatus{"bounced"}
		}
		for _, w := range words {
			if res, err := b.l.RecordReceipt(ctx, Receipt{Provider: "twilio", ProviderMessageID: id, Status: w}); err != nil ||
				!res.Recorded {
				t.Fatalf("receipt %s for %s: %+v %v", w, id, res, err)
			}
		}
	}

	compare := func(when string) {
		t.Helper()
		for _, since := range []time.Time{
			b.now.Add(-25*time.Hour + 17*time.Second),
			b.now.Add(-3 * time.Hour),
			b.now.Add(-90 * time.Minute).Truncate(time.Minute),
			b.now.Add(-7 * 24 * time.Hour),
		} {
			rows := readReceiptStats(t, b, "owed_ledger_receipt_stats_rows", since)
			minutes := readReceiptStats(t, b, "owed_ledger_receipt_stats_minutes", since)
			if rows.delivered == 0 || rows.bounced == 0 || rows.failed == 0 || rows.unconfirmed == 0 {
				t.Fatalf("%s, since %s: the rows say %+v; the fixture confirms too little", when, since, rows)
			}
			if minutes != rows {
				t.Errorf("%s, since %s: the counters say %+v, the rows %+v", when, since, minutes, rows)
			}
			// ReceiptStats asks owed_ledger_receipt_stats, which reads a
			// window this long (the database's clock is past the test's)
			// from the counters.
			st, err := b.l.ReceiptStats(ctx, since)
			if err != nil || st.Accepted != minutes.accepted || st.ConfirmedDelivered != minutes.delivered ||
				st.Bounced != minutes.bounced || st.Failed != minutes.failed || st.Unconfirmed != minutes.unconfirmed {
				t.Errorf("%s, since %s: ReceiptStats answered %+v (%v), want the counters' %+v", when, since, st, err,
					minutes)
			}
		}
	}
	hoursSumTheMinutes(t, b)
	compare("counted from the start")

	// A ledger whose receipts' words were counted from five hours ago:
	// the counters before then hold none, and the window reads the rows.
	if _, err := b.db.Owner.Exec(`UPDATE owed_ledger_minutes_from SET receipts = $1`,
		b.now.Add(-5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`DELETE FROM owed_ledger_minutes WHERE outcome LIKE 'receipt\_%' AND minute < $1`,
		b.now.Add(-5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	compare("counted from five hours ago")
	hoursFrom(t, b, b.now.Add(-3*time.Hour))
	compare("counted from five hours ago, summed by hour from three")
}

// hoursSumTheMinutes fails t unless owed_ledger_hours holds, for every
// hour, word and bucket, the sum of owed_ledger_minutes' counts over the
// hour's minutes and tenants.
func hoursSumTheMinutes(t *testing.T, b *bundle) {
	t.Helper()
	var differ, hours int64
	if err := b.db.Owner.QueryRow(`
	    WITH m AS (SELECT date_trunc('hour', minute) AS hour, outcome, bucket, sum(settled) AS n,
	                      min(lag_min) AS lo, max(lag_max) AS hi
	                 FROM owed_ledger_minutes GROUP BY 1, 2, 3),
	         h AS (SELECT hour, outcome, bucket, sum(settled) AS n, min(lag_min) AS lo, max(lag_max) AS hi
	                 FROM owed_ledger_hours GROUP BY 1, 2, 3)
	    SELECT count(*) FILTER (WHERE m.n IS DISTINCT FROM h.n AND coalesce(m.n, 0) + coalesce(h.n, 0) <> 0
	                               OR m.n <> 0 AND (m.lo, m.hi) IS DISTINCT FROM (h.lo, h.hi)),
	           count(h.hour)
	      FROM m FULL JOIN h USING (hour, outcome, bucket)`).Scan(&differ, &hours); err != nil {
		t.Fatal(err)
	}
	if differ != 0 || hours == 0 {
		t.Errorf("%d of %d hourly counters differ from their minutes' sums", differ, hours)
	}
}

// hoursFrom makes b's ledger one whose hourly counters began at from
// (owed_ledger_minutes_from.hours): the hours before it are emptied.
func hoursFrom(t *testing.T, b *bundle, from time.Time) {
	t.Helper()
	for _, q := range []string{`UPDATE owed_ledger_minutes_from SET hours = $1`,
		`DELETE FROM owed_ledger_hours WHERE hour < $1`} {
		if _, err := b.db.Owner.Exec(q, from); err != nil {
			t.Fatal(err)
		}
	}
}

// A long window's stats read the hourly counters for its whole hours and
// the per-minute counters only before the first of them: a day's window
// reads at most an hour of minutes, however many tenants settled rows in
// each. Before owed_ledger_hours, owed_ledger_stats_minutes read every
// minute of the day, one counter per tenant, and at 20 million rows over a
// year (bench/ledgerscale) the day's counters were 14 times those of 1
// million.
func TestLongStatsReadTheHours(t *testing.T) {
	b := setup(t)
	if _, err := b.db.Owner.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at,
	        state, settled_at, delivered_at, receipt_status, payload, created_at)
	    SELECT 't' || (g % 9), 'r' || g, 'sms', 'k', 'ref' || g, s - interval '2 seconds', 'delivered', s, s,
	           CASE WHEN g % 3 = 0 THEN 'delivered' END, '{}', s - interval '1 minute'
	      FROM generate_series(1, 17280) g, LATERAL (SELECT $1::timestamptz - g * interval '10 seconds' AS s) x`,
		b.now); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`ANALYZE owed_ledger_minutes; ANALYZE owed_ledger_hours`); err != nil {
		t.Fatal(err)
	}
	since := b.now.Add(-25*time.Hour + 17*time.Second)
	var hourOfMinutes, dayOfMinutes int64
	if err := b.db.Owner.QueryRow(`SELECT count(*) FILTER (WHERE minute < $1::timestamptz + interval '61 minutes'),
	        count(*) FROM owed_ledger_minutes WHERE minute >= $1`, since).Scan(&hourOfMinutes, &dayOfMinutes); err != nil {
		t.Fatal(err)
	}
	if dayOfMinutes < 20*hourOfMinutes {
		t.Fatalf("the day holds %d minute counters, its first hour %d: the fixture is too thin", dayOfMinutes,
			hourOfMinutes)
	}
	for _, fn := range []string{"owed_ledger_stats_minutes", "owed_ledger_receipt_stats_minutes"} {
		if read := countersRead(t, b, fn, since); read > hourOfMinutes {
			t.Errorf("%s over a day read %d per-minute counters; the window's first hour holds %d (the day %d)",
				fn, read, hourOfMinutes, dayOfMinutes)
		}
	}
}

// countersRead runs the body of fn (a LANGUAGE sql read of the counters)
// with since under EXPLAIN ANALYZE and returns how many rows its plan read
// from owed_ledger_minutes.
func countersRead(t *testing.T, b *bundle, fn string, since time.Time) int64 {
	t.Helper()
	conn, err := b.db.Owner.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var body string
	if err := conn.QueryRowContext(ctx, `SELECT prosrc FROM pg_proc WHERE proname = $1`, fn).Scan(&body); err != nil {
		t.Fatalf("find %s: %v", fn, err)
	}
	if _, err := conn.ExecContext(ctx, "PREPARE p_read (timestamptz) AS "+body); err != nil {
		t.Fatalf("prepare %s: %v", fn, err)
	}
	defer conn.ExecContext(ctx, "DEALLOCATE p_read")
	var plan string
	if err := conn.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE p_read ("+literal(since)+")").
		Scan(&plan); err != nil {
		t.Fatalf("explain %s: %v", fn, err)
	}
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		t.Fatalf("%s's plan: %v", fn, err)
	}
	var read float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Relation Name"] == "owed_ledger_minutes" {
			rows, _ := n["Actual Rows"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			read += rows * loops
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(doc[0]["Plan"].(map[string]any))
	return int64(read)
}

// A long window's counter reads are cheap in the planner's eyes too, so
// Postgres does not JIT-compile them: on bench/ledgerscale's 20M ledger,
// whose counters held a row per settled row, a day's read took 0.17 s and
// its compilation 1.3 s more. The planner had guessed 1,540 rows for the
// one-row owed_ledger_minutes_from (never analyzed) and a third of the
// counters for edges it cannot know; the reads now take the table's
// values as scalar subqueries and bound the minutes by the window's start
// as well. Here: 2 million minute counters (38 a minute, one per tenant
// and row), and each read's plan must cost less than jit_above_cost.
func TestLongStatsAreNotCompiled(t *testing.T) {
	b := setup(t)
	if _, err := b.db.Owner.Exec(`INSERT INTO owed_ledger_minutes (minute, tenant_id, outcome, bucket, slot, settled,
	        lag_min, lag_max)
	    SELECT date_trunc('minute', $1::timestamptz) - (g / 38) * interval '1 minute', 't' || (g % 50), 'delivered',
	           20, 0, 1, 2, 2
	      FROM generate_series(1, 2000000) g`, b.now); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`ANALYZE owed_ledger_minutes`); err != nil {
		t.Fatal(err)
	}
	var jitAbove float64
	if err := b.db.Owner.QueryRow(`SELECT current_setting('jit_above_cost')::float8`).Scan(&jitAbove); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"owed_ledger_stats_minutes", "owed_ledger_receipt_stats_minutes"} {
		plan := explainBody(t, b, fn, b.now.Add(-24*time.Hour))
		var doc []map[string]any
		if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
			t.Fatalf("%s's plan: %v", fn, err)
		}
		if cost, _ := doc[0]["Plan"].(map[string]any)["Total Cost"].(float64); cost >= jitAbove {
			t.Errorf("%s over a day is planned at cost %.0f, at least jit_above_cost (%.0f): it would be compiled",
				fn, cost, jitAbove)
		}
	}
}
