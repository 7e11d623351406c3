package ledger

import (
	"database/sql"
	"encoding/json"
	"testing"
	"time"
)

func TestPendingSlicesFollowTheirCursorThroughOneDueTime(t *testing.T) {
	b := setup(t)
	// An event fanned out to every subscriber: 2,000 rows, one due time.
	seedOwed(t, b, 2000, b.now.Add(-time.Minute))
	var after Cursor
	seen := map[int64]bool{}
	var last int64
	for {
		got, err := b.l.Lease(ctx, LeaseParams{Limit: 300, For: time.Hour, Slice: SlicePending, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, r := range got {
			if seen[r.ID] || r.ID < last {
				t.Fatalf("row %d leased twice or out of order (after %d)", r.ID, last)
			}
			seen[r.ID], last = true, r.ID
		}
		after = Cursor{DueAt: got[len(got)-1].DueAt, ID: got[len(got)-1].ID}
	}
	if len(seen) != 2000 {
		t.Fatalf("the slices leased %d rows, want all 2000", len(seen))
	}

	// The cursor is where the index scan starts: 100 more rows of the same
	// due time, after the 2,000 leased ones, cost no step over those.
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload)
		    SELECT 'bulk', 'more' || g, 'sms', 'k', 'ref' || g, $1, '{"text":"x"}' FROM generate_series(1, 100) g`,
			b.now.Add(-time.Minute)); err != nil {
			return err
		}
		_, err := tx.Exec(`ANALYZE owed_notifications`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	plan, _, err := b.l.ExplainLease(ctx, LeaseParams{Limit: 300, For: time.Hour, Slice: SlicePending, After: after})
	if err != nil {
		t.Fatal(err)
	}
	if removed := rowsRemovedByFilter(t, plan); removed > 100 {
		t.Errorf("the slice after the cursor stepped over %.0f rows, want the 2,000 leased ones skipped by the index range:\n%s",
			removed, plan)
	}
}

// rowsRemovedByFilter adds up "Rows Removed by Filter" over an EXPLAIN
// (ANALYZE, FORMAT JSON) plan's nodes.
func rowsRemovedByFilter(t *testing.T, plan string) float64 {
	t.Helper()
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		t.Fatalf("EXPLAIN output: %v\n%s", err, plan)
	}
	var walk func(n map[string]any) float64
	walk = func(n map[string]any) float64 {
		sum, _ := n["Rows Removed by Filter"].(float64)
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				sum += walk(m)
			}
		}
		return sum
	}
	return walk(doc[0]["Plan"].(map[string]any))
}

func TestSurveyAndTheTwoSlicesSeeWhatIsHeldAndWhatWaits(t *testing.T) {
	b := setup(t)
	seedOwed(t, b, 5, b.now.Add(-time.Minute))
	// Beyond the publish-ahead horizon: never counted, never leased.
	mustSchedule(t, b, "acme", row("later", "L-1", b.now.Add(time.Hour)))
	survey := func(upTo int) Survey {
		t.Helper()
		s, err := b.l.Survey(ctx, time.Minute, upTo)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := survey(100); s.Outstanding != 0 || !s.Pending || s.Requeues || s.OldestOwedAge != time.Minute {
		t.Errorf("before any lease: %+v, want nothing held, pending rows waiting, oldest owed a minute", s)
	}
	if got, err := b.l.Lease(ctx, LeaseParams{Limit: 3, For: 10 * time.Minute, Ahead: time.Minute, Slice: SlicePending}); err != nil || len(got) != 3 {
		t.Fatalf("leased %d (%v), want 3", len(got), err)
	}
	if s := survey(100); s.Outstanding != 3 || !s.Pending || s.Requeues {
		t.Errorf("after leasing 3: %+v, want 3 held and 2 pending", s)
	}
	if s := survey(2); s.Outstanding != 2 {
		t.Errorf("counted up to 2: %+v, want the count to stop at its limit", s)
	}

	// The sweep that leased them died: their leases run out.
	b.advance(11 * time.Minute)
	if s := survey(100); s.Outstanding != 0 || !s.Pending || !s.Requeues {
		t.Errorf("leases run out: %+v, want nothing held, both kinds waiting", s)
	}
	requeued, err := b.l.Lease(ctx, LeaseParams{Limit: 100, For: time.Minute, Ahead: time.Minute, Slice: SliceRequeue})
	if err != nil || len(requeued) != 3 {
		t.Fatalf("requeue slice leased %d (%v), want the 3 whose lease ran out", len(requeued), err)
	}
	pending, err := b.l.Lease(ctx, LeaseParams{Limit: 100, For: time.Minute, Ahead: time.Minute, Slice: SlicePending})
	if err != nil || len(pending) != 2 {
		t.Fatalf("pending slice leased %d (%v), want the 2 never leased", len(pending), err)
	}
	for _, r := range requeued {
		for _, p := range pending {
			if r.ID == p.ID {
				t.Errorf("row %d leased by both slices", r.ID)
			}
		}
	}
	if s := survey(100); s.Outstanding != 5 || s.Pending || s.Requeues {
		t.Errorf("all leased: %+v, want 5 held and nothing waiting", s)
	}
}

func TestSurveyRefusesAnUnboundedCount(t *testing.T) {
	b := setup(t)
	if _, err := b.l.Survey(ctx, time.Minute, 0); err == nil {
		t.Error("Survey with a count limit of 0 succeeded, want an error")
	}
}
