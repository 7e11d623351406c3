package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/pace"
)

// A per-recipient pace spaces one recipient's sends an interval apart and
// takes a turn only within the max wait; a channel without one lets every
// send go; a provider's limit on a recipient holds it back until the limit
// ends, whatever its pace.
func TestRecipientTurns(t *testing.T) {
	clk := clock.NewStub(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	r := newRecipients(clk, map[string]pace.Rate{"telegram": {Count: 1, Per: time.Second}})
	for i, want := range []struct {
		wait    time.Duration
		granted bool
	}{{0, true}, {time.Second, true}, {2 * time.Second, true}, {3 * time.Second, false}, {3 * time.Second, false}} {
		wait, granted := r.turn("telegram", "telegram", "-100", 2*time.Second)
		if wait != want.wait || granted != want.granted {
			t.Errorf("turn %d: %s, %v; want %s, %v", i, wait, granted, want.wait, want.granted)
		}
	}
	if wait, granted := r.turn("telegram", "telegram", "-200", 2*time.Second); wait != 0 || !granted {
		t.Errorf("another chat's first turn: %s, %v; want at once", wait, granted)
	}
	clk.Advance(2 * time.Second)
	if wait, granted := r.turn("telegram", "telegram", "-100", 2*time.Second); wait != time.Second || !granted {
		t.Errorf("turn two seconds later: %s, %v; want the slot a second away", wait, granted)
	}
	for range 3 {
		if wait, granted := r.turn("slack", "slack", "C1", 0); wait != 0 || !granted {
			t.Errorf("a channel without a per-recipient pace: %s, %v; want every send at once", wait, granted)
		}
	}
	if r.limited("slack", "C1", 30*time.Second) {
		t.Fatal("one channel's limit was taken as the account's")
	}
	if wait, granted := r.turn("slack", "slack", "C1", 2*time.Second); wait != 30*time.Second || granted {
		t.Errorf("a limited channel's turn: %s, %v; want refused for the limit's 30s", wait, granted)
	}
	if wait, granted := r.turn("slack", "slack", "C2", 2*time.Second); wait != 0 || !granted {
		t.Errorf("another channel of the limited one's account: %s, %v; want at once", wait, granted)
	}
}

// Several recipients of one account limited within the window are the
// account's limit; the same recipient limited again, another account's
// recipients, or limits older than the window are not.
func TestRecipientLimitsTakenAsTheAccounts(t *testing.T) {
	clk := clock.NewStub(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	r := newRecipients(clk, nil)
	for range recipientLimitsAccountWide {
		if r.limited("telegram", "-100", time.Second) {
			t.Fatal("one chat limited again and again was taken as the bot's limit")
		}
	}
	for i := 1; i < recipientLimitsAccountWide-1; i++ {
		if r.limited("telegram", fmt.Sprint(i), time.Second) || r.limited("other", fmt.Sprint(i), time.Second) {
			t.Fatalf("%d chats limited were taken as the bot's limit", i+1)
		}
	}
	clk.Advance(recipientLimitWindow)
	if r.limited("telegram", "late", time.Second) {
		t.Fatal("limits older than the window counted")
	}
	for i := 1; i < recipientLimitsAccountWide-1; i++ {
		if r.limited("telegram", fmt.Sprint(i), time.Second) {
			t.Fatalf("%d chats limited within the window were taken as the bot's limit", i+1)
		}
	}
	if !r.limited("telegram", "last", time.Second) {
		t.Errorf("%d chats limited within %s were not taken as the bot's limit", recipientLimitsAccountWide, recipientLimitWindow)
	}
}
