package materialise

import (
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/tenant"
)

// itemSQL changes an item the way an application does: as the application
// role, in its own tenant's scope; it fails unless exactly one item changed.
func itemSQL(t *testing.T, b *bundle, tenantID, query string, args ...any) {
	t.Helper()
	err := tenant.InTx(ctx, b.db.App, tenantID, func(tx *sql.Tx) error {
		r, err := tx.Exec(query, args...)
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil || n != 1 {
			t.Fatalf("%s changed %d items (%v), want 1", query, n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func moveItem(t *testing.T, b *bundle, tenantID, ref string, startsAt time.Time) {
	t.Helper()
	itemSQL(t, b, tenantID, `UPDATE owed_items SET starts_at = $1 WHERE ref_id = $2`, startsAt, ref)
}

// owed lists tenant's rows of ref that may still be delivered.
func (b *bundle) owed(t *testing.T, tenantID, ref string) []ledger.Notification {
	t.Helper()
	var out []ledger.Notification
	for _, n := range b.rows(t, tenantID, ref) {
		if !n.State.Settled() {
			out = append(out, n)
		}
	}
	return out
}

// wantOwedAt fails unless ref has exactly one row that may still be
// delivered, due at due and expiring at expires, and returns it.
func (b *bundle) wantOwedAt(t *testing.T, tenantID, ref string, due, expires time.Time) ledger.Notification {
	t.Helper()
	owed := b.owed(t, tenantID, ref)
	if len(owed) != 1 || !owed[0].DueAt.Equal(due) || owed[0].ExpiresAt == nil || !owed[0].ExpiresAt.Equal(expires) {
		t.Fatalf("%s/%s: rows still owed %+v, want exactly one, due %s expiring %s", tenantID, ref, owed, due, expires)
	}
	return owed[0]
}

// ledgerRow is what a run may change of a row, read as the owner across
// tenants.
type ledgerRow struct {
	ID                        int64
	State                     string
	DueAt, ExpiresAt, Updated time.Time
	Generation                int
	Intent                    sql.NullString
}

func (b *bundle) snapshot(t *testing.T) []ledgerRow {
	t.Helper()
	rows, err := b.db.Owner.Query(`SELECT id, state, due_at, expires_at, updated_at, queue_generation, intent
	                                 FROM owed_notifications ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []ledgerRow
	for rows.Next() {
		var r ledgerRow
		if err := rows.Scan(&r.ID, &r.State, &r.DueAt, &r.ExpiresAt, &r.Updated, &r.Generation, &r.Intent); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// noop runs again and fails unless the run changed no row and reported no
// change.
func (b *bundle) noop(t *testing.T) {
	t.Helper()
	before := b.snapshot(t)
	res := b.run(t)
	if res.Scheduled != 0 || res.Rescheduled != 0 || res.Cancelled != 0 || res.Intents != 0 {
		t.Errorf("second run %+v, want nothing scheduled, rescheduled or cancelled", res)
	}
	if after := b.snapshot(t); !reflect.DeepEqual(before, after) {
		t.Errorf("second run changed the ledger:\nbefore %+v\nafter  %+v", before, after)
	}
}

// A moved calendar item is nudged at its new time only: the row moves (a
// new schedule key), follows the item beyond the window and back again, and
// no row is left at the old time.
func TestMovedItemIsNudgedAtItsNewTimeOnly(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", start, nil)
	b.run(t)
	first := b.wantOwedAt(t, "acme", "CAL-1", start.Add(-DefaultLead), start)

	for _, moved := range []time.Time{start.Add(time.Hour), b.now.Add(DefaultLookahead + time.Hour), start} {
		moveItem(t, b, "acme", "CAL-1", moved)
		res := b.run(t)
		if res.Rescheduled != 1 || res.Scheduled != 0 || res.Cancelled != 0 {
			t.Fatalf("run after the move to %s: %+v, want the row rescheduled and nothing new", moved, res)
		}
		n := b.wantOwedAt(t, "acme", "CAL-1", moved.Add(-DefaultLead), moved)
		if n.ID != first.ID || n.State != ledger.StatePending {
			t.Errorf("the nudge is row %d (%s), want row %d moved and pending", n.ID, n.State, first.ID)
		}
		if all := b.rows(t, "acme", "CAL-1"); len(all) != 1 {
			t.Errorf("acme has %d rows for CAL-1, want the one row moved", len(all))
		}
		b.noop(t)
	}
}

// A changed lead time moves the nudge and keeps its expiry at starts_at.
func TestLeadChangeMovesTheNudge(t *testing.T) {
	b := setup(t)
	start := b.now.Add(2 * time.Hour)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", start, seconds(1800))
	b.run(t)
	b.wantOwedAt(t, "acme", "CAL-1", start.Add(-30*time.Minute), start)

	itemSQL(t, b, "acme", `UPDATE owed_items SET lead_seconds = 3600 WHERE ref_id = 'CAL-1'`)
	if res := b.run(t); res.Rescheduled != 1 || res.Scheduled != 0 {
		t.Fatalf("run after the lead change: %+v, want the row rescheduled", res)
	}
	b.wantOwedAt(t, "acme", "CAL-1", start.Add(-time.Hour), start)
	b.noop(t)

	// Back to the default lead.
	itemSQL(t, b, "acme", `UPDATE owed_items SET lead_seconds = NULL WHERE ref_id = 'CAL-1'`)
	if res := b.run(t); res.Rescheduled != 1 {
		t.Fatalf("run after the lead was cleared: %+v, want the row rescheduled", res)
	}
	b.wantOwedAt(t, "acme", "CAL-1", start.Add(-DefaultLead), start)
	b.noop(t)
}

// A deleted item, a cancelled one and one moved to a time already begun
// cancel their nudges, each with its reason; a cancelled item is not
// materialised again.
func TestDeletedAndCancelledItemsCancelTheirNudges(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	for _, ref := range []string{"DELETED", "CANCELLED", "BEGUN", "KEPT"} {
		addItem(t, b.db.App, "acme", "+15550001", ref, start, nil)
	}
	b.run(t)
	itemSQL(t, b, "acme", `DELETE FROM owed_items WHERE ref_id = 'DELETED'`)
	itemSQL(t, b, "acme", `UPDATE owed_items SET cancelled_at = now() WHERE ref_id = 'CANCELLED'`)
	moveItem(t, b, "acme", "BEGUN", b.now.Add(-time.Minute))

	res := b.run(t)
	if res.Cancelled != 3 || res.Rescheduled != 0 || res.Scheduled != 0 || res.Existing != 1 {
		t.Fatalf("run %+v, want three rows cancelled and KEPT existing", res)
	}
	for ref, reason := range map[string]string{"DELETED": "deleted", "CANCELLED": "cancelled", "BEGUN": "already begun"} {
		rows := b.rows(t, "acme", ref)
		if len(rows) != 1 || rows[0].State != ledger.StateCancelled || !strings.Contains(rows[0].LastError, reason) {
			t.Errorf("%s: rows %+v, want the one row cancelled, its reason mentioning %q", ref, rows, reason)
		}
	}
	b.wantOwedAt(t, "acme", "KEPT", start.Add(-DefaultLead), start)
	b.noop(t)
}

// A row a worker is sending is never changed: the move or cancel is
// recorded on it as an intent, applied when the send ends. A delivered row
// is never changed at all.
func TestSendingAndDeliveredRowsAreUntouched(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	for _, ref := range []string{"MOVED", "DELETED", "DELIVERED"} {
		addItem(t, b.db.App, "acme", "+15550001", ref, start, nil)
	}
	b.run(t)
	claim := func(ref string) ledger.Claim {
		t.Helper()
		n := b.owed(t, "acme", ref)[0]
		c, err := b.ledger.ClaimForSend(ctx, "acme", n.ID,
			ledger.ClaimParams{DueAt: n.DueAt, LeaseFor: time.Hour, EarlyTolerance: 24 * time.Hour})
		if err != nil || c.Outcome != ledger.ClaimSend {
			t.Fatalf("claim of %s: %v %v", ref, c.Outcome, err)
		}
		return c
	}
	moving, deleting, delivered := claim("MOVED"), claim("DELETED"), claim("DELIVERED")
	if _, err := b.ledger.SettleDelivered(ctx, delivered.Hold, ledger.Attempt{Provider: "sandbox",
		StartedAt: b.now, FinishedAt: b.now, Outcome: ledger.AttemptAccepted, ProviderMessageID: "m-1"}); err != nil {
		t.Fatal(err)
	}
	wasDelivered, err := b.ledger.Get(ctx, "acme", delivered.Row.ID)
	if err != nil {
		t.Fatal(err)
	}

	moved := start.Add(time.Hour)
	moveItem(t, b, "acme", "MOVED", moved)
	itemSQL(t, b, "acme", `DELETE FROM owed_items WHERE ref_id = 'DELETED'`)
	itemSQL(t, b, "acme", `UPDATE owed_items SET cancelled_at = now() WHERE ref_id = 'DELIVERED'`)
	res := b.run(t)
	if res.Rescheduled != 1 || res.Cancelled != 1 || res.Intents != 2 || res.Scheduled != 0 {
		t.Fatalf("run %+v, want one move and one cancel, both as intents, and nothing new", res)
	}
	for _, c := range []ledger.Claim{moving, deleting} {
		d, err := b.ledger.Get(ctx, "acme", c.Row.ID)
		if err != nil || d.State != ledger.StateSending || !d.DueAt.Equal(c.Row.DueAt) || d.ClaimSeq != c.Hold.Seq {
			t.Fatalf("row %d: %s due %s claim %d (%v), want still sending at %s under claim %d",
				c.Row.ID, d.State, d.DueAt, d.ClaimSeq, err, c.Row.DueAt, c.Hold.Seq)
		}
	}
	if got, err := b.ledger.Get(ctx, "acme", delivered.Row.ID); err != nil || !reflect.DeepEqual(got, wasDelivered) {
		t.Errorf("the delivered row changed:\nbefore %+v\nafter  %+v (%v)", wasDelivered, got, err)
	}
	b.noop(t)

	// The worker hands both back (the provider's pace had no slot): the
	// intents apply, so one row is pending at the new time and the other
	// is cancelled, never sent.
	for _, c := range []ledger.Claim{moving, deleting} {
		if err := b.ledger.ReleaseClaim(ctx, c.Hold, time.Second, time.Minute, "no pace slot", nil, false); err != nil {
			t.Fatal(err)
		}
	}
	n := b.wantOwedAt(t, "acme", "MOVED", moved.Add(-DefaultLead), moved)
	if n.ID != moving.Row.ID || n.State != ledger.StatePending {
		t.Errorf("MOVED is row %d (%s), want row %d moved to pending", n.ID, n.State, moving.Row.ID)
	}
	if d, err := b.ledger.Get(ctx, "acme", deleting.Row.ID); err != nil || d.State != ledger.StateCancelled {
		t.Errorf("DELETED's row is %s (%v), want cancelled", d.State, err)
	}
	b.noop(t)
}

// Two tenants with the same item key follow their own items only.
func TestTenantsWithTheSameRefDoNotInterfere(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	for _, tn := range []string{"acme", "globex"} {
		addItem(t, b.db.App, tn, "+15550001", "CAL-1", start, nil)
	}
	b.run(t)
	globex := b.wantOwedAt(t, "globex", "CAL-1", start.Add(-DefaultLead), start)

	moved := start.Add(time.Hour)
	moveItem(t, b, "acme", "CAL-1", moved)
	if res := b.run(t); res.Rescheduled != 1 || res.Cancelled != 0 {
		t.Fatalf("run after acme's move: %+v, want acme's row alone rescheduled", res)
	}
	b.wantOwedAt(t, "acme", "CAL-1", moved.Add(-DefaultLead), moved)
	if n := b.wantOwedAt(t, "globex", "CAL-1", start.Add(-DefaultLead), start); !n.UpdatedAt.Equal(globex.UpdatedAt) {
		t.Errorf("globex's row was changed at %s by acme's move", n.UpdatedAt)
	}

	itemSQL(t, b, "globex", `DELETE FROM owed_items WHERE ref_id = 'CAL-1'`)
	if res := b.run(t); res.Cancelled != 1 || res.Rescheduled != 0 {
		t.Fatalf("run after globex's delete: %+v, want globex's row alone cancelled", res)
	}
	b.wantOwedAt(t, "acme", "CAL-1", moved.Add(-DefaultLead), moved)
	if rows := b.rows(t, "globex", "CAL-1"); len(rows) != 1 || rows[0].State != ledger.StateCancelled {
		t.Errorf("globex's rows %+v, want its one row cancelled", rows)
	}
	b.noop(t)
}

// A row scheduled through the API for the same subject is not the
// materialiser's: its item's changes never touch it.
func TestAPIRowsAreNotReconciled(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", start, nil)
	exp := start
	api, err := b.ledger.Schedule(ctx, "acme", []ledger.NewNotification{{Recipient: "+15550001", Channel: "sms",
		Kind: "meeting_soon", RefID: "CAL-1", DueAt: start.Add(-time.Hour + time.Minute), ExpiresAt: &exp,
		Payload: []byte(`{"text":"an hour to go"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	b.run(t)
	itemSQL(t, b, "acme", `DELETE FROM owed_items WHERE ref_id = 'CAL-1'`)
	if res := b.run(t); res.Cancelled != 1 {
		t.Fatalf("run after the delete: %+v, want the materialised row cancelled", res)
	}
	if d, err := b.ledger.Get(ctx, "acme", api[0].ID); err != nil || d.State != ledger.StatePending {
		t.Errorf("the API's row is %s (%v), want still pending", d.State, err)
	}
}

// plan keeps one nudge per item: the row already where the item wants it
// (rather than one whose move there waits on a send), and cancels the rest;
// a row whose cancel waits needs nothing.
func TestPlanKeepsOneNudgePerItem(t *testing.T) {
	m := New(staticSource{}, nil, config, nil)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	start := now.Add(time.Hour)
	item := &NudgeItem{ID: 7, StartsAt: start}
	due := start.Add(-DefaultLead)
	nudges := []Nudge{
		{ID: 1, Tenant: "acme", DueAt: due, ExpiresAt: start, Moving: true, Item: item},
		{ID: 2, Tenant: "acme", DueAt: due.Add(-time.Hour), ExpiresAt: start, Item: item},
		{ID: 3, Tenant: "acme", DueAt: due, ExpiresAt: start, Item: item},
		{ID: 4, Tenant: "acme", DueAt: due, ExpiresAt: start, Cancelling: true, Item: item},
		{ID: 5, Tenant: "acme", DueAt: due, ExpiresAt: start, Item: &NudgeItem{ID: 8, StartsAt: start.Add(time.Hour)}},
	}
	changes, held := m.plan(nudges, now)
	want := []ledger.MaterialisedChange{
		{ID: 1, Cancel: true, Reason: reasonSecond},
		{ID: 2, Cancel: true, Reason: reasonSecond},
		{ID: 5, DueAt: start.Add(time.Hour - DefaultLead), ExpiresAt: start.Add(time.Hour)},
	}
	if !reflect.DeepEqual(changes["acme"], want) || len(changes) != 1 {
		t.Errorf("changes %+v, want %+v", changes, want)
	}
	if !held[7] || !held[8] || len(held) != 2 {
		t.Errorf("held %v, want items 7 and 8", held)
	}
}

// A queued row (published ahead, its message waiting in the queue) moves at
// once: pending at the new time under a new queue generation, so the
// message published for the old time is stale to the worker's claim.
func TestQueuedRowMovesAndItsMessageIsStale(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", start, nil)
	b.run(t)
	leased, err := b.ledger.Lease(ctx, ledger.LeaseParams{Limit: 10, Ahead: 24 * time.Hour, For: time.Minute})
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %+v (%v), want the one row", leased, err)
	}
	if _, err := b.ledger.MarkQueued(ctx, []int64{leased[0].ID}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	old := b.wantOwedAt(t, "acme", "CAL-1", start.Add(-DefaultLead), start)
	if old.State != ledger.StateQueued {
		t.Fatalf("row is %s, want queued", old.State)
	}

	moved := start.Add(30 * time.Minute)
	moveItem(t, b, "acme", "CAL-1", moved)
	if res := b.run(t); res.Rescheduled != 1 || res.Intents != 0 {
		t.Fatalf("run after the move: %+v, want the queued row rescheduled at once", res)
	}
	n := b.wantOwedAt(t, "acme", "CAL-1", moved.Add(-DefaultLead), moved)
	if n.State != ledger.StatePending || n.PublishedAt != nil || n.QueueGeneration <= old.QueueGeneration {
		t.Errorf("moved row %s published %v generation %d, want pending, unpublished, past generation %d",
			n.State, n.PublishedAt, n.QueueGeneration, old.QueueGeneration)
	}
	c, err := b.ledger.ClaimForSend(ctx, "acme", n.ID,
		ledger.ClaimParams{DueAt: old.DueAt, LeaseFor: time.Minute, EarlyTolerance: 24 * time.Hour})
	if err != nil || c.Outcome != ledger.ClaimStale {
		t.Errorf("claim of the message for the old time: %v %v, want stale (nothing sent)", c.Outcome, err)
	}
	b.noop(t)
}

// A nudge and its mark are one transaction: a run whose mark fails (here a
// check the owner adds refuses every marked row) leaves no nudge behind, and
// the next run writes the item's one nudge, marked, so it follows the item
// when it moves. Before, the nudge was committed and the mark failed after
// it: an unmarked nudge the reconciliation never saw, and a moved item got a
// second one.
func TestANudgeIsNeverLeftWithoutItsMark(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", start, nil)
	if _, err := b.db.Owner.Exec(`ALTER TABLE owed_notifications
		ADD CONSTRAINT test_mark_fails CHECK (NOT materialised) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.Run(ctx); err == nil {
		t.Fatal("the run whose mark failed reported no error")
	}
	if rows := b.rows(t, "acme", "CAL-1"); len(rows) != 0 {
		t.Fatalf("the failed run left %d nudges (state %s), want none: a nudge without its mark never follows its item",
			len(rows), rows[0].State)
	}
	if _, err := b.db.Owner.Exec(`ALTER TABLE owed_notifications DROP CONSTRAINT test_mark_fails`); err != nil {
		t.Fatal(err)
	}
	b.run(t)
	moved := start.Add(30 * time.Minute)
	moveItem(t, b, "acme", "CAL-1", moved)
	b.run(t)
	rows := b.rows(t, "acme", "CAL-1")
	owed := 0
	for _, r := range rows {
		if !r.State.Settled() {
			owed++
			if !r.DueAt.Equal(moved.Add(-DefaultLead)) {
				t.Errorf("the nudge owed is due %s, want %s (the moved item's)", r.DueAt, moved.Add(-DefaultLead))
			}
		}
	}
	if owed != 1 {
		t.Errorf("%d nudges owed for the moved item, want one: %+v", owed, rows)
	}
}
