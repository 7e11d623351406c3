package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/tenant"
	"github.com/owedhq/owed/internal/testdb"
)

// bundle is one test's ledger, on a stubbed clock that reads now.
type bundle struct {
	db  *testdb.DB
	l   *Ledger
	clk *clock.Stub
	now time.Time
}

// advance moves the ledger's clock, and now, by d.
func (b *bundle) advance(d time.Duration) { b.now = b.clk.Advance(d) }

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	b := &bundle{db: testdb.New(t), now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	b.clk = clock.NewStub(b.now)
	b.l = New(b.db.App, b.clk)
	return b
}

var ctx = context.Background()

func textPayload(s string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"text":%q}`, s)) }

func row(recipient, ref string, due time.Time) NewNotification {
	return NewNotification{Recipient: recipient, Channel: "sms", Kind: "follow_up", RefID: ref, DueAt: due,
		Payload: textPayload("hello")}
}

func mustSchedule(t *testing.T, b *bundle, tenant string, rows ...NewNotification) []Scheduled {
	t.Helper()
	out, err := b.l.Schedule(ctx, tenant, rows)
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	return out
}

var leaseAll = LeaseParams{Limit: 1000, For: time.Minute}

func TestScheduleIsIdempotent(t *testing.T) {
	b := setup(t)
	batch := []NewNotification{
		row("+15550001", "T-1", b.now),
		row("+15550002", "T-1", b.now),
		row("+15550001", "T-2", b.now.Add(time.Hour)),
	}
	first := mustSchedule(t, b, "acme", batch...)
	second := mustSchedule(t, b, "acme", batch...)
	for i := range batch {
		if !first[i].Created || second[i].Created {
			t.Errorf("row %d: created first=%v second=%v, want true then false", i, first[i].Created, second[i].Created)
		}
		if first[i].ID != second[i].ID || first[i].ID == 0 {
			t.Errorf("row %d: ids %d and %d, want the same non-zero id", i, first[i].ID, second[i].ID)
		}
	}
	// The same key twice inside one batch is also one row.
	dup := mustSchedule(t, b, "acme", row("+15550009", "T-9", b.now), row("+15550009", "T-9", b.now))
	if dup[0].ID != dup[1].ID || !dup[0].Created || dup[1].Created {
		t.Errorf("duplicate within a batch: %+v", dup)
	}
	var n int
	if err := b.db.App.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the application role without a tenant scope sees %d rows, want 0", n)
	}
	found, err := b.l.Find(ctx, "acme", Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 4 {
		t.Errorf("acme has %d rows, want 4", len(found))
	}
}

func TestScheduleValidationNamesEveryBadFieldAndWritesNothing(t *testing.T) {
	b := setup(t)
	exp := b.now.Add(-time.Minute)
	rows := []NewNotification{
		row("+1555", "T-1", b.now), // good, but the batch fails as a whole
		{Channel: "sms", Kind: "k", RefID: "r", DueAt: b.now, Payload: textPayload("x")},                    // no recipient
		{Recipient: "a", Channel: "pigeon", Kind: "k", RefID: "r", DueAt: b.now, Payload: textPayload("x")}, // bad channel
		{Recipient: "a", Channel: "email", Kind: "k", RefID: "r", DueAt: b.now, Payload: textPayload("x")},  // no subject
		{Recipient: "a", Channel: "sms", Kind: "k", RefID: "r", DueAt: b.now, ExpiresAt: &exp, Payload: textPayload("x")},
		{Recipient: "a", Channel: "sms", Kind: "k", RefID: "r", Payload: textPayload("x")},                                                               // no due_at
		{Recipient: "a", Channel: "sms", Kind: "k", RefID: "r", DueAt: b.now, Payload: json.RawMessage(`{"text":"` + strings.Repeat("x", 70000) + `"}`)}, // too big
	}
	_, err := b.l.Schedule(ctx, "acme", rows)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a ValidationError, got %v", err)
	}
	for _, want := range []string{
		"notifications[1].recipient: required",
		`notifications[2].channel: "pigeon" is not one of`,
		"notifications[3].payload.subject: required",
		"notifications[4].expires_at:",
		"notifications[5].due_at: required",
		"notifications[6].payload:",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "notifications[0]") {
		t.Errorf("the valid row is reported: %v", err)
	}
	if got, _ := b.l.Find(ctx, "acme", Filter{}); len(got) != 0 {
		t.Errorf("a rejected batch wrote %d rows", len(got))
	}
	if _, err := b.l.Schedule(ctx, "", []NewNotification{row("a", "b", b.now)}); err == nil ||
		!strings.Contains(err.Error(), "tenant_id: required") {
		t.Errorf("missing tenant: got %v", err)
	}
}

// The isolation suite runs as the application role. A superuser or BYPASSRLS
// role would make every check below pass vacuously, so that is checked first.
func TestTenantIsolation(t *testing.T) {
	b := setup(t)
	var super, bypass bool
	if err := b.db.App.QueryRow(`SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).
		Scan(&super, &bypass); err != nil {
		t.Fatal(err)
	}
	if super || bypass {
		t.Fatalf("tests must run as a role RLS applies to; superuser=%v bypassrls=%v", super, bypass)
	}
	a := mustSchedule(t, b, "tenant-a", row("alice", "A-1", b.now.Add(-time.Minute)))
	mustSchedule(t, b, "tenant-b", row("bob", "B-1", b.now.Add(-time.Minute)))

	// Unscoped: reads and the lease itself see nothing.
	var n int
	if err := b.db.App.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil || n != 0 {
		t.Errorf("unscoped read sees %d rows (err %v), want 0", n, err)
	}
	res, err := b.db.App.Exec(`UPDATE owed_notifications SET state = 'leased' WHERE settled_at IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	if leasedUnscoped, _ := res.RowsAffected(); leasedUnscoped != 0 {
		t.Errorf("an unscoped update as the application role leased %d rows, want 0", leasedUnscoped)
	}

	// Through owed_sweep_lease the claim sees every tenant's due rows.
	leased, err := b.l.Lease(ctx, leaseAll)
	if err != nil {
		t.Fatal(err)
	}
	tenants := map[string]bool{}
	for _, r := range leased {
		tenants[r.Tenant] = true
	}
	if len(leased) != 2 || !tenants["tenant-a"] || !tenants["tenant-b"] {
		t.Errorf("bypassed lease returned %+v, want one row of each tenant", leased)
	}

	// Scoped to tenant-b, tenant-a's row does not exist.
	if _, err := b.l.Get(ctx, "tenant-b", a[0].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("tenant-b reading tenant-a's row: got %v, want ErrNotFound", err)
	}
	if _, err := b.l.ClaimForSend(ctx, "tenant-b", a[0].ID, ClaimParams{DueAt: b.now.Add(-time.Minute), LeaseFor: time.Minute}); !errors.Is(err, ErrNotFound) {
		t.Errorf("tenant-b claiming tenant-a's row: got %v, want ErrNotFound", err)
	}
	if res, err := b.l.Cancel(ctx, "tenant-b", "follow_up", "A-1"); err != nil || res.Changed != 0 {
		t.Errorf("tenant-b cancelling tenant-a's subject changed %d rows (err %v)", res.Changed, err)
	}
	if got, _ := b.l.Find(ctx, "tenant-b", Filter{RefID: "A-1"}); len(got) != 0 {
		t.Errorf("tenant-b finds %d of tenant-a's rows", len(got))
	}

	// A forged insert of another tenant's row is refused by WITH CHECK.
	tx, err := b.db.App.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tenant.Enter(ctx, tx, "tenant-b"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
	                  VALUES ('tenant-a', 'mallory', 'sms', 'k', 'r', now())`)
	if err == nil || !strings.Contains(err.Error(), "row-level security") {
		t.Errorf("forged cross-tenant insert: got %v, want a row-level security violation", err)
	}
}

func TestConcurrentLeasesNeverShareARow(t *testing.T) {
	b := setup(t)
	const total = 10000
	seedOwed(t, b, total, b.now.Add(-time.Hour))
	var mu sync.Mutex
	seen := make(map[int64]int, total)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := b.l.Lease(ctx, LeaseParams{Limit: 250, For: time.Hour})
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					seen[r.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Errorf("leased %d distinct rows, want %d", len(seen), total)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("row %d leased %d times", id, c)
		}
	}
}

// seedOwed inserts n owed rows for tenant "bulk" due at due, written at
// the test's now (the lease counts a row owed from when it was written),
// through the owner connection under the bypass (fixtures only).
func seedOwed(t *testing.T, b *bundle, n int, due time.Time) {
	t.Helper()
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload,
	        created_at)
	    SELECT 'bulk', 'r' || g, 'sms', 'k', 'ref' || g, $2, '{"text":"x"}', $3 FROM generate_series(1, $1) g`, n, due, b.now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func TestLeaseBoundsOrderAndNoLowerBound(t *testing.T) {
	b := setup(t)
	// Rows due over the last two hours (a scheduler paused that long) and one
	// due in the future beyond the publish-ahead window.
	var rows []NewNotification
	for i := 0; i < 120; i++ {
		rows = append(rows, row(fmt.Sprintf("r%d", i), "T", b.now.Add(-time.Duration(i)*time.Minute)))
	}
	rows = append(rows, row("later", "T", b.now.Add(10*time.Minute)))
	mustSchedule(t, b, "acme", rows...)

	first, err := b.l.Lease(ctx, LeaseParams{Limit: 50, For: time.Hour, Ahead: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 50 {
		t.Fatalf("leased %d, want the bound of 50", len(first))
	}
	if want := b.now.Add(-119 * time.Minute); !first[0].DueAt.Equal(want) {
		t.Errorf("oldest leased first: got %s, want %s", first[0].DueAt, want)
	}
	total := len(first)
	for {
		got, err := b.l.Lease(ctx, LeaseParams{Limit: 50, For: time.Hour, Ahead: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		total += len(got)
	}
	if total != 120 {
		t.Errorf("drained %d rows, want all 120 due (none beyond the publish-ahead window)", total)
	}
	// Publish-ahead: the future row is leased once it falls within the window.
	b.advance(9*time.Minute + 30*time.Second)
	got, err := b.l.Lease(ctx, LeaseParams{Limit: 50, For: time.Hour, Ahead: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].DueAt.Equal(b.now.Add(30*time.Second)) {
		t.Errorf("publish-ahead lease got %+v, want the row due in 30s", got)
	}
}

func TestExpiredLeaseIsClaimableAgainAndSettledNever(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", b.now))
	got, _ := b.l.Lease(ctx, LeaseParams{Limit: 10, For: time.Minute})
	if len(got) != 2 {
		t.Fatalf("leased %d, want 2", len(got))
	}
	if again, _ := b.l.Lease(ctx, leaseAll); len(again) != 0 {
		t.Errorf("rows under a live lease were leased again: %+v", again)
	}
	// Deliver one of them; let the other's lease run out (a crashed sweeper).
	c, err := b.l.ClaimForSend(ctx, "acme", s[0].ID, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	if _, err := b.l.SettleDelivered(ctx, c.Hold, Attempt{Provider: "sandbox", StartedAt: b.now,
		FinishedAt: b.now, ProviderMessageID: "m-1"}); err != nil {
		t.Fatal(err)
	}
	b.advance(2 * time.Minute)
	again, err := b.l.Lease(ctx, leaseAll)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != s[1].ID {
		t.Errorf("after the lease ran out got %+v, want only row %d (the delivered one never)", again, s[1].ID)
	}
}

func TestRowPastExpiryIsNeverLeasedAndEndsExpired(t *testing.T) {
	b := setup(t)
	exp := b.now.Add(5 * time.Minute)
	r := row("a", "MEET-1", b.now)
	r.ExpiresAt = &exp
	s := mustSchedule(t, b, "acme", r, row("b", "T-2", b.now))
	b.advance(10 * time.Minute) // the sweeper was down past the meeting
	got, err := b.l.Lease(ctx, leaseAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if g.ID == s[0].ID {
			t.Fatalf("Lease returned a row past its expiry")
		}
	}
	n, err := b.l.ExpireOverdue(ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("ExpireOverdue settled %d (err %v), want 1", n, err)
	}
	d, err := b.l.Get(ctx, "acme", s[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StateExpired || d.SettledAt == nil || d.DeliveredAt != nil {
		t.Errorf("expired row: state=%s settled=%v delivered=%v", d.State, d.SettledAt, d.DeliveredAt)
	}
}

func TestClaimOutcomes(t *testing.T) {
	b := setup(t)
	exp := b.now.Add(time.Minute)
	expiring := row("a", "MEET", b.now)
	expiring.ExpiresAt = &exp
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), expiring, row("c", "T-3", b.now.Add(time.Minute)))
	p := ClaimParams{DueAt: b.now, LeaseFor: time.Minute, EarlyTolerance: time.Second}

	c, err := b.l.ClaimForSend(ctx, "acme", s[0].ID, p)
	if err != nil || c.Outcome != ClaimSend || c.PossibleDuplicate {
		t.Fatalf("first claim: %v dup=%v err=%v", c.Outcome, c.PossibleDuplicate, err)
	}
	// A second worker with a copy of the message finds it held.
	if c, _ := b.l.ClaimForSend(ctx, "acme", s[0].ID, p); c.Outcome != ClaimHeld {
		t.Errorf("claim while held: %v, want held", c.Outcome)
	}
	// The first worker died: after its lease the row is claimable, flagged.
	b.advance(2 * time.Minute)
	c, err = b.l.ClaimForSend(ctx, "acme", s[0].ID, p)
	if err != nil || c.Outcome != ClaimSend || !c.PossibleDuplicate {
		t.Errorf("claim after a dead worker: %v dup=%v err=%v, want send flagged as possible duplicate", c.Outcome, c.PossibleDuplicate, err)
	}
	if _, err := b.l.SettleDelivered(ctx, c.Hold, Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now,
		ProviderMessageID: "m", PossibleDuplicate: true}); err != nil {
		t.Fatal(err)
	}
	if c, _ := b.l.ClaimForSend(ctx, "acme", s[0].ID, p); c.Outcome != ClaimSettled {
		t.Errorf("claim of a delivered row: %v, want settled", c.Outcome)
	}
	// Past its expiry: settled expired by the claim, never sent.
	if c, _ := b.l.ClaimForSend(ctx, "acme", s[1].ID, p); c.Outcome != ClaimExpired {
		t.Errorf("claim past expiry: %v, want expired", c.Outcome)
	}
	if d, _ := b.l.Get(ctx, "acme", s[1].ID); d.State != StateExpired {
		t.Errorf("row after expired claim is %s", d.State)
	}
	// A message published for an earlier due time is stale after a reschedule.
	b.advance(-2 * time.Minute)
	if c, _ := b.l.ClaimForSend(ctx, "acme", s[2].ID, ClaimParams{DueAt: b.now, LeaseFor: time.Minute}); c.Outcome != ClaimStale {
		t.Errorf("claim with the wrong due time: %v, want stale", c.Outcome)
	}
	// One arriving a minute early is told to wait.
	c, _ = b.l.ClaimForSend(ctx, "acme", s[2].ID, ClaimParams{DueAt: b.now.Add(time.Minute), LeaseFor: time.Minute, EarlyTolerance: time.Second})
	if c.Outcome != ClaimEarly || c.Wait != time.Minute {
		t.Errorf("early claim: %v wait=%s, want early 1m", c.Outcome, c.Wait)
	}
}

func TestFailedSendStaysRetryableAndAttemptsAreKept(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now))
	id := s[0].ID
	p := ClaimParams{DueAt: b.now, LeaseFor: time.Minute}
	h := mustClaim(t, b, "acme", id, p)
	// A transient failure releases the claim and records the attempt, but
	// never stamps delivered.
	if err := b.l.ReleaseClaim(ctx, h, 10*time.Second, time.Minute, "503", &Attempt{
		Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now, Outcome: AttemptTransient, HTTPStatus: 503, Error: "unavailable"}, false); err != nil {
		t.Fatal(err)
	}
	d, _ := b.l.Get(ctx, "acme", id)
	if d.State != StateQueued || d.DeliveredAt != nil || d.Attempts != 1 || d.ClaimedAt != nil {
		t.Errorf("after a transient failure: state=%s delivered=%v attempts=%d claimed=%v", d.State, d.DeliveredAt, d.Attempts, d.ClaimedAt)
	}
	// A rate-limited send releases the claim without burning an attempt.
	b.advance(10 * time.Second)
	c, _ := b.l.ClaimForSend(ctx, "acme", id, p)
	if c.Outcome != ClaimSend || c.PossibleDuplicate {
		t.Fatalf("reclaim after release: %v dup=%v", c.Outcome, c.PossibleDuplicate)
	}
	if err := b.l.ReleaseClaim(ctx, c.Hold, 30*time.Second, time.Minute, "rate limited", nil, false); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.l.Get(ctx, "acme", id); d.Attempts != 1 {
		t.Errorf("a 429 burned an attempt: attempts=%d", d.Attempts)
	}
	b.advance(30 * time.Second)
	h = mustClaim(t, b, "acme", id, p)
	changed, err := b.l.SettleDelivered(ctx, h, Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now, ProviderMessageID: "msg-7", HTTPStatus: 200})
	if err != nil || !changed {
		t.Fatalf("settle delivered: changed=%v err=%v", changed, err)
	}
	// A second accepted send is recorded but does not move delivered_at.
	first, _ := b.l.Get(ctx, "acme", id)
	b.advance(time.Minute)
	changed, err = b.l.SettleDelivered(ctx, h, Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now, ProviderMessageID: "msg-8"})
	if err != nil || changed {
		t.Errorf("second settle: changed=%v err=%v, want false", changed, err)
	}
	d, _ = b.l.Get(ctx, "acme", id)
	if !d.DeliveredAt.Equal(*first.DeliveredAt) || d.ProviderMessageID != "msg-7" {
		t.Errorf("delivered_at moved from %s to %s (msg %s)", first.DeliveredAt, d.DeliveredAt, d.ProviderMessageID)
	}
	if len(d.History) != 3 || d.History[0].Outcome != AttemptTransient || d.History[1].ProviderMessageID != "msg-7" {
		t.Errorf("history: %+v", d.History)
	}
}

func TestCancelAndRescheduleTouchOpenRowsOnly(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "TICKET-1", b.now), row("b", "TICKET-1", b.now.Add(time.Hour)))
	// Row a is delivered; row b is still owed.
	h := mustClaim(t, b, "acme", s[0].ID, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	b.l.SettleDelivered(ctx, h, Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now})

	newDue := b.now.Add(3 * time.Hour)
	res, err := b.l.Reschedule(ctx, "acme", "follow_up", "TICKET-1", newDue)
	if err != nil || res.Changed != 1 {
		t.Fatalf("reschedule: %+v %v", res, err)
	}
	if d, _ := b.l.Get(ctx, "acme", s[0].ID); d.State != StateDelivered || !d.DueAt.Equal(b.now) {
		t.Errorf("reschedule changed a delivered row: %s due %s", d.State, d.DueAt)
	}
	if d, _ := b.l.Get(ctx, "acme", s[1].ID); !d.DueAt.Equal(newDue) || d.State != StatePending {
		t.Errorf("rescheduled row: %s due %s", d.State, d.DueAt)
	}
	res, err = b.l.Cancel(ctx, "acme", "follow_up", "TICKET-1")
	if err != nil || res.Changed != 1 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if d, _ := b.l.Get(ctx, "acme", s[0].ID); d.State != StateDelivered {
		t.Errorf("cancel changed a delivered row to %s", d.State)
	}
	if d, _ := b.l.Get(ctx, "acme", s[1].ID); d.State != StateCancelled || d.SettledAt == nil {
		t.Errorf("cancelled row: %s", d.State)
	}
	if _, err := b.l.Cancel(ctx, "acme", "", "TICKET-1"); err == nil || !strings.Contains(err.Error(), "kind: required") {
		t.Errorf("cancel without kind: %v", err)
	}
}

func TestMarkQueuedAndRelease(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", b.now))
	got, _ := b.l.Lease(ctx, leaseAll)
	if len(got) != 2 || got[0].Republish {
		t.Fatalf("lease: %+v", got)
	}
	if n, err := b.l.MarkQueued(ctx, []int64{s[0].ID}, 10*time.Minute); err != nil || n != 1 {
		t.Fatalf("mark queued: %d %v", n, err)
	}
	if n, err := b.l.ReleaseLeased(ctx, []int64{s[1].ID}); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	// The released row is owed again at once; the queued one waits for its lease.
	again, _ := b.l.Lease(ctx, leaseAll)
	if len(again) != 1 || again[0].ID != s[1].ID {
		t.Errorf("after release got %+v, want row %d", again, s[1].ID)
	}
	b.l.ReleaseLeased(ctx, []int64{s[1].ID})
	b.advance(11 * time.Minute)
	again, _ = b.l.Lease(ctx, leaseAll)
	if len(again) != 2 {
		t.Fatalf("after the queued lease ran out got %+v", again)
	}
	for _, r := range again {
		if r.Republish != (r.ID == s[0].ID) {
			t.Errorf("row %d republish=%v", r.ID, r.Republish)
		}
	}
	bl, err := b.l.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bl.Owed != 2 || bl.ByState[StateLeased] != 2 || bl.OldestOwedAge != 11*time.Minute {
		t.Errorf("backlog: %+v", bl)
	}
}

// The lease must read the partial indexes of pending rows and rows in
// flight, so its cost follows the rows owed rather than the size of the
// ledger.
func TestLeaseUsesThePartialIndex(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state,
	        settled_at, delivered_at, payload)
	    SELECT 't' || (g % 50), 'r' || g, 'sms', 'k', 'ref' || g, $1::timestamptz - g * interval '1 second', 'delivered', $1, $1, '{}'
	      FROM generate_series(1, 200000) g`, b.now); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload,
	        created_at)
	    SELECT 't' || (g % 50), 'owed' || g, 'sms', 'k', 'ref' || g, $1::timestamptz - g * interval '1 second', '{}', $1
	      FROM generate_series(1, 100) g`, b.now); err != nil {
			return err
		}
		_, err := tx.Exec(`ANALYZE owed_notifications`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	text, _, err := b.l.ExplainLease(ctx, LeaseParams{Limit: 500, For: time.Minute, Ahead: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, index := range []string{"owed_notifications_pending_owed", "owed_notifications_in_flight"} {
		if !strings.Contains(text, index) {
			t.Errorf("lease plan does not use %s:\n%s", index, text)
		}
	}
	if seqScansBut(t, text, b.emptyPartitions(t)) > 0 {
		t.Errorf("lease plan scans the ledger sequentially:\n%s", text)
	}
	got, err := b.l.Lease(ctx, LeaseParams{Limit: 500, For: time.Minute})
	if err != nil || len(got) != 100 {
		t.Errorf("leased %d (err %v), want the 100 owed", len(got), err)
	}
}

// seqScans counts the nodes of an EXPLAIN (FORMAT JSON) plan that read a
// ledger table (owed_notifications, owed_notification_attempts,
// owed_receipts, or a partition of one) sequentially.
func seqScans(t *testing.T, plan string) int {
	t.Helper()
	return seqScansBut(t, plan, nil)
}

// emptyPartitions lists the partitions of b's ledger tables that hold
// nothing as the planner sees them (no page): next month's, and the legacy
// partition a fresh install has. The planner may read one sequentially,
// which reads no page, so the scan tests leave them out.
func (b *bundle) emptyPartitions(t *testing.T) map[string]bool {
	t.Helper()
	rows, err := b.db.Owner.Query(`SELECT relname FROM pg_class WHERE relispartition AND relkind = 'r' AND pg_relation_size(oid) = 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	empty := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		empty[name] = true
	}
	return empty
}

// seqScansBut is seqScans leaving out the relations of skip.
func seqScansBut(t *testing.T, plan string, skip map[string]bool) int {
	t.Helper()
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		t.Fatalf("EXPLAIN output: %v\n%s", err, plan)
	}
	var walk func(n map[string]any) int
	walk = func(n map[string]any) int {
		c := 0
		if rel, _ := n["Relation Name"].(string); n["Node Type"] == "Seq Scan" && ledgerTable(rel) && !skip[rel] {
			c++
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				c += walk(m)
			}
		}
		return c
	}
	return walk(doc[0]["Plan"].(map[string]any))
}

func TestSettleDeliveredBatchScopesEachRowToItsTenant(t *testing.T) {
	b := setup(t)
	a := mustSchedule(t, b, "tenant-a", row("alice", "A-1", b.now), row("alan", "A-2", b.now))
	bb := mustSchedule(t, b, "tenant-b", row("bob", "B-1", b.now))
	p := ClaimParams{DueAt: b.now, LeaseFor: time.Minute}
	ha0, ha1, hb0 := mustClaim(t, b, "tenant-a", a[0].ID, p), mustClaim(t, b, "tenant-a", a[1].ID, p), mustClaim(t, b, "tenant-b", bb[0].ID, p)
	// a[1] is already delivered: the batch records the attempt, changes nothing.
	if _, err := b.l.SettleDelivered(ctx, ha1, Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now, ProviderMessageID: "first"}); err != nil {
		t.Fatal(err)
	}
	at := Attempt{Provider: "sandbox", StartedAt: b.now, ProviderMessageID: "m", HTTPStatus: 202}
	changed, errs, err := b.l.SettleDeliveredBatch(ctx, []Delivered{
		{ha0, at},
		{ha1, at},
		{hb0, at},
		{Hold{"tenant-b", a[0].ID, ha0.Seq}, at}, // forged: tenant-a's row under tenant-b
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, false}; fmt.Sprint(changed) != fmt.Sprint(want) {
		t.Errorf("changed = %v, want %v", changed, want)
	}
	if errs == nil || errs[3] != ErrNotFound || errs[0] != nil {
		t.Errorf("errs = %v, want ErrNotFound only for the forged row", errs)
	}
	d, _ := b.l.Get(ctx, "tenant-a", a[0].ID)
	if d.State != StateDelivered || d.ProviderMessageID != "m" || len(d.History) != 1 || d.History[0].HTTPStatus != 202 {
		t.Errorf("a[0]: %s msg=%q history=%+v", d.State, d.ProviderMessageID, d.History)
	}
	if d, _ := b.l.Get(ctx, "tenant-a", a[1].ID); d.ProviderMessageID != "first" || len(d.History) != 2 {
		t.Errorf("a[1]: msg=%q attempts=%d, want the first message id kept and both attempts recorded", d.ProviderMessageID, len(d.History))
	}
	if d, _ := b.l.Get(ctx, "tenant-b", bb[0].ID); d.State != StateDelivered {
		t.Errorf("b[0]: %s", d.State)
	}
}

func TestClaimForSendBatch(t *testing.T) {
	b := setup(t)
	a := mustSchedule(t, b, "tenant-a", row("alice", "A-1", b.now), row("alan", "A-2", b.now))
	bb := mustSchedule(t, b, "tenant-b", row("bob", "B-1", b.now))
	h := mustClaim(t, b, "tenant-a", a[1].ID, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	b.l.SettleDelivered(ctx, h, Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now})
	claims, errs, err := b.l.ClaimForSendBatch(ctx, []ClaimRequest{
		{"tenant-b", bb[0].ID, b.now},
		{"tenant-a", a[0].ID, b.now},
		{"tenant-a", a[1].ID, b.now},                  // delivered already
		{"tenant-b", a[0].ID, b.now},                  // forged: tenant-a's row under tenant-b
		{"tenant-b", bb[0].ID, b.now.Add(-time.Hour)}, // stale copy
		{"tenant-a", a[0].ID, b.now},                  // a second copy in the same batch
	}, ClaimParams{LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := []ClaimOutcome{ClaimSend, ClaimSend, ClaimSettled, 0, ClaimStale, ClaimHeld}
	for i, w := range want {
		if w == 0 {
			if errs[i] != ErrNotFound {
				t.Errorf("request %d: err %v, want ErrNotFound", i, errs[i])
			}
			continue
		}
		if errs[i] != nil || claims[i].Outcome != w {
			t.Errorf("request %d: %v (err %v), want %v", i, claims[i].Outcome, errs[i], w)
		}
	}
}

// The sweeper's bookkeeping and the workers' batched claims and settles lock
// overlapping rows at the same moment; they must wait for each other, never
// deadlock. Each round puts every row back to leased, in a random order so
// the rows' physical order differs from their id order (as it does in a
// ledger updated for a while), then marks them queued while workers claim
// and settle shuffled batches of the same rows.
func TestConcurrentBookkeepingAndBatchesNeverDeadlock(t *testing.T) {
	b := setup(t)
	b.l = New(b.db.App, clock.Real())
	const n = 400
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	seedOwed(t, b, n, due)
	leased, err := b.l.Lease(ctx, LeaseParams{Limit: n, For: time.Hour})
	if err != nil || len(leased) != n {
		t.Fatalf("lease: %d %v", len(leased), err)
	}
	ids := make([]int64, n)
	for i, r := range leased {
		ids[i] = r.ID
	}
	shuffled := func(rng *rand.Rand, k int) []int64 {
		out := append([]int64(nil), ids...)
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out[:k]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 8; round++ {
		if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
			for _, id := range shuffled(rng, n) {
				if _, err := tx.Exec(`UPDATE owed_notifications SET state = 'leased', lease_until = now() + interval '1 hour',
			        claimed_at = NULL, settled_at = NULL, delivered_at = NULL WHERE id = $1`, id); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		run := func(f func() error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(); err != nil {
					errs <- err
				}
			}()
		}
		// The shuffles are drawn here: rng is not safe for concurrent use.
		markIDs, releaseIDs := shuffled(rng, n), shuffled(rng, n)
		run(func() error { _, err := b.l.MarkQueued(ctx, markIDs, time.Hour); return err })
		run(func() error { _, err := b.l.ReleaseLeased(ctx, releaseIDs); return err })
		for g := 0; g < 3; g++ {
			pick := shuffled(rng, 64)
			run(func() error {
				reqs := make([]ClaimRequest, len(pick))
				for j, id := range pick {
					reqs[j] = ClaimRequest{Tenant: "bulk", ID: id, DueAt: due}
				}
				claims, _, err := b.l.ClaimForSendBatch(ctx, reqs, ClaimParams{LeaseFor: time.Hour})
				if err != nil {
					return err
				}
				rows := make([]Delivered, len(pick))
				for j, id := range pick {
					// A row another batch holds is settled under a stale
					// token: the settle must not deadlock either.
					h := claims[j].Hold
					if claims[j].Outcome != ClaimSend {
						h = Hold{Tenant: "bulk", ID: id}
					}
					rows[j] = Delivered{Hold: h, Attempt: Attempt{Provider: "p", StartedAt: time.Now()}}
				}
				_, _, err = b.l.SettleDeliveredBatch(ctx, rows)
				return err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// A send whose outcome is unknown (a timeout after the request left) is
// released so that the row's next send is flagged as a possible duplicate;
// one that certainly failed is not.
func TestUncertainReleaseFlagsTheNextSend(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", b.now))
	p := ClaimParams{DueAt: b.now, LeaseFor: time.Minute}
	for i, uncertain := range []bool{true, false} {
		id := s[i].ID
		h := mustClaim(t, b, "acme", id, p)
		if err := b.l.ReleaseClaim(ctx, h, 0, 0, "timeout", &Attempt{Provider: "p", StartedAt: b.now,
			FinishedAt: b.now, Outcome: AttemptTransient, Error: "timeout"}, uncertain); err != nil {
			t.Fatal(err)
		}
		c, err := b.l.ClaimForSend(ctx, "acme", id, p)
		if err != nil || c.Outcome != ClaimSend || c.PossibleDuplicate != uncertain {
			t.Errorf("uncertain=%v: reclaim %v possible duplicate=%v (err %v)", uncertain, c.Outcome, c.PossibleDuplicate, err)
		}
	}
}

// Audit summarises every row of one tenant with its sends, and no other
// tenant's.
func TestAuditSummarisesATenantsRows(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", b.now))
	mustSchedule(t, b, "globex", row("g", "G-1", b.now))
	h := mustClaim(t, b, "acme", s[0].ID, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	if _, err := b.l.SettleDelivered(ctx, h, Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now,
		PossibleDuplicate: true}); err != nil {
		t.Fatal(err)
	}
	got, err := b.l.Audit(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]AuditRow{
		s[0].ID: {ID: s[0].ID, State: StateDelivered, Accepted: 1, PossibleDuplicate: true},
		s[1].ID: {ID: s[1].ID, State: StatePending},
	}
	if len(got) != len(want) {
		t.Fatalf("audit returned %+v, want acme's two rows", got)
	}
	for _, r := range got {
		if (r.SettledAt != nil) != (r.State == StateDelivered) {
			t.Errorf("audit row %d has settled_at %v; want it on the settled row only", r.ID, r.SettledAt)
		}
		r.SettledAt = nil
		if r != want[r.ID] {
			t.Errorf("audit row %+v, want %+v", r, want[r.ID])
		}
	}
}
