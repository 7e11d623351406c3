package materialise

import (
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// A nudge held for quiet hours follows its item by the time it asked for,
// not by its opening: a run over the unchanged item leaves it held (before,
// each run moved it back into the quiet hours, to be sent there), and a
// moved item's nudge moves and is held again by the windows in force.
func TestHeldNudgeStaysHeldAndFollowsItsItem(t *testing.T) {
	b := setup(t) // Sunday 12:00 UTC
	if _, err := b.ledger.SetQuietHours(ctx, "acme", ledger.QuietHours{Scope: "tenant",
		Windows: []string{"daily 13:00-23:00"}}); err != nil {
		t.Fatal(err)
	}
	opening := b.now.Add(time.Hour)
	start := b.now.Add(2 * time.Hour)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", start, seconds(90*60))
	b.run(t)
	wantHeld := func(asked time.Time) {
		t.Helper()
		rows := b.rows(t, "acme", "CAL-1")
		if len(rows) != 1 || rows[0].State != ledger.StatePending || !rows[0].DueAt.Equal(opening) ||
			rows[0].HeldFrom == nil || !rows[0].HeldFrom.Equal(asked) {
			t.Fatalf("the nudge: %+v; want one pending row held to %s from %s", rows, opening, asked)
		}
	}
	wantHeld(start.Add(-90 * time.Minute))
	b.noop(t)
	wantHeld(start.Add(-90 * time.Minute))

	moved := start.Add(15 * time.Minute)
	moveItem(t, b, "acme", "CAL-1", moved)
	if res := b.run(t); res.Rescheduled != 1 {
		t.Fatalf("run after the move: %+v, want the nudge rescheduled", res)
	}
	wantHeld(moved.Add(-90 * time.Minute))
	b.noop(t)
}
