package ledger

import (
	"errors"
	"testing"
	"time"
)

// mustClaim claims row id of tenant for a send and returns the claim's
// Hold, failing the test unless the claim took the row.
func mustClaim(t *testing.T, b *bundle, tenant string, id int64, p ClaimParams) Hold {
	t.Helper()
	c, err := b.l.ClaimForSend(ctx, tenant, id, p)
	if err != nil || c.Outcome != ClaimSend {
		t.Fatalf("claim of row %d: %v %v, want send", id, c.Outcome, err)
	}
	return c.Hold
}

// twoClaims schedules one due row, claims it for worker A with a short
// lease, lets the lease run out while A stalls, and claims it again for
// worker B with a long one. It returns the row's id and both holds.
func twoClaims(t *testing.T, b *bundle) (id int64, a, bh Hold) {
	t.Helper()
	id = mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	a = mustClaim(t, b, "acme", id, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	b.advance(2 * time.Minute)
	c, err := b.l.ClaimForSend(ctx, "acme", id, ClaimParams{DueAt: b.now.Add(-2 * time.Minute), LeaseFor: time.Hour})
	if err != nil || c.Outcome != ClaimSend || !c.PossibleDuplicate {
		t.Fatalf("B's claim after A's lease ran out: %v dup=%v err=%v, want send flagged", c.Outcome, c.PossibleDuplicate, err)
	}
	if c.Hold.Seq != a.Seq+1 || c.Hold.Seq != c.Row.ClaimSeq {
		t.Fatalf("B's token %d (row says %d), want A's %d plus one", c.Hold.Seq, c.Row.ClaimSeq, a.Seq)
	}
	return id, a, c.Hold
}

// A worker whose claim was superseded (its lease ran out while it stalled,
// and another worker claimed the row) can no longer change the row: every
// write it tries after its claim reports ErrClaimLost and leaves the row,
// attempts included, exactly as the new claim left it. The new holder's
// writes go through.
func TestSupersededClaimWritesNothing(t *testing.T) {
	b := setup(t)
	id, a, bh := twoClaims(t, b)
	before, err := b.l.Get(ctx, "acme", id)
	if err != nil {
		t.Fatal(err)
	}
	at := &Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now, Outcome: AttemptTransient, Error: "503"}
	writes := map[string]func() error{
		"release":       func() error { return b.l.ReleaseClaim(ctx, a, time.Second, time.Minute, "503", at, true) },
		"settle failed": func() error { return b.l.SettleFailed(ctx, a, "attempts exhausted", at, false) },
		"settle skipped": func() error {
			return b.l.SettleSkipped(ctx, a, "recipient has nothing to receive")
		},
		"settle expired": func() error { return b.l.SettleExpired(ctx, a) },
		"extend": func() error {
			errs, err := b.l.ExtendClaims(ctx, []Hold{a}, time.Hour)
			if err != nil {
				return err
			}
			return errs[0]
		},
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, ErrClaimLost) {
			t.Errorf("A's %s: %v, want ErrClaimLost", name, err)
		}
	}
	after, _ := b.l.Get(ctx, "acme", id)
	if after.State != StateSending || after.ClaimSeq != bh.Seq || !after.LeaseUntil.Equal(*before.LeaseUntil) ||
		!after.ClaimedAt.Equal(*before.ClaimedAt) || after.Attempts != 0 || len(after.History) != 0 {
		t.Errorf("row after A's late writes: %+v (history %+v), want B's claim untouched: %+v", after.Notification,
			after.History, before.Notification)
	}
	b.advance(time.Minute)
	if errs, err := b.l.ExtendClaims(ctx, []Hold{bh, a}, time.Hour); err != nil || errs[0] != nil || !errors.Is(errs[1], ErrClaimLost) {
		t.Fatalf("extend B and A together: %v %v, want B extended and A lost", errs, err)
	}
	if d, _ := b.l.Get(ctx, "acme", id); !d.LeaseUntil.Equal(b.now.Add(time.Hour)) {
		t.Errorf("B's lease after its heartbeat: %s, want an hour from the ledger's now %s", d.LeaseUntil, b.now)
	}
	if err := b.l.ReleaseClaim(ctx, bh, 10*time.Second, time.Minute, "rate limited", nil, false); err != nil {
		t.Fatalf("B's release: %v", err)
	}
	// The release's lease is reckoned by the ledger's clock, from its now.
	if d, _ := b.l.Get(ctx, "acme", id); d.State != StateQueued || !d.LeaseUntil.Equal(b.now.Add(70*time.Second)) {
		t.Errorf("row after B's release: %s lease %s, want queued until 70s after %s", d.State, d.LeaseUntil, b.now)
	}
	// Once released, B's claim is over too.
	if err := b.l.SettleSkipped(ctx, bh, "late"); !errors.Is(err, ErrClaimLost) {
		t.Errorf("B's write after its own release: %v, want ErrClaimLost", err)
	}
}

// An accepted send is always recorded. Made under a superseded claim, it is
// recorded as a possible duplicate; while the claim that superseded it
// still holds the row (its send may be under way) the row is left to that
// claim, and the settle says so; once no live claim holds the row, the
// provider's yes settles it.
func TestAcceptedSendUnderASupersededClaim(t *testing.T) {
	b := setup(t)
	id, a, bh := twoClaims(t, b)
	at := Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now, ProviderMessageID: "from-a"}
	if changed, err := b.l.SettleDelivered(ctx, a, at); changed || !errors.Is(err, ErrClaimLost) {
		t.Fatalf("A's delivered settle while B holds the row: changed=%v err=%v, want ErrClaimLost", changed, err)
	}
	d, _ := b.l.Get(ctx, "acme", id)
	if d.State != StateSending || d.ClaimSeq != bh.Seq || len(d.History) != 1 || !d.History[0].PossibleDuplicate ||
		d.History[0].ProviderMessageID != "from-a" {
		t.Fatalf("row after A's settle: %s seq %d history %+v, want still B's, A's send recorded as a possible duplicate",
			d.State, d.ClaimSeq, d.History)
	}
	at.ProviderMessageID = "from-b"
	if changed, err := b.l.SettleDelivered(ctx, bh, at); !changed || err != nil {
		t.Fatalf("B's delivered settle: changed=%v err=%v", changed, err)
	}
	if d, _ := b.l.Get(ctx, "acme", id); d.State != StateDelivered || d.ProviderMessageID != "from-b" || len(d.History) != 2 ||
		d.History[1].PossibleDuplicate {
		t.Errorf("row after B's settle: %s msg %q history %+v, want delivered by B, B's send not flagged by A's", d.State,
			d.ProviderMessageID, d.History)
	}

	// A claim superseded by one that has since let the row go: the
	// provider's yes settles it.
	id2 := mustSchedule(t, b, "acme", row("b", "T-2", b.now))[0].ID
	a2 := mustClaim(t, b, "acme", id2, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	b.advance(2 * time.Minute)
	b2 := mustClaim(t, b, "acme", id2, ClaimParams{DueAt: b.now.Add(-2 * time.Minute), LeaseFor: time.Minute})
	if err := b.l.ReleaseClaim(ctx, b2, time.Second, time.Minute, "rate limited", nil, false); err != nil {
		t.Fatal(err)
	}
	if changed, err := b.l.SettleDelivered(ctx, a2, at); !changed || err != nil {
		t.Fatalf("A's delivered settle of a released row: changed=%v err=%v, want it settled", changed, err)
	}
	if d, _ := b.l.Get(ctx, "acme", id2); d.State != StateDelivered || len(d.History) != 1 || !d.History[0].PossibleDuplicate {
		t.Errorf("row: %s history %+v, want delivered with its send flagged a possible duplicate", d.State, d.History)
	}
}

// One request the ledger can never take (a blank or NUL tenant id, a due
// time no timestamptz holds) is refused alone, naming the field; the rest of
// its batch is claimed as if it were not there.
func TestClaimBatchRefusesABadRequestAlone(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("a", "T-1", b.now), row("b", "T-2", b.now))
	yearZero := time.Date(1, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600))
	claims, errs, err := b.l.ClaimForSendBatch(ctx, []ClaimRequest{
		{"acme", s[0].ID, b.now},
		{"", s[0].ID, b.now},
		{"ac\x00me", s[1].ID, b.now},
		{"acme", s[1].ID, yearZero},
		{"acme", s[1].ID, b.now},
	}, ClaimParams{LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("a batch with bad requests failed whole: %v", err)
	}
	for i, field := range map[int]string{1: "tenant_id", 2: "tenant_id", 3: "due_at"} {
		var ve *ValidationError
		if !errors.As(errs[i], &ve) || ve.Fields[0].Field != field {
			t.Errorf("request %d: %v, want a ValidationError naming %s", i, errs[i], field)
		}
	}
	for _, i := range []int{0, 4} {
		if errs[i] != nil || claims[i].Outcome != ClaimSend || claims[i].Hold.Seq != 1 {
			t.Errorf("request %d: %v seq %d (err %v), want sent under claim 1", i, claims[i].Outcome, claims[i].Hold.Seq, errs[i])
		}
	}
	// A batch of nothing but bad requests needs no statement at all.
	if _, errs, err := b.l.ClaimForSendBatch(ctx, []ClaimRequest{{"", 1, b.now}}, ClaimParams{LeaseFor: time.Minute}); err != nil || errs[0] == nil {
		t.Errorf("an all-bad batch: errs %v err %v, want the request refused and no batch error", errs, err)
	}
}

// A row held by a live claim is that claim's, even once it has expired: a
// second claim finds it held (and says for how long, by the ledger's
// clock) instead of settling it expired from under its holder.
func TestExpiredRowHeldByALiveClaimIsLeftToIt(t *testing.T) {
	b := setup(t)
	exp := b.now.Add(time.Minute)
	r := row("a", "MEET", b.now)
	r.ExpiresAt = &exp
	id := mustSchedule(t, b, "acme", r)[0].ID
	p := ClaimParams{DueAt: b.now, LeaseFor: 5 * time.Minute}
	mustClaim(t, b, "acme", id, p)
	b.advance(2 * time.Minute)
	c, err := b.l.ClaimForSend(ctx, "acme", id, p)
	if err != nil || c.Outcome != ClaimHeld || c.Wait != 3*time.Minute || !c.Now.Equal(b.now) {
		t.Errorf("claim of an expired row under a live claim: %v wait %s now %s (err %v), want held for 3m at %s",
			c.Outcome, c.Wait, c.Now, err, b.now)
	}
	if d, _ := b.l.Get(ctx, "acme", id); d.State != StateSending {
		t.Errorf("row: %s, want still sending under its claim", d.State)
	}
}
