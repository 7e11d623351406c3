package ledger

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/tenant"
)

// A mark is the tenant's alone: another tenant's look-up, list and clear of
// the same address see nothing, and the runtime role cannot write one into
// another tenant's scope. Marking again keeps the latest failure, with the
// ledger's time; a clear removes it.
func TestUndeliverableMarksAreTenantScoped(t *testing.T) {
	b := setup(t)
	long := strings.Repeat("é", 3000) + "\x00"
	if err := b.l.MarkUndeliverable(ctx, Undeliverable{Tenant: "acme", Channel: "sms", Address: "+15550100",
		Provider: "twilio", Code: "21610", Reason: long}); err != nil {
		t.Fatalf("mark with a reason longer than the table keeps: %v", err)
	}
	b.advance(time.Minute)
	if err := b.l.MarkUndeliverable(ctx, Undeliverable{Tenant: "acme", Channel: "sms", Address: "+15550100",
		Provider: "twilio", Code: "30006", Reason: "landline"}); err != nil {
		t.Fatal(err)
	}
	if err := b.l.MarkUndeliverable(ctx, Undeliverable{Tenant: "acme", Channel: "email", Address: "a@example.com",
		Provider: "postmark", Code: "406", Reason: "inactive"}); err != nil {
		t.Fatal(err)
	}
	u, ok, err := b.l.LookupUndeliverable(ctx, "acme", "sms", "+15550100")
	if err != nil || !ok || u.Code != "30006" || !u.MarkedAt.Equal(b.now) {
		t.Fatalf("acme's mark: %+v, %v, %v; want the latest (30006) at %s", u, ok, err, b.now)
	}
	if _, ok, err := b.l.LookupUndeliverable(ctx, "globex", "sms", "+15550100"); err != nil || ok {
		t.Errorf("globex sees acme's mark: %v, %v", ok, err)
	}
	if _, ok, _ := b.l.LookupUndeliverable(ctx, "acme", "email", "+15550100"); ok {
		t.Error("the mark is per channel, but the address is marked on email too")
	}
	if l, err := b.l.ListUndeliverable(ctx, "acme", "sms"); err != nil || len(l) != 1 || l[0].Address != "+15550100" {
		t.Errorf("acme's sms marks: %+v, %v; want the one", l, err)
	}
	if l, err := b.l.ListUndeliverable(ctx, "acme", ""); err != nil || len(l) != 2 {
		t.Errorf("acme's marks: %+v, %v; want 2", l, err)
	}
	if l, err := b.l.ListUndeliverable(ctx, "globex", ""); err != nil || len(l) != 0 {
		t.Errorf("globex's marks: %+v, %v; want none", l, err)
	}
	if was, err := b.l.ClearUndeliverable(ctx, "globex", "sms", "+15550100"); err != nil || was {
		t.Errorf("globex clears acme's mark: %v, %v", was, err)
	}
	// The row-level policy refuses a write naming another tenant.
	err = tenant.InTx(ctx, b.db.App, "globex", func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_undeliverable (tenant_id, channel, address, provider, code, reason, marked_at)
VALUES ('acme', 'sms', '+15550199', 'twilio', '21610', 'forged', now())`)
		return err
	})
	if err == nil {
		t.Error("globex's scope wrote a mark into acme's")
	}
	if was, err := b.l.ClearUndeliverable(ctx, "acme", "sms", "+15550100"); err != nil || !was {
		t.Fatalf("clear: %v, %v", was, err)
	}
	if _, ok, err := b.l.LookupUndeliverable(ctx, "acme", "sms", "+15550100"); err != nil || ok {
		t.Errorf("after the clear: marked %v, %v", ok, err)
	}
	if was, err := b.l.ClearUndeliverable(ctx, "acme", "sms", "+15550100"); err != nil || was {
		t.Errorf("second clear: %v, %v; want nothing to clear", was, err)
	}
}

// The claim reads each taken row's mark in its own statement, in the row's
// tenant: a batch of two tenants' rows to one address answers acme's mark
// for acme's row alone, and a row the claim did not take carries none.
func TestClaimReadsTheRecipientsMark(t *testing.T) {
	b := setup(t)
	if err := b.l.MarkUndeliverable(ctx, Undeliverable{Tenant: "acme", Channel: "sms", Address: "r0",
		Provider: "twilio", Code: "21610", Reason: "STOP"}); err != nil {
		t.Fatal(err)
	}
	acme := mustSchedule(t, b, "acme", row("r0", "a", b.now), row("r1", "b", b.now))
	globex := mustSchedule(t, b, "globex", row("r0", "c", b.now))
	reqs := []ClaimRequest{{"globex", globex[0].ID, b.now}, {"acme", acme[0].ID, b.now}, {"acme", acme[1].ID, b.now}}
	claims, errs, err := b.l.ClaimForSendBatch(ctx, reqs, ClaimParams{LeaseFor: time.Minute})
	if err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("claim: %v %v", err, errs)
	}
	if u := claims[1].Undeliverable; claims[1].Outcome != ClaimSend || u == nil || u.Code != "21610" ||
		u.Provider != "twilio" || u.Address != "r0" || !u.MarkedAt.Equal(b.now) {
		t.Errorf("acme's row to r0: %s with mark %+v; want sent with the 21610 mark", claims[1].Outcome, u)
	}
	if claims[0].Undeliverable != nil || claims[2].Undeliverable != nil {
		t.Errorf("marks on globex's r0 and acme's r1: %+v, %+v; want none", claims[0].Undeliverable, claims[2].Undeliverable)
	}
	again, _, err := b.l.ClaimForSendBatch(ctx, reqs[1:2], ClaimParams{LeaseFor: time.Minute})
	if err != nil || again[0].Outcome != ClaimHeld || again[0].Undeliverable != nil {
		t.Errorf("a claim that took nothing: %s with mark %+v, %v; want held and no mark", again[0].Outcome, again[0].Undeliverable, err)
	}
}
