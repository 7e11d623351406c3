package ledger

import (
	"database/sql"
	"testing"
	"time"
)

// A sample holds the backlog by state and its oldest due age as of now, and
// the sends, the lag and the 429s of the minute before; the minute is
// sampled once, and samples older than HistoryKeep are forgotten.
func TestRecordHistory(t *testing.T) {
	b := setup(t)
	b.clk.Set(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	b.now = b.clk.Now()
	minute := b.now.Truncate(time.Minute)
	got := mustSchedule(t, b, "acme", row("a", "A", b.now.Add(-10*time.Minute)), row("b", "B", b.now.Add(time.Hour)),
		row("c", "C", minute.Add(-90*time.Second)))
	h := mustClaim(t, b, "acme", got[2].ID, ClaimParams{DueAt: minute.Add(-90 * time.Second), LeaseFor: time.Minute})
	sent := minute.Add(-30 * time.Second)
	b.clk.Set(sent)
	if _, err := b.l.SettleDelivered(ctx, h, Attempt{Provider: "sandbox", StartedAt: sent, FinishedAt: sent}); err != nil {
		t.Fatal(err)
	}
	b.clk.Set(b.now)
	// Three 429s of the account in the minute before, as the workers record
	// them (a paced account's pause, an unpaced one's mark): the history
	// counts them, not only the minute.
	for _, q := range []string{`SELECT owed_pace_pause('sandbox', 1000000, $1)`,
		`SELECT owed_pace_record_limited_minute('sandbox', $1)`, `SELECT owed_pace_record_limited_minute('sandbox', $1)`} {
		if _, err := b.db.App.ExecContext(ctx, q, minute.Add(-time.Minute+time.Second)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_history (minute, series, label, value) VALUES ($1, 'backlog', 'pending', 7)`,
			minute.Add(-HistoryKeep-time.Minute))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	depth := int64(3)
	n, err := b.l.RecordHistory(ctx, &depth)
	if err != nil || n == 0 {
		t.Fatalf("RecordHistory = %d, %v", n, err)
	}
	samples, err := b.l.History(ctx, minute.Add(-HistoryKeep-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := map[Sample]bool{
		{Minute: minute, Series: SeriesBacklog, Label: "pending", Value: 2}:                   true,
		{Minute: minute, Series: SeriesBacklog, Label: "sending", Value: 0}:                   true,
		{Minute: minute, Series: SeriesOldestOwedAge, Value: 600}:                             true,
		{Minute: minute, Series: SeriesDeadLetters, Value: 3}:                                 true,
		{Minute: minute.Add(-time.Minute), Series: SeriesSends, Label: "sandbox", Value: 1}:   true,
		{Minute: minute.Add(-time.Minute), Series: SeriesLagP50, Value: 60}:                   true,
		{Minute: minute.Add(-time.Minute), Series: SeriesLagP95, Value: 60}:                   true,
		{Minute: minute.Add(-time.Minute), Series: SeriesLimited, Label: "sandbox", Value: 3}: true,
	}
	for _, s := range samples {
		if s.Minute.Before(minute.Add(-time.Hour)) {
			t.Errorf("a sample older than HistoryKeep was kept: %+v", s)
		}
		delete(want, s)
	}
	if len(want) != 0 {
		t.Errorf("the samples %+v lack %+v", samples, want)
	}
	if n, err := b.l.RecordHistory(ctx, &depth); err != nil || n != 0 {
		t.Errorf("a second sample of the minute wrote %d (%v), want none", n, err)
	}
	// On-call's login, the console's, reads it.
	if s, err := New(b.db.Operator, b.clk).History(ctx, minute); err != nil || len(s) == 0 {
		t.Errorf("the operator's History = %d samples, %v", len(s), err)
	}
}
