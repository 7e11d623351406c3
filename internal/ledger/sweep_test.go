package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lib/pq"
)

// A fan-out of 2,000 rows of one due time is leased slice by slice, each
// row once, in order, and a slice never steps over the rows leased before
// it: only pending rows are in the index the lease reads.
func TestPendingSlicesNeverStepOverLeasedRows(t *testing.T) {
	b := setup(t)
	seedOwed(t, b, 2000, b.now.Add(-time.Minute))
	seen := map[int64]bool{}
	var last int64
	for {
		got, err := b.l.Lease(ctx, LeaseParams{Limit: 300, For: time.Hour, Slice: SlicePending})
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
	}
	if len(seen) != 2000 {
		t.Fatalf("the slices leased %d rows, want all 2000", len(seen))
	}

	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload,
		        created_at)
		    SELECT 'bulk', 'more' || g, 'sms', 'k', 'ref' || g, $1, '{"text":"x"}', $2 FROM generate_series(1, 100) g`,
			b.now.Add(-time.Minute), b.now); err != nil {
			return err
		}
		_, err := tx.Exec(`ANALYZE owed_notifications`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	plan, _, err := b.l.ExplainLease(ctx, LeaseParams{Limit: 300, For: time.Hour, Slice: SlicePending})
	if err != nil {
		t.Fatal(err)
	}
	if removed := rowsRemovedByFilter(t, plan); removed > 100 {
		t.Errorf("the next slice stepped over %.0f rows, want the 2,000 leased ones out of its index:\n%s", removed, plan)
	}
}

// rowsRemovedByFilter adds up "Rows Removed by Filter" over the nodes of
// an EXPLAIN (ANALYZE, FORMAT JSON) plan that read owed_notifications.
func rowsRemovedByFilter(t *testing.T, plan string) float64 {
	t.Helper()
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		t.Fatalf("EXPLAIN output: %v\n%s", err, plan)
	}
	var walk func(n map[string]any) float64
	walk = func(n map[string]any) float64 {
		var sum float64
		if n["Relation Name"] == "owed_notifications" {
			sum, _ = n["Rows Removed by Filter"].(float64)
		}
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
		s, err := b.l.Survey(ctx, time.Minute, Sharing{}, upTo)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := survey(100); s.InFlight[0] != 0 || !s.Pending || s.Requeues || s.OldestOwedAge != time.Minute {
		t.Errorf("before any lease: %+v, want nothing held, pending rows waiting, oldest owed a minute", s)
	}
	if got, err := b.l.Lease(ctx, LeaseParams{Limit: 3, For: 10 * time.Minute, Ahead: time.Minute, Slice: SlicePending}); err != nil || len(got) != 3 {
		t.Fatalf("leased %d (%v), want 3", len(got), err)
	}
	if s := survey(100); s.InFlight[0] != 3 || !s.Pending || s.Requeues {
		t.Errorf("after leasing 3: %+v, want 3 held and 2 pending", s)
	}
	if s := survey(2); s.InFlight[0] != 2 {
		t.Errorf("counted up to 2: %+v, want the count to stop at its limit", s)
	}

	// The sweep that leased them died: their leases run out.
	b.advance(11 * time.Minute)
	if s := survey(100); s.InFlight[0] != 0 || !s.Pending || !s.Requeues {
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
	if s := survey(100); s.InFlight[0] != 5 || s.Pending || s.Requeues {
		t.Errorf("all leased: %+v, want 5 held and nothing waiting", s)
	}
}

func TestSurveyRefusesAnUnboundedCount(t *testing.T) {
	b := setup(t)
	if _, err := b.l.Survey(ctx, time.Minute, Sharing{}, 0); err == nil {
		t.Error("Survey with a count limit of 0 succeeded, want an error")
	}
}

// insertOwned writes rows as the owner under the bypass, as SQL outside the
// services could (fixtures only): each is tenant, ref, channel, due_at,
// created_at.
func insertOwned(t *testing.T, b *bundle, rows ...[5]any) {
	t.Helper()
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, r := range rows {
			if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at,
			        payload, created_at)
			    VALUES ($1, 'r', $3, 'k', $2, $4, '{"text":"x"}', $5)`, r[0], r[1], r[2], r[3], r[4]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func tenantsOf(got []Leased) []string {
	out := make([]string, len(got))
	for i, r := range got {
		out[i] = r.Tenant
	}
	return out
}

// A slice is dealt round-robin between the tenants with rows owed, each
// tenant's rows oldest owed first: a tenant's 1,000-row backlog takes one
// place in each round, not the whole slice.
func TestASliceIsSharedRoundRobinBetweenTenants(t *testing.T) {
	b := setup(t)
	seedOwed(t, b, 1000, b.now.Add(-time.Hour))
	var few []NewNotification
	for i := 0; i < 3; i++ {
		few = append(few, row(fmt.Sprintf("n%d", i), "N", b.now.Add(-time.Duration(i)*time.Second)))
	}
	mustSchedule(t, b, "nudges", few...)
	got, err := b.l.Lease(ctx, LeaseParams{Limit: 10, For: time.Minute, Slice: SlicePending})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range got {
		if r.Tenant == "nudges" {
			n++
		}
	}
	if len(got) != 10 || n != 3 {
		t.Fatalf("slice of 10 leased %v, want all 3 of the nudges' rows beside 7 of the backlog", tenantsOf(got))
	}
	// The backlog's rows were owed first (written earlier), so the rounds
	// open with it; then the tenants alternate until the nudges have none.
	if want := []string{"bulk", "nudges", "bulk", "nudges", "bulk", "nudges", "bulk"}; fmt.Sprint(tenantsOf(got)[:7]) != fmt.Sprint(want) {
		t.Errorf("slice order %v, want %v…", tenantsOf(got), want)
	}
}

// A row scheduled with a due time long past is owed from when it was
// written: 300 rows due 2000-01-01 written now do not jump the row another
// tenant wrote a minute ago, due now.
func TestAPastDueTimeDoesNotJumpTheLine(t *testing.T) {
	b := setup(t)
	var flood [][5]any
	for i := 0; i < 300; i++ {
		flood = append(flood, [5]any{"flood", fmt.Sprintf("F-%d", i), "sms", time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), b.now})
	}
	insertOwned(t, b, flood...)
	insertOwned(t, b, [5]any{"waiting", "W-1", "sms", b.now, b.now.Add(-time.Minute)})
	got, err := b.l.Lease(ctx, LeaseParams{Limit: 1, For: time.Minute, Slice: SlicePending})
	if err != nil || len(got) != 1 || got[0].Tenant != "waiting" {
		t.Fatalf("a slice of 1 leased %v (%v), want the row owed a minute before the flood was written", tenantsOf(got), err)
	}
}

// Each account takes at most its cap less its rows in flight, and a slice
// takes the others' rows beside a full account's.
func TestEachAccountTakesItsOwnRoom(t *testing.T) {
	b := setup(t)
	seedOwed(t, b, 50, b.now.Add(-time.Minute)) // sms
	var mail [][5]any
	for i := 0; i < 5; i++ {
		mail = append(mail, [5]any{"mail", fmt.Sprintf("M-%d", i), "email", b.now, b.now})
	}
	insertOwned(t, b, mail...)
	sh := Sharing{Accounts: []Account{{Name: "sandbox", Channels: []string{"email"}, Cap: 100},
		{Name: "twilio", Channels: []string{"sms"}, Cap: 10}}}
	r, err := b.l.LeaseSlice(ctx, LeaseParams{Limit: 100, For: time.Minute, Slice: SlicePending, Sharing: sh})
	if err != nil {
		t.Fatal(err)
	}
	perAccount := map[int]int{}
	for _, row := range r.Rows {
		perAccount[row.Account]++
	}
	if perAccount[0] != 5 || perAccount[1] != 10 || r.Accounts[1].Held == 0 || r.Accounts[0].Held != 0 {
		t.Fatalf("leased %v per account, answers %+v; want the 5 emails and 10 of 50 sms, the other 40 held back", perAccount, r.Accounts)
	}
	r, err = b.l.LeaseSlice(ctx, LeaseParams{Limit: 100, For: time.Minute, Slice: SlicePending, Sharing: sh})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 0 || r.Accounts[1].InFlight != 10 || r.Accounts[1].Held == 0 {
		t.Errorf("second slice leased %d, answers %+v; want none, the sms account full with 10 in flight", len(r.Rows), r.Accounts)
	}
	if r.Now.IsZero() || !r.Now.Equal(b.now) {
		t.Errorf("the slice's instant is %s, want the ledger's now %s", r.Now, b.now)
	}
}

// A paused tenant's rows are never leased, and its rows in flight count
// against no account; on-call's hold of an account leaves that account's
// rows out the same way.
func TestPausedTenantsAndHeldAccountsTakeNothing(t *testing.T) {
	b := setup(t)
	seedOwed(t, b, 20, b.now.Add(-time.Minute))
	sh := Sharing{Accounts: []Account{{Name: "sandbox", Channels: []string{"sms"}, Cap: 10}}}
	if got, err := b.l.Lease(ctx, LeaseParams{Limit: 10, For: time.Minute, Slice: SlicePending, Sharing: sh}); err != nil || len(got) != 10 {
		t.Fatalf("leased %d (%v), want 10", len(got), err)
	}
	if _, err := b.db.Operator.Exec(`SELECT owed_tenant_pause('bulk', 'noisy', 'test', $1)`, b.now); err != nil {
		t.Fatal(err)
	}
	mustSchedule(t, b, "quiet", row("q", "Q-1", b.now))
	r, err := b.l.LeaseSlice(ctx, LeaseParams{Limit: 10, For: time.Minute, Slice: SlicePending, Sharing: sh})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 1 || r.Rows[0].Tenant != "quiet" || r.Accounts[0].InFlight != 0 {
		t.Fatalf("with bulk paused: leased %v, answers %+v; want quiet's row, bulk's 10 in flight counted nowhere", tenantsOf(r.Rows), r.Accounts)
	}
	if ok, err := b.l.Leasable(ctx, time.Minute, sh); err != nil || ok {
		t.Errorf("Leasable = %v, %v with only a paused tenant's rows left, want false", ok, err)
	}
	if _, err := b.db.Operator.Exec(`SELECT owed_tenant_resume('bulk')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Operator.Exec(`SELECT owed_provider_account_hold('sandbox', 'maintenance', 'test', $1)`, b.now); err != nil {
		t.Fatal(err)
	}
	r, err = b.l.LeaseSlice(ctx, LeaseParams{Limit: 10, For: time.Minute, Slice: SlicePending, Sharing: sh})
	if err != nil || len(r.Rows) != 0 {
		t.Fatalf("with the account held: leased %v (%v), want nothing", tenantsOf(r.Rows), err)
	}
}

// A row an application wrote in flight with a lease to 9999-01-01 (before
// owed_apps lost the right to) is a parked wait, not work in flight: it
// holds back no lease.
func TestAParkedLeaseHoldsNoRoom(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload,
		        created_at, state, lease_until)
		    SELECT 'faker', 'r' || g, 'sms', 'k', 'ref' || g, $1, '{"text":"x"}', $1, 'queued', '9999-01-01'
		      FROM generate_series(1, 200) g`, b.now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	mustSchedule(t, b, "acme", row("a", "A-1", b.now))
	sh := Sharing{Accounts: []Account{{Name: "sandbox", Cap: 200}}, LiveFor: 15 * time.Minute}
	r, err := b.l.LeaseSlice(ctx, LeaseParams{Limit: 10, For: time.Minute, Slice: SlicePending, Sharing: sh})
	if err != nil || len(r.Rows) != 1 || r.Accounts[0].InFlight != 0 {
		t.Fatalf("leased %d (%v), answers %+v; want acme's row, the 200 parked rows in flight nowhere", len(r.Rows), err, r.Accounts)
	}
}

// A row a worker hands back to the ledger (HandBack: a retry's step, a
// 429's Retry-After) waits there until its not-before, holding none of its
// account's capacity: with a cap of one, the account's next row is leased
// at once beside it (before, the hand-back counted as a row in flight until
// its lease ran out, and held that row back). It is leased again at its
// not-before and not before; within the publish-ahead window it is leased
// ahead, answered with its not-before, which its message is published to
// surface at.
func TestAHandBackWaitsInTheLedgerUntilItsNotBefore(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "H-1", b.now), row("b", "H-2", b.now))
	one := Sharing{Accounts: []Account{{Name: "sandbox", Cap: 1}}}
	first, err := b.l.Lease(ctx, LeaseParams{Limit: 10, For: time.Minute, Sharing: one})
	if err != nil || len(first) != 1 || first[0].ID != s[0].ID {
		t.Fatalf("first lease: %+v (%v), want row %d alone under the cap of one", first, err, s[0].ID)
	}
	if _, err := b.l.MarkQueued(ctx, []int64{s[0].ID}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	h := mustClaim(t, b, "acme", s[0].ID, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	if err := b.l.HandBack(ctx, h, 3*time.Second, "rate limited by the provider", nil, false); err != nil {
		t.Fatalf("hand back: %v", err)
	}
	handedBack := b.now

	r, err := b.l.LeaseSlice(ctx, LeaseParams{Limit: 10, For: time.Minute, Sharing: one})
	if err != nil || len(r.Rows) != 1 || r.Rows[0].ID != s[1].ID || r.Accounts[0].InFlight != 0 {
		t.Fatalf("beside the hand-back: leased %+v (%v), answers %+v; want row %d, the hand-back in flight nowhere",
			r.Rows, err, r.Accounts, s[1].ID)
	}

	room := Sharing{Accounts: []Account{{Name: "sandbox", Cap: 10}}}
	b.advance(2900 * time.Millisecond)
	if got, err := b.l.Lease(ctx, LeaseParams{Limit: 10, For: time.Minute, Sharing: room}); err != nil || len(got) != 0 {
		t.Fatalf("2.9 s after the hand-back: leased %+v (%v), want nothing before its not-before", got, err)
	}
	b.advance(100 * time.Millisecond)
	got, err := b.l.Lease(ctx, LeaseParams{Limit: 10, For: time.Minute, Sharing: room})
	if err != nil || len(got) != 1 || got[0].ID != s[0].ID || !got[0].Requeue || !got[0].Republish ||
		!got[0].NotBefore.Equal(handedBack.Add(3*time.Second)) {
		t.Fatalf("3 s after the hand-back: leased %+v (%v), want row %d again, not before %s", got, err, s[0].ID,
			handedBack.Add(3*time.Second))
	}

	// Within the publish-ahead window a hand-back is leased ahead, with its
	// not-before, and counts as published ahead until then.
	if _, err := b.l.MarkQueued(ctx, []int64{s[0].ID}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	h = mustClaim(t, b, "acme", s[0].ID, ClaimParams{DueAt: handedBack, LeaseFor: time.Minute})
	if err := b.l.HandBack(ctx, h, 30*time.Second, "retry", nil, false); err != nil {
		t.Fatalf("hand back: %v", err)
	}
	r, err = b.l.LeaseSlice(ctx, LeaseParams{Limit: 10, For: time.Minute, Ahead: time.Minute, Sharing: room})
	if err != nil || len(r.Rows) != 1 || !r.Rows[0].NotBefore.Equal(b.now.Add(30*time.Second)) {
		t.Fatalf("a hand-back 30 s away, a minute ahead: leased %+v (%v), want it, not before %s", r.Rows, err,
			b.now.Add(30*time.Second))
	}
	if sv, err := b.l.Survey(ctx, time.Minute, room, 100); err != nil || sv.InFlight[0] != 2 {
		t.Fatalf("survey after the lease ahead: %+v (%v), want both rows in flight by the horizon", sv, err)
	}
}

// A hand-back whose not-before is within a minute wakes the sweeper
// (owed_due, due_notify.sql), so its message is published to surface at its
// time, not at the next cron call after it.
func TestAHandBackWithinAMinuteWakesTheSweeper(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "W-1", b.now))[0].ID
	if _, err := b.l.Lease(ctx, LeaseParams{Limit: 1, For: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.MarkQueued(ctx, []int64{id}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	h := mustClaim(t, b, "acme", id, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	l := pq.NewListener(b.db.AppURL, 10*time.Millisecond, time.Second, nil)
	t.Cleanup(func() { l.Close() })
	if err := l.Listen("owed_due"); err != nil {
		t.Fatal(err)
	}
	if err := b.l.HandBack(ctx, h, 30*time.Second, "retry", nil, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Notify:
	case <-time.After(30 * time.Second):
		t.Fatal("no owed_due notification after a hand-back 30 s away")
	}
}

// With a requeue-after, the lease writes a pending row straight to what the
// queued mark wrote after the publish (queued, published, its lease ending
// the requeue-after past its due time), so the sweep writes each row once
// before a worker claims it. A refused publish still hands the row back, as
// a row never published; a row a worker claimed since is not the sweep's
// to hand back; and a row whose message was lost is republished once its
// lease runs out, under its next queue generation.
func TestLeaseWritesPendingRowsQueued(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", b.now), row("c", "T-3", b.now))
	p := LeaseParams{Limit: 1000, For: time.Minute, RequeueAfter: 10 * time.Minute}
	got, err := b.l.Lease(ctx, p)
	if err != nil || len(got) != 3 {
		t.Fatalf("lease: %+v %v", got, err)
	}
	for _, r := range got {
		if !r.Queued || r.Republish || r.Requeue || r.QueueGeneration != 0 {
			t.Errorf("leased row %+v, want queued, first published", r)
		}
		n, err := b.l.Get(ctx, "acme", r.ID)
		if err != nil || n.State != StateQueued || n.PublishedAt == nil || !n.PublishedAt.Equal(b.now) ||
			n.LeaseUntil == nil || !n.LeaseUntil.Equal(b.now.Add(10*time.Minute)) {
			t.Errorf("row %d after the lease: %+v %v, want queued, published now, leased 10 minutes", r.ID, n, err)
		}
	}
	// A worker claims the first row's message; the sweep's release of all
	// three (their publish refused) hands back the two it still holds.
	b.advance(time.Second)
	mustClaim(t, b, "acme", s[0].ID, ClaimParams{DueAt: b.now.Add(-time.Second), LeaseFor: time.Minute})
	if n, err := b.l.ReleaseLeased(ctx, []int64{s[0].ID, s[1].ID}); err != nil || n != 1 {
		t.Fatalf("release: %d %v, want the unclaimed row alone", n, err)
	}
	if n, _ := b.l.Get(ctx, "acme", s[0].ID); n.State != StateSending {
		t.Errorf("claimed row after the release: %s, want sending", n.State)
	}
	if n, _ := b.l.Get(ctx, "acme", s[1].ID); n.State != StatePending || n.PublishedAt != nil || n.LeaseUntil != nil {
		t.Errorf("released row: %+v, want pending, never published", n)
	}
	again, err := b.l.Lease(ctx, p)
	if err != nil || len(again) != 1 || again[0].ID != s[1].ID || again[0].Republish || again[0].QueueGeneration != 0 {
		t.Errorf("lease after the release: %+v %v, want row %d, as never published", again, err, s[1].ID)
	}
	// The third row's message is lost: the sweep takes it again once its
	// lease runs out, as a republish.
	b.advance(10 * time.Minute)
	again, err = b.l.Lease(ctx, p)
	var third *Leased
	for i := range again {
		if again[i].ID == s[2].ID {
			third = &again[i]
		}
	}
	if err != nil || third == nil || !third.Republish || !third.Requeue || third.Queued || third.QueueGeneration != 1 {
		t.Errorf("lease after the lost message's lease ran out: %+v %v, want row %d leased as a republish, generation 1",
			again, err, s[2].ID)
	}
}

// A slice reads only the pending rows its limit can reach: with twenty
// tenants of 60 due rows each and a limit of 100, each tenant's part is 5
// rows, so the slice reads about 100 rows, where it read each tenant's
// rows up to the whole limit (20 × 61 = 1,220 rows, every one of them
// sorted three times) before migration 00079. What it leases is the
// same: five rows of each tenant, each tenant's oldest.
func TestASliceReadsOnlyTheRowsItsLimitReaches(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload,
		        created_at)
		    SELECT 'tenant-' || (g % 20), 'r' || g, 'sms', 'k', 'ref' || g, $1::timestamptz + make_interval(secs => g), '{"text":"x"}', $2
		      FROM generate_series(1, 1200) g`, b.now.Add(-time.Hour), b.now.Add(-2*time.Hour)); err != nil {
			return err
		}
		_, err := tx.Exec(`ANALYZE owed_notifications`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	p := LeaseParams{Limit: 100, For: time.Hour, Slice: SlicePending}
	plan, _, err := b.l.ExplainLease(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		t.Fatalf("EXPLAIN output: %v", err)
	}
	read := -1.0
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Subplan Name"] == "CTE pend" {
			read, _ = n["Actual Rows"].(float64)
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(doc[0]["Plan"].(map[string]any))
	if read < 100 || read > 120 {
		t.Errorf("the slice read %.0f pending rows for a limit of 100 over 20 tenants, want about 100:\n%s", read, plan)
	}
	got, err := b.l.Lease(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, r := range got {
		per[r.Tenant]++
	}
	if len(got) != 100 || len(per) != 20 {
		t.Fatalf("leased %d rows of %d tenants, want 100 of 20", len(got), len(per))
	}
	for ten, n := range per {
		if n != 5 {
			t.Errorf("tenant %s got %d rows of the slice, want 5", ten, n)
		}
	}
	var late int
	if err := b.db.Owner.QueryRow(`SELECT count(*) FROM owed_notifications o
	    WHERE o.state = 'pending' AND EXISTS (SELECT FROM owed_notifications l
	        WHERE l.tenant_id = o.tenant_id AND l.state <> 'pending' AND l.due_at > o.due_at)`).Scan(&late); err != nil || late != 0 {
		t.Errorf("%d pending rows are older than a leased row of their tenant (err %v), want 0: each tenant's oldest go first", late, err)
	}
}

// A lease whose caller's context ends while it runs (a sweeper stopping)
// leaves nothing behind: either its rows are answered, or no row changed.
// On its own the lease's statement commits as soon as it has run, and a
// context ending while its answer was read dropped rows it had leased
// (TestUpgradeAndRollback: five rows of a stopped sweeper waited out
// their lease); it now runs in a transaction committed after the answer.
func TestALeaseCancelledMidwayLeavesNoRowBehind(t *testing.T) {
	b := setup(t)
	seedOwed(t, b, 600, b.now.Add(-time.Minute))
	// One lease uncancelled, to know how long one takes here: the
	// cancellations are spread over that time and a half.
	start := time.Now()
	first, err := b.l.Lease(ctx, LeaseParams{Limit: 10, For: time.Hour, Slice: SlicePending})
	if err != nil || len(first) != 10 {
		t.Fatalf("lease: %d rows, %v", len(first), err)
	}
	took := time.Since(start)
	answered, cancelled := len(first), 0
	for i := 0; i < 60; i++ {
		c, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(took*time.Duration(i%20)/13, cancel)
		got, err := b.l.Lease(c, LeaseParams{Limit: 10, For: time.Hour, Slice: SlicePending})
		timer.Stop()
		cancel()
		if err == nil {
			answered += len(got)
		} else {
			cancelled++
		}
		var taken int
		if err := b.db.Owner.QueryRow(`SELECT count(*) FROM owed_notifications WHERE state <> 'pending'`).Scan(&taken); err != nil {
			t.Fatal(err)
		}
		if taken != answered {
			t.Fatalf("try %d (error %v): %d rows no longer pending, %d answered: a cancelled lease left rows behind", i, err, taken, answered)
		}
	}
	t.Logf("one lease took %s; %d leases answered %d rows, %d were cancelled", took, 60-cancelled, answered, cancelled)
}
