package ledger

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
)

// The worker's batch statements (owed_claim_many, owed_extend_many,
// owed_settle_delivered_many) read each row of their batch by its key,
// whatever the ledger holds. PostgreSQL prices a probe of the key once per
// month partition, not knowing that all but one are skipped when the
// statement runs, and it chose instead to read every row of the batch's
// tenants through the tenant index and hash them: in bench/e2e each claim
// and settle of about 26 rows read all 20,000 rows of the ledger, and on
// bench/ledgerscale's 1M ledger a claim of 1,000 rows read 20,333. Here a
// batch of five rows of five tenants, on a ledger of 95,400 rows, may read
// at most a few rows of the ledger's tables per row of the batch.
func TestWorkerBatchesReadTheirRowsByKey(t *testing.T) {
	b := setup(t)
	// 2,000 rows of two tenants, scheduled a thousand at a time (as
	// bench/e2e schedules them: a batch a tenant), due now and leased, as
	// the sweep leaves them for the workers; the ledger is not analyzed
	// yet (a new install, a new month's partition: bench/e2e's ledger too).
	var leased []Leased
	for _, tenant := range []string{"t0", "t1"} {
		rows := make([]NewNotification, 1000)
		for i := range rows {
			rows[i] = row(fmt.Sprintf("r%d", i), fmt.Sprintf("ref-%d", i), b.now.Add(-time.Second))
		}
		mustSchedule(t, b, tenant, rows...)
	}
	for len(leased) < 2000 {
		got, err := b.l.Lease(ctx, LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute,
			RequeueAfter: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatalf("leased %d rows of 2,000, then none", len(leased))
		}
		leased = append(leased, got...)
	}
	tx, err := b.db.App.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// read is what the transaction has read of the ledger's tables so
	// far: the rows its sequential scans read and those its index scans
	// fetched (pg_stat_xact_user_tables, the backend's own counts).
	read := func() int64 {
		var n int64
		if err := tx.QueryRow(`SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)
		    FROM pg_stat_xact_user_tables
		    WHERE relname LIKE 'owed\_notifications%' OR relname LIKE 'owed\_notification\_attempts%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// each runs one batch statement and answers how many rows it read and
	// the named column of every row it answered.
	each := func(name, query, column string, args ...any) (int64, []any) {
		t.Helper()
		before := read()
		rows, err := tx.Query(query, args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		var got []any
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, c := range cols {
				if c == column {
					got = append(got, vals[i])
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rows.Close()
		return read() - before, got
	}
	const size = 5
	const most = size * 8 // rows of the ledger's tables a statement may read for a batch
	most3 := map[string]int64{}
	// Eight batches, so the statements inside the functions are planned
	// with the batch's values (the first five) and then generically.
	for round := 0; round < 8; round++ {
		var in batchRows
		var dues []string
		for _, r := range leased[round*size : (round+1)*size] {
			in.add(len(in.id), r.Tenant, r.ID)
			dues = append(dues, sqlTime(r.DueAt))
		}
		if len(in.id) != size {
			t.Fatalf("round %d: %d owed rows left, want %d", round, len(in.id), size)
		}
		readClaim, seqs := each("owed_claim_many", qClaimMany, "claim_seq", in.idxArg(), pq.Array(in.tenant),
			pq.Array(in.id), pq.Array(dues), true, b.now, seconds(time.Minute), seconds(time.Hour))
		if len(seqs) != size {
			t.Fatalf("owed_claim_many answered %d rows, want %d", len(seqs), size)
		}
		claimSeqs := make([]int64, len(seqs))
		for i, s := range seqs {
			n, ok := s.(int64)
			if !ok || n < 1 {
				t.Fatalf("claim %d answered claim_seq %v, want a token", i, s)
			}
			claimSeqs[i] = n
		}
		readExtend, held := each("owed_extend_many", qExtendMany, "held", in.idxArg(), pq.Array(in.tenant),
			pq.Array(in.id), pq.Array(claimSeqs), true, b.now, seconds(time.Minute), seconds(30*time.Second))
		for i, h := range held {
			if h != true {
				t.Errorf("the check before send %d answered held %v, want true", i, h)
			}
		}
		started := make([]string, size)
		providers := make([]string, size)
		messages := make([]sql.NullString, size)
		statuses := make([]sql.NullInt64, size)
		dup := make([]bool, size)
		for i := range started {
			started[i] = sqlTime(b.now)
			providers[i] = "sandbox"
			messages[i] = sql.NullString{String: "m" + in.tenant[i], Valid: true}
			statuses[i] = sql.NullInt64{Int64: 200, Valid: true}
		}
		readSettle, changed := each("owed_settle_delivered_many", qSettleDeliveredMany, "changed", in.idxArg(),
			pq.Array(in.tenant), pq.Array(in.id), pq.Array(claimSeqs), pq.Array(providers), pq.Array(started),
			pq.Array(messages), pq.Array(statuses), pq.Array(dup), b.now)
		if len(changed) != size {
			t.Fatalf("owed_settle_delivered_many answered %d rows, want %d", len(changed), size)
		}
		for i, c := range changed {
			if c != true {
				t.Errorf("the settle of send %d answered changed %v, want true", i, c)
			}
		}
		for name, n := range map[string]int64{"owed_claim_many": readClaim, "owed_extend_many": readExtend,
			"owed_settle_delivered_many": readSettle} {
			most3[name] = max(most3[name], n)
			if n > most {
				t.Errorf("round %d: %s read %d rows of the ledger's tables for a batch of %d, want at most %d: "+
					"it did not read its rows by key", round, name, n, size, most)
			}
		}
	}
	t.Logf("most rows read for a batch of %d: %v", size, most3)
}

// The runtime role's tenant policy reads the tenant scope once per
// statement (owed_tenant_scope, under a sub-select: an init plan), not for
// every row it looks at. Inlined as a function of the row's tenant, the
// policy parsed owed.tenant_ids, the worker batches' array literal of
// tenants, once per row: a tenth of a batch's CPU at 200 rows a batch.
// Every condition the plan tests per row (a filter, an index condition)
// must compare the row's tenant with the init plan's answer; only the
// init plan may read the settings.
func TestTenantPolicyReadsTheScopeOncePerStatement(t *testing.T) {
	b := setup(t)
	mustSchedule(t, b, "t0", row("r0", "ref-0", b.now), row("r1", "ref-1", b.now))
	mustSchedule(t, b, "t1", row("r0", "ref-0", b.now))
	tx, err := b.db.App.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT set_config('owed.tenant_ids', '{t0,t1}', true)`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT id FROM owed_notifications WHERE recipient <> ''`,
		`UPDATE owed_notifications SET updated_at = updated_at WHERE recipient <> ''`,
		`SELECT address FROM owed_undeliverable WHERE address <> ''`,
		`SELECT id FROM owed_event_payloads WHERE id > 0`,
	} {
		rows, err := tx.Query(`EXPLAIN (VERBOSE, COSTS OFF) ` + q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		initPlan, perRow := false, false
		for _, line := range plan {
			if strings.Contains(line, "InitPlan") {
				initPlan = true
			}
			for _, cond := range []string{"Filter:", "Index Cond:", "Recheck Cond:"} {
				if strings.Contains(line, cond) && strings.Contains(line, "current_setting") {
					perRow = true
				}
			}
		}
		if perRow || !initPlan {
			t.Errorf("%s: the tenant policy reads the settings per row, want once (an init plan):\n%s",
				q, strings.Join(plan, "\n"))
		}
	}
	// The scope is still the tenants named: both of them, one, and none
	// when the set is emptied.
	for _, c := range []struct {
		scope string
		want  int
	}{{"{t0,t1}", 3}, {"{t1}", 1}, {"", 0}} {
		var n int
		if _, err := tx.Exec(`SELECT set_config('owed.tenant_ids', $1, true)`, c.scope); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("a scope of %q sees %d rows, want %d", c.scope, n, c.want)
		}
	}
}
