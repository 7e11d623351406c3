package ledger

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"
)

// The list's filters each narrow the rows, the pages cover every match
// once, newest due first, and the counts give each state.
func TestFindPageFiltersAndCounts(t *testing.T) {
	b := setup(t)
	rows := []NewNotification{
		row("+442071", "A", b.now.Add(time.Hour)),
		row("+442072", "B", b.now.Add(2*time.Hour)),
		row("+331", "C", b.now.Add(3*time.Hour)),
		row("+442073", "D", b.now.Add(-time.Hour)),
	}
	rows[2].Channel, rows[2].Payload = "email", []byte(`{"text":"hello","subject":"hi"}`)
	rows[3].Kind = "reminder"
	got := mustSchedule(t, b, "acme", rows...)
	mustSchedule(t, b, "globex", row("+442079", "G", b.now.Add(time.Hour)))
	h := mustClaim(t, b, "acme", got[3].ID, ClaimParams{DueAt: rows[3].DueAt, LeaseFor: time.Minute})
	if _, err := b.l.SettleDelivered(ctx, h, Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now}); err != nil {
		t.Fatal(err)
	}
	ids := func(f Filter) []int64 {
		t.Helper()
		page, _, err := b.l.FindPage(ctx, "acme", f, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, n := range page {
			out = append(out, n.ID)
		}
		return out
	}
	for _, c := range []struct {
		what string
		f    Filter
		want []int64
	}{
		{"everything", Filter{}, []int64{got[2].ID, got[1].ID, got[0].ID, got[3].ID}},
		{"state", Filter{State: StateDelivered}, []int64{got[3].ID}},
		{"channel", Filter{Channel: "email"}, []int64{got[2].ID}},
		{"kind", Filter{Kind: "reminder"}, []int64{got[3].ID}},
		{"recipient prefix", Filter{RecipientPrefix: "+4420"}, []int64{got[1].ID, got[0].ID, got[3].ID}},
		{"due range", Filter{DueFrom: b.now, DueTo: b.now.Add(2 * time.Hour)}, []int64{got[0].ID}},
		{"settled range", Filter{SettledFrom: b.now.Add(-time.Minute), SettledTo: b.now.Add(time.Minute)}, []int64{got[3].ID}},
		{"settled after", Filter{SettledFrom: b.now.Add(time.Minute)}, nil},
	} {
		if g := ids(c.f); !equalIDs(g, c.want) {
			t.Errorf("%s: %v, want %v", c.what, g, c.want)
		}
	}
	// Two rows a page: the pages cover the four rows once, in order.
	var seen []int64
	var from *Position
	for range 4 {
		page, next, err := b.l.FindPage(ctx, "acme", Filter{Limit: 2}, from)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range page {
			seen = append(seen, n.ID)
		}
		if next == nil {
			break
		}
		p, err := ParseCursor(next.Cursor())
		if err != nil {
			t.Fatal(err)
		}
		from = &p
	}
	if want := ids(Filter{}); !equalIDs(seen, want) {
		t.Errorf("the pages read %v, want %v", seen, want)
	}
	c, err := b.l.Count(ctx, "acme", Filter{RecipientPrefix: "+44"})
	if err != nil || c.Total != 3 || c.ByState[StatePending] != 2 || c.ByState[StateDelivered] != 1 || c.AtLeast {
		t.Errorf("Count = %+v, %v; want 2 pending and 1 delivered", c, err)
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The list and its count read an index of the tenant's rows (the planner
// picks owed_notifications_tenant_due, or the schedule key for a recipient
// prefix, or tenant_ref), never the whole ledger, whatever filters are set.
func TestFindPageUsesTheTenantIndex(t *testing.T) {
	b := setup(t)
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state,
	        settled_at, delivered_at, payload)
	    SELECT 't' || (g % 50), 'r' || g, 'sms', 'k', 'ref' || g, $1::timestamptz - g * interval '1 second', 'delivered', $1, $1, '{}'
	      FROM generate_series(1, 30000) g`, b.now); err != nil {
			return err
		}
		_, err := tx.Exec(`ANALYZE owed_notifications`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	empty := b.emptyPartitions(t)
	for _, f := range []Filter{{}, {State: StateFailed, Channel: "sms", Kind: "k", RecipientPrefix: "r1"},
		{DueFrom: b.now.Add(-time.Hour), DueTo: b.now}, {SettledFrom: b.now.Add(-time.Hour), SettledTo: b.now}} {
		for name, q := range map[string][]any{
			"FindPage":  append(f.args("t7"), "infinity", 0, 51),
			"CountFind": append(f.args("t7"), MaxCount),
		} {
			text := map[string]string{"FindPage": qFindPage, "CountFind": qCountFind}[name]
			var plan string
			err := b.l.withTenant(ctx, "t7", func(tx *txn) error {
				return tx.QueryRow("EXPLAIN (FORMAT JSON) "+text, q...).Scan(&plan)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(plan, `"Index Name": "owed_notifications_`) || seqScansBut(t, plan, empty) > 0 {
				t.Errorf("%s with %+v reads the ledger without an index:\n%s", name, f, plan)
			}
		}
	}
}

// An operator's change of one row: a cancel settles it, a reschedule moves
// it and its expiry, a send now moves it to now and keeps its expiry; a
// settled row, or one a worker is sending, is refused with the reason.
func TestRowChanges(t *testing.T) {
	b := setup(t)
	exp := b.now.Add(5 * time.Hour)
	rows := []NewNotification{row("a", "A", b.now.Add(time.Hour)), row("b", "B", b.now.Add(time.Hour)), row("c", "C", b.now),
		row("d", "D", b.now.Add(time.Hour))}
	rows[1].ExpiresAt = &exp
	rows[3].ExpiresAt = &exp
	got := mustSchedule(t, b, "acme", rows...)

	if c, err := b.l.CancelRow(ctx, "acme", got[0].ID); err != nil || c.Was != StatePending || c.State != StateCancelled {
		t.Fatalf("CancelRow = %+v, %v", c, err)
	}
	var refused *RowRefused
	if _, err := b.l.RescheduleRow(ctx, "acme", got[0].ID, b.now); !errors.As(err, &refused) || !strings.Contains(err.Error(), "settled") {
		t.Errorf("RescheduleRow of a cancelled row = %v, want refused as settled", err)
	}
	c, err := b.l.RescheduleRow(ctx, "acme", got[1].ID, b.now.Add(2*time.Hour))
	if err != nil || !c.DueAt.Equal(b.now.Add(2*time.Hour)) || c.ExpiresAt == nil || !c.ExpiresAt.Equal(exp.Add(time.Hour)) {
		t.Errorf("RescheduleRow = %+v, %v; want due and expiry an hour later", c, err)
	}
	if d, _ := b.l.Get(ctx, "acme", got[1].ID); !d.DueAt.Equal(b.now.Add(2*time.Hour)) || d.QueueGeneration != 1 {
		t.Errorf("the rescheduled row is due %s, generation %d", d.DueAt, d.QueueGeneration)
	}
	c, err = b.l.SendNowRow(ctx, "acme", got[3].ID)
	if err != nil || !c.DueAt.Equal(b.now) || c.ExpiresAt == nil || !c.ExpiresAt.Equal(exp) {
		t.Errorf("SendNowRow = %+v, %v; want due now, expiry kept", c, err)
	}
	if _, err := b.l.SendNowRow(ctx, "acme", got[2].ID); !errors.As(err, &refused) || !strings.Contains(err.Error(), "due already") {
		t.Errorf("SendNowRow of a row due now = %v, want refused", err)
	}
	h := mustClaim(t, b, "acme", got[2].ID, ClaimParams{DueAt: rows[2].DueAt, LeaseFor: time.Minute})
	if _, err := b.l.StartSends(ctx, []Hold{h}, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.CancelRow(ctx, "acme", got[2].ID); !errors.As(err, &refused) || !strings.Contains(err.Error(), "sending it right now") {
		t.Errorf("CancelRow of a row being sent = %v, want refused", err)
	}
	if _, err := b.l.CancelRow(ctx, "globex", got[1].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("CancelRow of another tenant's row = %v, want ErrNotFound", err)
	}
}
