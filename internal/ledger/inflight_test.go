package ledger

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// The count of rows in flight that every lease slice and survey makes
// (owed_sweep_in_flight, sweep.sql) reads the paused tenants once per
// statement, not once per row in flight. The lease runs as a prepared
// statement with a generic plan, in which owed_tenant_pauses was the
// inner side of a nested loop: one probe of its key per row in flight,
// about 2,000 per slice in bench/e2e.
func TestInFlightCountReadsThePausesOncePerStatement(t *testing.T) {
	b := setup(t)
	due := b.now.Add(-time.Second)
	for tenant, n := range map[string]int{"t0": 3, "t1": 2, "t2": 1} {
		var rows []NewNotification
		for i := range n {
			rows = append(rows, row(fmt.Sprintf("r%d", i), fmt.Sprintf("ref-%d", i), due))
		}
		mustSchedule(t, b, tenant, rows...)
	}
	p := LeaseParams{Limit: 10, For: time.Minute, Ahead: time.Minute, RequeueAfter: 10 * time.Minute}
	if _, err := b.db.App.ExecContext(ctx, qLeaseFair, p.leaseArgs(b.now)...); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.ExecContext(ctx, `INSERT INTO owed_tenant_pauses (tenant_id, reason, actor, paused_at)
		VALUES ('t2', 'test', 'test', $1)`, b.now); err != nil {
		t.Fatal(err)
	}
	args := []any{b.now, b.now.Add(time.Minute), b.now.Add(time.Hour), "{}", "{}", 100}

	plan := explainBodyPlanned(t, b, true, "owed_sweep_in_flight", args...)
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		t.Fatalf("EXPLAIN output: %v\n%s", err, plan)
	}
	// How each read of owed_tenant_pauses is reached: once per statement
	// only below an init plan.
	var reads []string
	var walk func(n map[string]any, once bool)
	walk = func(n map[string]any, once bool) {
		once = once || n["Parent Relationship"] == "InitPlan"
		if n["Relation Name"] == "owed_tenant_pauses" {
			reads = append(reads, fmt.Sprintf("%s (once: %t)", n["Node Type"], once))
			if !once {
				t.Errorf("owed_tenant_pauses is read by a %s outside an init plan, once per row in flight:\n%s",
					n["Node Type"], plan)
			}
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m, once)
			}
		}
	}
	walk(doc[0]["Plan"].(map[string]any), false)
	if len(reads) == 0 {
		t.Errorf("the plan reads no owed_tenant_pauses, so a paused tenant's rows would count:\n%s", plan)
	}

	// The counts are the same: each tenant's rows due by now, the paused
	// tenant's left out.
	res, err := b.db.Owner.QueryContext(ctx, `SELECT * FROM owed_sweep_in_flight($1, $2, $3, $4, $5, $6)`, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	got := map[string]string{}
	for res.Next() {
		var tenant string
		var account int
		var dueNow, total int64
		if err := res.Scan(&tenant, &account, &dueNow, &total); err != nil {
			t.Fatal(err)
		}
		got[tenant] = fmt.Sprintf("account %d, %d due now of %d", account, dueNow, total)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"t0": "account 1, 3 due now of 3", "t1": "account 1, 2 due now of 2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("in flight = %v, want %v", got, want)
	}
}
