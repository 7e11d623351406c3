package ledger

import (
	"errors"
	"testing"
	"time"
)

// deliveredVia schedules a due row for tenant and settles it delivered
// through provider with message id msgID, as a worker does.
func deliveredVia(t *testing.T, b *bundle, tenant, ref, provider, msgID string) int64 {
	t.Helper()
	id := mustSchedule(t, b, tenant, row("+1555", ref, b.now))[0].ID
	h := mustClaim(t, b, tenant, id, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	if _, err := b.l.SettleDelivered(ctx, h, Attempt{Provider: provider, StartedAt: b.now, FinishedAt: b.now,
		ProviderMessageID: msgID, HTTPStatus: 201}); err != nil {
		t.Fatalf("settle: %v", err)
	}
	return id
}

func at(t time.Time) *time.Time { return &t }

func mustRecord(t *testing.T, b *bundle, r Receipt) ReceiptResult {
	t.Helper()
	res, err := b.l.RecordReceipt(ctx, r)
	if err != nil {
		t.Fatalf("record %+v: %v", r, err)
	}
	return res
}

// A receipt finds its row in whichever tenant sent it, changes no state,
// and sets the confirmed outcome: a final word outranks an interim one
// whatever the order they arrive in, the later of two final words wins,
// and a replay records nothing.
func TestReceiptsSetTheConfirmedOutcome(t *testing.T) {
	b := setup(t)
	id := deliveredVia(t, b, "globex", "T-1", "twilio:AC1", "SM1")
	t0 := b.now.Add(time.Minute)

	res := mustRecord(t, b, Receipt{Provider: "twilio", ProviderMessageID: "SM1", Status: ReceiptDelivered, OccurredAt: at(t0)})
	if !res.Known || !res.Recorded {
		t.Fatalf("first receipt: %+v, want known and recorded", res)
	}
	// "sent" arriving after "delivered" does not take the outcome back.
	mustRecord(t, b, Receipt{Provider: "twilio", ProviderMessageID: "SM1", Status: ReceiptSent, OccurredAt: at(t0.Add(-time.Second))})
	// The same receipt again is a replay.
	if res := mustRecord(t, b, Receipt{Provider: "twilio", ProviderMessageID: "SM1", Status: ReceiptDelivered, OccurredAt: at(t0)}); !res.Known || res.Recorded {
		t.Errorf("replay: %+v, want known, not recorded", res)
	}
	d, err := b.l.Get(ctx, "globex", id)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StateDelivered || d.ReceiptStatus != ReceiptDelivered || d.ConfirmedAt == nil || !d.ConfirmedAt.Equal(t0) {
		t.Errorf("after delivered then sent: state %s outcome %+v, want delivered, delivered at %s", d.State, d.Outcome, t0)
	}
	if len(d.Receipts) != 2 || d.Receipts[0].Status != ReceiptSent || d.Receipts[1].Status != ReceiptDelivered {
		t.Errorf("receipts %+v, want sent then delivered, once each", d.Receipts)
	}

	// A bounce reported later wins over the delivery, and the row stays
	// delivered.
	mustRecord(t, b, Receipt{Provider: "twilio", ProviderMessageID: "SM1", Status: ReceiptBounced, Code: "30003", OccurredAt: at(t0.Add(time.Hour))})
	if d, err = b.l.Get(ctx, "globex", id); err != nil {
		t.Fatal(err)
	}
	if d.State != StateDelivered || d.ReceiptStatus != ReceiptBounced || d.ReceiptCode != "30003" {
		t.Errorf("after a later bounce: state %s outcome %+v, want delivered with receipt bounced (30003)", d.State, d.Outcome)
	}

	// Another tenant never sees the receipts; another provider family's
	// id with the same text is unknown; a row not yet answered for has no
	// outcome.
	if _, err := b.l.Get(ctx, "acme", id); !errors.Is(err, ErrNotFound) {
		t.Errorf("acme reading globex's row: %v", err)
	}
	if res := mustRecord(t, b, Receipt{Provider: "sendgrid", ProviderMessageID: "SM1", Status: ReceiptDelivered}); res.Known || res.Recorded {
		t.Errorf("the id under another provider: %+v, want unknown", res)
	}
	var n int
	if err := b.db.Owner.QueryRow(`SELECT count(*) FROM owed_receipts`).Scan(&n); err != nil || n != 3 {
		t.Errorf("owed_receipts holds %d rows (err %v), want 3", n, err)
	}
	if err := b.db.App.QueryRow(`SELECT count(*) FROM owed_receipts`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the application role unscoped sees %d receipts (err %v), want 0", n, err)
	}
	if _, err := b.db.App.Exec(`INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, received_at)
	                            VALUES ('globex', $1, 'twilio', 'SM9', 'delivered', now())`, id); err == nil {
		t.Error("the application role inserted a receipt directly")
	}
}

// A receipt without the provider's time (Twilio's) is replayed as one, and
// Stats separates accepted from confirmed delivered and bounced.
func TestReceiptStats(t *testing.T) {
	b := setup(t)
	since := b.now.Add(-time.Minute)
	delivered := deliveredVia(t, b, "acme", "T-1", "twilio:AC1", "SM1")
	deliveredVia(t, b, "acme", "T-2", "postmark:ops@example.com", "pm-2")
	deliveredVia(t, b, "acme", "T-3", "sendgrid:ops@example.com", "sg-3")
	for range 2 {
		mustRecord(t, b, Receipt{Provider: "twilio", ProviderMessageID: "SM1", Status: ReceiptDelivered})
	}
	mustRecord(t, b, Receipt{Provider: "postmark", ProviderMessageID: "pm-2", Status: ReceiptBounced, Code: "HardBounce", OccurredAt: at(b.now)})
	mustRecord(t, b, Receipt{Provider: "sendgrid", ProviderMessageID: "sg-3", Status: ReceiptDeferred, OccurredAt: at(b.now)})
	d, err := b.l.Get(ctx, "acme", delivered)
	if err != nil || len(d.Receipts) != 1 || d.ConfirmedAt == nil {
		t.Fatalf("a Twilio receipt twice: %+v %+v (err %v), want one, confirmed when received", d.Outcome, d.Receipts, err)
	}
	s, err := b.l.ReceiptStats(ctx, since)
	if err != nil {
		t.Fatal(err)
	}
	if (s != ReceiptStats{Accepted: 3, ConfirmedDelivered: 1, Bounced: 1, Unconfirmed: 1}) {
		t.Errorf("stats %+v, want 3 accepted: 1 confirmed delivered, 1 bounced, 1 unconfirmed", s)
	}
	if _, err := b.l.RecordReceipt(ctx, Receipt{Provider: "twilio", ProviderMessageID: "SM1", Status: "opened"}); err == nil {
		t.Error("a receipt of an unknown status was recorded")
	}
}
