package pace

import (
	"strings"
	"testing"
	"time"
)

// On-call's hold stops an account apart from its circuit: Admit answers it
// and hands out no probe even when the circuit's pause has passed, a good
// probe's Close leaves it in place, and only Resume lifts it. Held lists
// it, with who held it and why. Holding and resuming are on-call's login's
// (owed_operator); the workers' circuit runs as the runtime role, which
// cannot write a hold.
func TestAccountHoldOutlastsTheProbe(t *testing.T) {
	b := setup(t)
	accounts, oncall := NewAccounts(b.db.App, b.clk), NewAccounts(b.db.Operator, b.clk)
	if err := accounts.Trip(ctx, "twilio", time.Minute, "20003", "Authenticate"); err != nil {
		t.Fatal(err)
	}
	if err := oncall.Hold(ctx, "twilio", "carrier incident", "alice"); err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(time.Hour)
	a, err := accounts.Admit(ctx, "twilio", time.Minute)
	if err != nil || a.Probe || !a.Held() || a.Hold.Reason != "carrier incident" || a.Hold.Actor != "alice" ||
		!a.Hold.Since.Equal(b.clk.Now().Add(-time.Hour)) {
		t.Fatalf("Admit on a held account = %+v (hold %+v), %v; want held by alice an hour ago and no probe", a, a.Hold, err)
	}
	// Holding again replaces the reason and keeps the instant.
	if err := oncall.Hold(ctx, "twilio", "still down", "bob"); err != nil {
		t.Fatal(err)
	}
	held, err := accounts.Held(ctx)
	if err != nil || len(held) != 1 || held[0].Account != "twilio" || held[0].Actor != "bob" ||
		held[0].Reason != "still down" || !held[0].Since.Equal(b.clk.Now().Add(-time.Hour)) {
		t.Fatalf("Held = %+v, %v", held, err)
	}
	if was, err := accounts.Close(ctx, "twilio"); err != nil || !was {
		t.Fatalf("Close = %v, %v; want the circuit to have been open", was, err)
	}
	if st, err := accounts.State(ctx, "twilio"); err != nil || !st.Held() || st.Open() {
		t.Fatalf("after a good probe: %+v, %v; want still held, circuit closed", st, err)
	}
	if was, err := oncall.Resume(ctx, "twilio", "alice", ""); err != nil || !was {
		t.Fatalf("Resume = %v, %v; want it to have been held", was, err)
	}
	if st, err := accounts.State(ctx, "twilio"); err != nil || st.Held() {
		t.Fatalf("after Resume: %+v, %v; want not held", st, err)
	}
	if was, err := oncall.Resume(ctx, "twilio", "alice", ""); err != nil || was {
		t.Fatalf("second Resume = %v, %v; want nothing to resume", was, err)
	}
	// A hold on an account that never sent creates its row.
	if err := oncall.Hold(ctx, "sendgrid", "r", "a"); err != nil {
		t.Fatal(err)
	}
	if st, err := accounts.State(ctx, "sendgrid"); err != nil || !st.Held() || st.Wait != 0 {
		t.Fatalf("fresh hold: %+v, %v", st, err)
	}
	if _, err := b.db.App.Exec(`UPDATE owed_provider_pace SET held_at = NULL, hold_reason = NULL, hold_actor = NULL`); err == nil {
		t.Fatal("the runtime role lifted a hold with plain SQL")
	}
}

// A tenant's pause stays until Resume; List shows it with who and why, and
// the texts are bounded.
func TestTenantPauseAndResume(t *testing.T) {
	b := setup(t)
	tenants := NewTenants(b.db.Operator, b.clk)
	if err := tenants.Pause(ctx, "acme", "runaway campaign", "alice"); err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(time.Minute)
	if err := tenants.Pause(ctx, "globex", "unpaid", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := tenants.Pause(ctx, "acme", "still running", "carol"); err != nil {
		t.Fatal(err)
	}
	list, err := NewTenants(b.process(t), nil).List(ctx)
	if err != nil || len(list) != 2 || list[0].Tenant != "acme" || list[0].Actor != "carol" ||
		list[0].Reason != "still running" || !list[0].Since.Equal(b.clk.Now().Add(-time.Minute)) || list[1].Tenant != "globex" {
		t.Fatalf("List = %+v, %v; want acme (by carol, paused a minute ago) then globex", list, err)
	}
	if was, err := tenants.Resume(ctx, "acme", "alice", ""); err != nil || !was {
		t.Fatalf("Resume = %v, %v", was, err)
	}
	if was, err := tenants.Resume(ctx, "acme", "alice", ""); err != nil || was {
		t.Fatalf("second Resume = %v, %v; want nothing to resume", was, err)
	}
	if list, err := tenants.List(ctx); err != nil || len(list) != 1 || list[0].Tenant != "globex" {
		t.Fatalf("List after resume = %+v, %v", list, err)
	}
	for _, c := range []struct{ tenant, reason, actor, want string }{
		{"", "r", "a", "tenant"},
		{"acme", "", "a", "reason"},
		{"acme", "r", "", "actor"},
		{"acme", strings.Repeat("r", MaxPauseReason+1), "a", "reason"},
		{"acme", "r", strings.Repeat("a", MaxPauseActor+1), "actor"},
	} {
		if err := tenants.Pause(ctx, c.tenant, c.reason, c.actor); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Pause(%q, %d bytes, %d bytes) = %v, want an error naming %s", c.tenant, len(c.reason), len(c.actor), err, c.want)
		}
	}
	if _, err := b.db.App.Exec(`DELETE FROM owed_tenant_pauses`); err == nil {
		t.Fatal("the runtime role lifted a tenant's pause with plain SQL")
	}
}

// An unlimited limiter's Next trusts a reading without a shared pause for
// CacheFor: its own 429 holds it back at once, and another process's
// reaches it once that reading ages out.
func TestUnlimitedNextSeesPausesThroughItsCache(t *testing.T) {
	b := setup(t)
	a := mustNew(t, b.process(t), "sandbox", Unlimited)
	if w, err := a.Next(ctx); err != nil || w != 0 {
		t.Fatalf("Next on a fresh account = %s, %v; want 0", w, err)
	}
	if err := a.Pause(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if w, err := a.Next(ctx); err != nil || w < 59*time.Minute {
		t.Fatalf("Next after its own 429 = %s, %v; want about an hour", w, err)
	}
	b2 := mustNew(t, b.process(t), "sendgrid", Unlimited)
	if w, err := b2.Next(ctx); err != nil || w != 0 {
		t.Fatalf("Next on a fresh account = %s, %v; want 0", w, err)
	}
	if err := mustNew(t, b.process(t), "sendgrid", Unlimited).Pause(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		w, err := b2.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w > 59*time.Minute {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("another process's 429 never reached Next (%s)", w)
		}
	}
}
