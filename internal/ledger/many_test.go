package ledger

import (
	"errors"
	"testing"
	"time"
)

// The worker's batches serve many tenants in one statement (owed_claim_many,
// owed_extend_many, owed_settle_delivered_many: the scope is every tenant the
// batch names), yet each row answers only to the tenant its message named: a
// row of globex named as acme's is not found and left as it was, while the
// rows named rightly are claimed, checked before the send and settled, each
// attempt recorded under its own tenant.
func TestBatchesOfManyTenantsKeepEachRowToItsTenant(t *testing.T) {
	b := setup(t)
	a := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	g := mustSchedule(t, b, "globex", row("g", "T-1", b.now), row("h", "T-2", b.now))
	p := ClaimParams{LeaseFor: time.Minute, Revocable: true}
	claims, errs, err := b.l.ClaimForSendBatch(ctx, []ClaimRequest{
		{"acme", a, b.now}, {"globex", g[0].ID, b.now}, {"acme", g[1].ID, b.now},
	}, p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if errs[i] != nil || claims[i].Outcome != ClaimSend || claims[i].Row.Tenant != claims[i].Hold.Tenant {
			t.Fatalf("request %d: %v (err %v), want sent", i, claims[i].Outcome, errs[i])
		}
	}
	if !errors.Is(errs[2], ErrNotFound) {
		t.Fatalf("globex's row named as acme's: %v %v, want ErrNotFound", claims[2].Outcome, errs[2])
	}
	if d, err := b.l.Get(ctx, "globex", g[1].ID); err != nil || d.State != StatePending || d.ClaimSeq != 0 {
		t.Fatalf("globex's row named as acme's is now %s under claim %d (err %v), want it untouched", d.State, d.ClaimSeq, err)
	}
	holds := []Hold{claims[0].Hold, claims[1].Hold, {Tenant: "acme", ID: g[1].ID, Seq: 0}}
	started, err := b.l.StartSends(ctx, holds, time.Minute, time.Minute)
	if err != nil || started[0] != nil || started[1] != nil || !errors.Is(started[2], ErrClaimLost) {
		t.Fatalf("start sends: %v (err %v), want the two claims held and the misnamed row not", started, err)
	}
	at := Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now, Outcome: AttemptAccepted, ProviderMessageID: "m"}
	changed, errs, err := b.l.SettleDeliveredBatch(ctx, []Delivered{
		{holds[0], at}, {holds[1], at}, {holds[2], at},
	})
	if err != nil || !changed[0] || !changed[1] || changed[2] || errs == nil || !errors.Is(errs[2], ErrNotFound) {
		t.Fatalf("settle: changed %v errs %v (err %v), want the two rows delivered and the misnamed one not found", changed, errs, err)
	}
	for _, r := range []struct {
		tenant string
		id     int64
	}{{"acme", a}, {"globex", g[0].ID}} {
		d, err := b.l.Get(ctx, r.tenant, r.id)
		if err != nil || d.State != StateDelivered || len(d.History) != 1 || d.ClaimedAt == nil {
			t.Fatalf("%s's row %d: %s, %d attempts, claimed_at %v (err %v), want delivered with one attempt and the send's mark",
				r.tenant, r.id, d.State, len(d.History), d.ClaimedAt, err)
		}
	}
	if d, _ := b.l.Get(ctx, "globex", g[1].ID); d.State != StatePending || len(d.History) != 0 {
		t.Fatalf("globex's misnamed row: %s with %d attempts, want pending with none", d.State, len(d.History))
	}
}

// A batch that names one row twice (a message and its redelivered copy
// claimed together, two sends settled together) answers as if its rows ran
// in turn: the second claim finds the row held by the first, and the second
// settle records its attempt without settling the row again.
func TestBatchNamingOneRowTwiceAnswersInTurn(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	claims, errs, err := b.l.ClaimForSendBatch(ctx, []ClaimRequest{{"acme", id, b.now}, {"acme", id, b.now}},
		ClaimParams{LeaseFor: time.Minute})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("claim: %v %v", errs, err)
	}
	if claims[0].Outcome != ClaimSend || claims[1].Outcome != ClaimHeld {
		t.Fatalf("claims %v and %v, want send then held", claims[0].Outcome, claims[1].Outcome)
	}
	h := claims[0].Hold
	at := Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now, Outcome: AttemptAccepted, ProviderMessageID: "m"}
	changed, errs, err := b.l.SettleDeliveredBatch(ctx, []Delivered{{h, at}, {h, at}})
	if err != nil || errs != nil || !changed[0] || changed[1] {
		t.Fatalf("settle: changed %v errs %v (err %v), want the first settle to stamp the row and the second not", changed, errs, err)
	}
	if d := mustGet(t, b, id); d.State != StateDelivered || len(d.History) != 2 || d.Attempts != 2 {
		t.Fatalf("row: %s with %d attempts recorded (%d counted), want delivered with both", d.State, len(d.History), d.Attempts)
	}
}

// The check before the send leaves a lease that still has the send's keep
// left as it is, so right after a claim it changes no indexed column (its
// update can be HOT), and extends a shorter one to the full lease, by the
// ledger's clock either way.
func TestStartSendsExtendsOnlyALeaseShorterThanItKeeps(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	h := mustClaim(t, b, "acme", id, ClaimParams{DueAt: b.now, LeaseFor: time.Minute, Revocable: true})
	claimed := b.now
	b.advance(10 * time.Second)
	if errs, err := b.l.StartSends(ctx, []Hold{h}, time.Minute, 30*time.Second); err != nil || errs[0] != nil {
		t.Fatalf("start: %v %v", errs, err)
	}
	d := mustGet(t, b, id)
	if d.LeaseUntil == nil || !d.LeaseUntil.Equal(claimed.Add(time.Minute)) || d.ClaimedAt == nil || !d.ClaimedAt.Equal(b.now) {
		t.Fatalf("after the check 10 s into a 1 min claim: lease until %v, claimed at %v; want the claim's lease kept and the send's mark stamped now",
			d.LeaseUntil, d.ClaimedAt)
	}
	b.advance(40 * time.Second)
	if errs, err := b.l.StartSends(ctx, []Hold{h}, time.Minute, 30*time.Second); err != nil || errs[0] != nil {
		t.Fatalf("second start: %v %v", errs, err)
	}
	if d := mustGet(t, b, id); d.LeaseUntil == nil || !d.LeaseUntil.Equal(b.now.Add(time.Minute)) {
		t.Fatalf("with 10 s of the lease left and 30 s to keep: lease until %v, want a full minute from now", d.LeaseUntil)
	}
	if _, err := b.l.StartSends(ctx, []Hold{h}, time.Minute, 2*time.Minute); err == nil {
		t.Fatal("a keep longer than the lease was accepted")
	}
}
