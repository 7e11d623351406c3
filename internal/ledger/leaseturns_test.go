package ledger

import (
	"fmt"
	"testing"
	"time"
)

// Lease slices take turns (owed_sweep_lease_fair_queued, sweep.sql): a
// slice that starts while another's transaction is open waits for it, and
// then reads what it left, so it never re-checks a row the other took.
// Concurrent slices picked the same oldest rows; each one the other had
// leased and committed since the statement began was re-checked by
// PostgreSQL's EvalPlanQual, which built a second copy of the slice's
// whole plan: 27 % of the sweeper's CPU in a 40,000-row bench/e2e run,
// where a cron run and a top-up overlapped.
func TestLeaseSlicesTakeTurns(t *testing.T) {
	b := setup(t)
	rows := make([]NewNotification, 20)
	for i := range rows {
		rows[i] = row(fmt.Sprintf("r%d", i), fmt.Sprintf("ref-%d", i), b.now.Add(-time.Second))
	}
	mustSchedule(t, b, "t0", rows...)
	p := LeaseParams{Limit: 10, For: time.Minute, Ahead: time.Minute, RequeueAfter: 10 * time.Minute}

	// The first slice leases ten rows and keeps its transaction open.
	tx, err := b.db.App.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	first := map[int64]bool{}
	res, err := tx.Query(qLeaseFair, p.leaseArgs(b.now)...)
	if err != nil {
		t.Fatal(err)
	}
	for res.Next() {
		var id *int64
		vals := make([]any, 15)
		vals[0] = &id
		for i := 1; i < len(vals); i++ {
			vals[i] = new(any)
		}
		if err := res.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		if id != nil {
			first[*id] = true
		}
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	res.Close()
	if len(first) != 10 {
		t.Fatalf("the first slice leased %d rows, want 10", len(first))
	}

	// The second slice, on its own connection, waits for the first.
	type answer struct {
		rows []Leased
		err  error
	}
	second := make(chan answer, 1)
	go func() {
		r, err := b.l.Lease(ctx, p)
		second <- answer{r, err}
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case a := <-second:
			t.Fatalf("the second slice answered (%d rows, %v) while the first's transaction was open: "+
				"the slices did not take turns", len(a.rows), a.err)
		default:
		}
		var waiting int
		if err := b.db.App.QueryRow(`SELECT count(*) FROM pg_stat_activity
		    WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%owed_sweep_lease_fair_queued%'`).
			Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second slice neither answered nor waited for the first within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	a := <-second
	if a.err != nil {
		t.Fatal(a.err)
	}
	// Once the first committed, the second read what it left: the other
	// ten rows, none of the first's.
	if len(a.rows) != 10 {
		t.Errorf("the second slice leased %d rows, want the 10 the first left", len(a.rows))
	}
	for _, r := range a.rows {
		if first[r.ID] {
			t.Errorf("row %d was leased by both slices", r.ID)
		}
	}
}
