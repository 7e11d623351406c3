package sweep

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/stacktest"
)

// A digest is one message: the sweep leases its members with the rest and
// publishes one envelope naming the digest (and its first member), marking
// every member queued; rows sent alone keep a message each.
func TestSweepPublishesOneMessagePerDigest(t *testing.T) {
	b := setup(t, stacktest.Options{})
	if _, err := b.Ledger.SetDigest(bg, "acme", ledger.Digest{Kind: "follow_up", Window: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	first := b.clk.Now().Add(-10*time.Minute - 30*time.Second)
	members := b.Schedule(t, "acme", 12, first, func(i int, r *ledger.NewNotification) {
		r.Recipient, r.Kind = "agent", "follow_up"
		r.DueAt = first.Add(time.Duration(i) * time.Second)
		r.Payload = json.RawMessage(fmt.Sprintf(`{"text":"ticket %d"}`, i))
	})
	alone := b.Schedule(t, "acme", 3, b.clk.Now().Add(-time.Second), nil)

	if res := b.run(t); res.Leased != 15 || res.Published != 15 {
		t.Fatalf("sweep leased %d and published %d rows, want 15 and 15", res.Leased, res.Published)
	}
	envs := b.consumeAll(t)
	if len(envs) != 4 {
		t.Fatalf("%d messages, want 4: one for the digest, one per row sent alone", len(envs))
	}
	digests := 0
	for _, e := range envs {
		if e.Digest == 0 {
			continue
		}
		digests++
		if e.Digest != members[0].ID || e.ID != members[0].ID || !e.DueAt.Equal(first.Add(10*time.Minute).UTC().Truncate(time.Microsecond)) {
			t.Errorf("the digest's message: %+v, want digest %d due as its window closed", e, members[0].ID)
		}
	}
	if digests != 1 {
		t.Errorf("%d digest messages, want 1", digests)
	}
	for _, s := range append(members, alone...) {
		if d, err := b.Ledger.Get(bg, "acme", s.ID); err != nil || d.State != ledger.StateQueued {
			t.Errorf("row %d: %s %v, want queued", s.ID, d.State, err)
		}
	}
}
