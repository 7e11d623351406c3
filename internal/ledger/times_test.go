package ledger

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/tenant"
)

// No writer, an application's SQL included, can store a time the ledger's
// readers cannot hold (owed_time_in_range, notifications.sql): each write
// is refused naming its constraint. Issue 25 stored them all: a due_at of
// -infinity then failed every cron run, a BC one stalled the sweep, an
// expires_at of infinity kept a row failing its claim.
func TestNoWriterStoresATimeTheLedgerCannotHold(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	insert := `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload)
	           VALUES ('acme', 'r', 'sms', 'k', 'ref', $1, $2, '{"text":"x"}')`
	for _, c := range []struct {
		what, query, constraint string
		args                    []any
	}{
		{"due_at -infinity", insert, "owed_notifications_due_at_in_range", []any{"-infinity", nil}},
		{"due_at in 44 BC", insert, "owed_notifications_due_at_in_range", []any{"0044-03-15 BC", nil}},
		{"due_at in year 10000", insert, "owed_notifications_due_at_in_range", []any{"10000-01-01", nil}},
		{"expires_at infinity", insert, "owed_notifications_expires_at_in_range", []any{"2026-03-01", "infinity"}},
		{"lease_until infinity", `UPDATE owed_notifications SET state = 'queued', lease_until = 'infinity' WHERE id = $1`,
			"owed_notifications_times_in_range", []any{id}},
		{"a reschedule to infinity", `UPDATE owed_notifications SET intent = 'reschedule', intent_at = now(),
		  intent_due_at = 'infinity', state = 'sending', lease_until = now() WHERE id = $1`,
			"owed_notifications_intent_due_at_in_range", []any{id}},
		{"a reschedule whose expiry is not after it", `UPDATE owed_notifications SET intent = 'reschedule',
		  intent_at = now(), intent_due_at = '9999-12-31 23:59:59.999999+00',
		  intent_expires_at = '9999-12-31 23:59:59.999999+00', state = 'sending', lease_until = now() WHERE id = $1`,
			"owed_notifications_intent_expiry", []any{id}},
		{"an item starting at infinity", `INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at)
		  VALUES ('acme', 'r', 'sms', 'k', 'ref', $1)`, "owed_items_starts_at_in_range", []any{"infinity"}},
	} {
		err := tenant.InTx(ctx, b.db.App, "acme", func(tx *sql.Tx) error {
			_, err := tx.Exec(c.query, c.args...)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), c.constraint) {
			t.Errorf("%s: %v, want refused by %s", c.what, err, c.constraint)
		}
	}
}

// The reproduction of issue 25: a reschedule to 9999-12-31T23:59:59.999999Z
// (how .NET writes DateTime.MaxValue) leaves no room for a row's expiry,
// which moves with it. It is refused naming due_at, for a row in flight and
// an open row alike, before anything is recorded; and the settle batch that
// ends the send in flight goes on with the other rows sharing it. Before,
// the move was recorded on the row in flight (the open row's answered
// 500), and applying it failed every batch touching the row.
func TestRescheduleTheLedgerCannotHoldIsRefused(t *testing.T) {
	b := setup(t)
	exp := b.now.Add(time.Hour)
	var ids []int64
	for _, ref := range []string{"T-flight", "T-other", "T-open"} {
		r := row("a", ref, b.now)
		r.ExpiresAt = &exp
		ids = append(ids, mustSchedule(t, b, "acme", r)[0].ID)
	}
	var holds []Hold
	for _, id := range ids[:2] {
		holds = append(holds, mustClaim(t, b, "acme", id, ClaimParams{DueAt: b.now, LeaseFor: time.Minute}))
	}
	last := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	for _, ref := range []string{"T-flight", "T-open"} {
		res, err := b.l.Reschedule(ctx, "acme", "follow_up", ref, last)
		var v *ValidationError
		if !errors.As(err, &v) || len(v.Fields) != 1 || v.Fields[0].Field != "due_at" {
			t.Errorf("reschedule of %s to %s: %+v (err %v), want refused naming due_at", ref, last.Format(time.RFC3339Nano), res, err)
		}
	}
	if in := readIntent(t, b, "acme", ids[0]); in.Intent != "" {
		t.Errorf("intent %+v recorded on the row in flight, want none", in)
	}
	a := Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now, Outcome: AttemptAccepted}
	changed, errs, err := b.l.SettleDeliveredBatch(ctx, []Delivered{{Hold: holds[0], Attempt: a}, {Hold: holds[1], Attempt: a}})
	if err != nil || errs != nil || !changed[0] || !changed[1] {
		t.Fatalf("the settle batch after the refused reschedule: changed %v errs %v err %v, want both settled", changed, errs, err)
	}
}

// poison makes every update of row id that leaves it matching when fail
// (the owner adds a check NOT VALID, so the row as it is stands): the
// stand-in for a row whose data a batch statement cannot apply.
func poison(t *testing.T, b *bundle, id int64, when string) {
	t.Helper()
	if _, err := b.db.Owner.Exec(fmt.Sprintf(`ALTER TABLE owed_notifications
		ADD CONSTRAINT test_poison_%d CHECK (id <> %d OR NOT (%s)) NOT VALID`, id, id, when)); err != nil {
		t.Fatal(err)
	}
}

// A batch statement never fails because of one row: a row the claim, the
// heartbeat or the settle cannot apply is set aside alone, with the reason,
// and the rest of the batch commits (issue 25: one row failed every batch
// that touched it, for every tenant).
func TestABatchSetsARowItCannotApplyAsideAlone(t *testing.T) {
	b := setup(t)
	var ids []int64
	for _, ref := range []string{"T-1", "T-2", "T-3", "T-4"} {
		ids = append(ids, mustSchedule(t, b, "acme", row("a", ref, b.now))[0].ID)
	}

	// The claim: row 0 cannot be taken; it is settled failed with the
	// reason, answered settled, and row 1 is taken in the same batch.
	poison(t, b, ids[0], "state = 'sending'")
	reqs := []ClaimRequest{{Tenant: "acme", ID: ids[0], DueAt: b.now}, {Tenant: "acme", ID: ids[1], DueAt: b.now}}
	claims, errs, err := b.l.ClaimForSendBatch(ctx, reqs, ClaimParams{LeaseFor: time.Minute})
	if err != nil {
		t.Fatalf("claim batch: %v, want the poisoned row set aside and the other taken", err)
	}
	if errs[0] != nil || errs[1] != nil || claims[0].Outcome != ClaimSettled || claims[1].Outcome != ClaimSend {
		t.Fatalf("claim batch: %v %v / %v %v (err %v), want the poisoned row settled and the other taken",
			claims[0].Outcome, errs[0], claims[1].Outcome, errs[1], err)
	}
	if d := mustGet(t, b, ids[0]); d.State != StateFailed || !strings.Contains(d.LastError, "set aside") ||
		!strings.Contains(d.LastError, "test_poison") {
		t.Errorf("the row the claim could not take: %s %q, want failed with the reason", d.State, d.LastError)
	}

	// The heartbeat: row 2's cannot be applied; it is not held, and row
	// 3's, in the same batch, is extended.
	h2 := mustClaim(t, b, "acme", ids[2], ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	h3 := mustClaim(t, b, "acme", ids[3], ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	poison(t, b, ids[2], "true")
	hb, err := b.l.ExtendClaims(ctx, []Hold{h2, h3}, time.Hour)
	if err != nil {
		t.Fatalf("heartbeat batch: %v, want the poisoned claim lost and the other extended", err)
	}
	if !errors.Is(hb[0], ErrClaimLost) || hb[1] != nil {
		t.Fatalf("heartbeat batch: %v (err %v), want the poisoned claim lost and the other extended", hb, err)
	}
	if d := mustGet(t, b, ids[3]); !d.LeaseUntil.Equal(b.now.Add(time.Hour)) {
		t.Errorf("the other claim's lease runs to %v, want %v", d.LeaseUntil, b.now.Add(time.Hour))
	}

	// The settle: row 3 cannot be settled delivered; it is set aside with
	// the reason, and row 1's accepted send, in the same batch, is
	// recorded.
	poison(t, b, ids[3], "state = 'delivered'")
	a := Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now, Outcome: AttemptAccepted}
	changed, errs, err := b.l.SettleDeliveredBatch(ctx, []Delivered{{Hold: h3, Attempt: a}, {Hold: claims[1].Hold, Attempt: a}})
	if err != nil {
		t.Fatalf("settle batch: %v, want the poisoned row set aside and the other settled", err)
	}
	if !errors.Is(errs[0], ErrSetAside) || errs[1] != nil || !changed[1] {
		t.Fatalf("settle batch: changed %v errs %v (err %v), want the poisoned row set aside and the other settled",
			changed, errs, err)
	}
	if d := mustGet(t, b, ids[3]); d.State != StateFailed || !strings.Contains(d.LastError, "set aside") {
		t.Errorf("the row the settle could not apply: %s %q, want failed with the reason", d.State, d.LastError)
	}
	if d := mustGet(t, b, ids[1]); d.State != StateDelivered {
		t.Errorf("the other row: %s, want delivered", d.State)
	}
}

// Rows written before the bounds existed are set aside by the migration,
// each alone: an owed row holding a time the ledger cannot hold is settled
// failed with the column and value in its last_error (two rows whose due
// times both move to the first instant the ledger holds keep distinct
// schedule keys), a reschedule waiting with no room for its expiry is
// refused while its send goes on, and an item starting at infinity is
// cancelled. The checks are then valid.
func TestTheMigrationSetsExistingBadRowsAside(t *testing.T) {
	b := setup(t)
	if _, err := migrate.DownTo(ctx, b.db.Owner, 40); err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, r := range []struct{ name, ref, due, expires, state string }{
		{"minus infinity", "T-1", "-infinity", "", "pending"},
		{"BC", "T-1", "0044-03-15 BC", "", "pending"},
		{"expires at infinity", "T-2", "2026-03-01 12:00+00", "infinity", "queued"},
		{"reschedule without room", "T-3", "2026-03-01 12:00+00", "", "sending"},
		{"good", "T-4", "2026-03-01 12:00+00", "", "pending"},
	} {
		var id int64
		if err := b.db.Owner.QueryRow(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id,
			    due_at, expires_at, state, lease_until, payload)
			VALUES ('acme', 'a', 'sms', 'follow_up', $1, $2::timestamptz, nullif($3, '')::timestamptz, $4,
			        CASE WHEN $4 = 'pending' THEN NULL ELSE now() + interval '1 hour' END, '{"text":"x"}')
			RETURNING id`, r.ref, r.due, r.expires, r.state).Scan(&id); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		ids[r.name] = id
	}
	if _, err := b.db.Owner.Exec(`UPDATE owed_notifications SET intent = 'reschedule', intent_at = now(),
		intent_due_at = '9999-12-31 23:59:59.999999+00', intent_expires_at = '9999-12-31 23:59:59.999999+00'
		WHERE id = $1`, ids["reschedule without room"]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Owner.Exec(`INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at)
		VALUES ('acme', 'a', 'sms', 'meeting_soon', 'CAL-1', 'infinity')`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, b.db.Owner); err != nil {
		t.Fatalf("migrate up over the bad rows: %v", err)
	}

	for name, want := range map[string]string{"minus infinity": "due_at -infinity", "BC": "due_at 0044-03-15",
		"expires at infinity": "expires_at infinity"} {
		d := mustGet(t, b, ids[name])
		if d.State != StateFailed || !strings.Contains(d.LastError, want) {
			t.Errorf("%s: %s %q, want failed naming %q", name, d.State, d.LastError, want)
		}
	}
	first := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	a, c := mustGet(t, b, ids["minus infinity"]), mustGet(t, b, ids["BC"])
	if a.DueAt.Equal(c.DueAt) || a.DueAt.Before(first) || c.DueAt.Before(first) {
		t.Errorf("the two rows moved to due %s and %s, want distinct times from %s on", a.DueAt, c.DueAt, first)
	}
	if d := mustGet(t, b, ids["reschedule without room"]); d.State != StateSending {
		t.Errorf("the row with the reschedule without room is %s, want still sending", d.State)
	}
	if in := readIntent(t, b, "acme", ids["reschedule without room"]); in.Outcome != "refused" {
		t.Errorf("its intent %+v, want refused", in)
	}
	if d := mustGet(t, b, ids["good"]); d.State != StatePending || d.LastError != "" {
		t.Errorf("the good row: %s %q, want untouched", d.State, d.LastError)
	}
	var cancelled bool
	if err := b.db.Owner.QueryRow(`SELECT cancelled_at IS NOT NULL FROM owed_items WHERE ref_id = 'CAL-1'`).
		Scan(&cancelled); err != nil || !cancelled {
		t.Errorf("the item starting at infinity: cancelled %v (err %v), want cancelled", cancelled, err)
	}
	var invalid []string
	rows, err := b.db.Owner.Query(`SELECT conname FROM pg_constraint
		WHERE conrelid IN ('owed_notifications'::regclass, 'owed_items'::regclass) AND NOT convalidated
		  AND (conname LIKE '%\_in\_range' OR conname IN ('owed_notifications_intent_expiry',
		                                                   'owed_notifications_intent_outcome'))`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		invalid = append(invalid, n)
	}
	if len(invalid) != 0 {
		t.Errorf("constraints left NOT VALID: %v", invalid)
	}
}

// A reschedule waiting on a send that is delivered schedules a new row at
// the new time; should the ledger refuse that row, the reschedule is
// refused with the reason and the settle goes on (owed_apply_intent writes
// the row in a block of its own): the statement that ends a send may be a
// batch of many rows.
func TestANewRowTheLedgerRefusesRefusesTheReschedule(t *testing.T) {
	b := setup(t)
	id := mustSchedule(t, b, "acme", row("a", "T-1", b.now))[0].ID
	h := mustClaim(t, b, "acme", id, ClaimParams{DueAt: b.now, LeaseFor: time.Minute})
	later := b.now.Add(time.Hour)
	res, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-1", later)
	wantChange(t, "reschedule in flight", res, err, ChangeResult{InFlight: 1, Intents: 1})
	if _, err := b.db.Owner.Exec(fmt.Sprintf(`ALTER TABLE owed_notifications
		ADD CONSTRAINT test_no_new_row CHECK (due_at <> '%s') NOT VALID`, later.Format(time.RFC3339Nano))); err != nil {
		t.Fatal(err)
	}
	a := Attempt{Provider: "sandbox", StartedAt: b.now, FinishedAt: b.now, Outcome: AttemptAccepted}
	if ok, err := b.l.SettleDelivered(ctx, h, a); err != nil || !ok {
		t.Fatalf("settle of the send: %v %v, want delivered", ok, err)
	}
	if in := readIntent(t, b, "acme", id); in.Outcome != "refused" {
		t.Errorf("intent %+v, want refused", in)
	}
	if d := mustGet(t, b, id); d.State != StateDelivered || !strings.Contains(d.LastError, "test_no_new_row") {
		t.Errorf("row: %s %q, want delivered with the refusal's reason", d.State, d.LastError)
	}
}
