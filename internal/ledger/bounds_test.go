package ledger

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/tenant"
)

// countSharedPayloads counts tenant's rows in owed_event_payloads.
func countSharedPayloads(t *testing.T, b *bundle, tn string) int {
	t.Helper()
	var n int
	if err := tenant.InTx(ctx, b.db.App, tn, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*) FROM owed_event_payloads`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// An event's payload is stored once however many rows carry it, and every
// reader of a row (lookups, the worker's claim, the intent trigger's new
// row) sees it as the row's own.
func TestSharedPayloadIsStoredOnce(t *testing.T) {
	b := setup(t)
	shared := textPayload("the event")
	rows := make([]NewNotification, 600)
	for i := range rows {
		rows[i] = row(fmt.Sprintf("+1555%07d", i), "EV-1", b.now)
		rows[i].Payload = shared
	}
	rows[1].Payload = textPayload("my own")
	rows[599] = rows[0] // the same key twice, in different chunks
	out := mustSchedule(t, b, "acme", rows...)
	if !out[0].Created || out[599].Created || out[599].ID != out[0].ID {
		t.Errorf("repeated key: %+v and %+v, want one row created once", out[0], out[599])
	}
	if n := countSharedPayloads(t, b, "acme"); n != 1 {
		t.Fatalf("%d shared payloads, want 1", n)
	}
	var inline, refs int
	if err := tenant.InTx(ctx, b.db.App, "acme", func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT count(*) FILTER (WHERE payload IS NOT NULL),
		                           count(*) FILTER (WHERE payload_id IS NOT NULL) FROM owed_notifications`).Scan(&inline, &refs)
	}); err != nil {
		t.Fatal(err)
	}
	if inline != 1 || refs != 598 {
		t.Errorf("%d rows with their own payload and %d sharing one, want 1 and 598", inline, refs)
	}
	want := `{"text": "the event"}`
	if d := mustGet(t, b, out[0].ID); string(d.Payload) != want {
		t.Errorf("get: payload %s, want %s", d.Payload, want)
	}
	if d := mustGet(t, b, out[1].ID); string(d.Payload) != `{"text": "my own"}` {
		t.Errorf("get: own payload %s", d.Payload)
	}
	if c := claimAt(t, b, out[2].ID, b.now); string(c.Row.Payload) != want {
		t.Errorf("claim: payload %s, want %s", c.Row.Payload, want)
	}
	claims, errs, err := b.l.ClaimForSendBatch(ctx, []ClaimRequest{{"acme", out[3].ID, b.now}}, ClaimParams{LeaseFor: 60e9})
	if err != nil || errs[0] != nil || string(claims[0].Row.Payload) != want {
		t.Errorf("batch claim: %+v %v %v, want payload %s", claims, errs, err, want)
	}

	// A replay creates no row, so it keeps no second copy.
	again := mustSchedule(t, b, "acme", rows...)
	if again[0].Created || again[0].ID != out[0].ID {
		t.Errorf("replay: %+v", again[0])
	}
	if n := countSharedPayloads(t, b, "acme"); n != 1 {
		t.Errorf("after a replay: %d shared payloads, want 1", n)
	}

	// A snooze of a row delivered while it was in flight schedules a new
	// row; it carries the shared payload too.
	if _, err := b.l.Reschedule(ctx, "acme", "follow_up", "EV-1", b.now.Add(60e9*60)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.SettleDelivered(ctx, heldNow(t, b, out[2].ID), Attempt{Provider: "p", StartedAt: b.now, FinishedAt: b.now}); err != nil {
		t.Fatal(err)
	}
	found, err := b.l.Find(ctx, "acme", Filter{Recipient: rows[2].Recipient})
	if err != nil || len(found) != 2 || found[0].ID == out[2].ID || string(found[0].Payload) != want {
		t.Errorf("new row after the snooze: %+v %v, want a second row with payload %s", found, err, want)
	}
}

// The database refuses what the validator refuses: every bounded text
// column counts bytes, so a value of multibyte characters under the bound
// in characters but over it in bytes, written by SQL as the owner, is
// refused rather than left for every Go reader to choke on.
func TestTextBoundsCountBytesInTheDatabase(t *testing.T) {
	b := setup(t)
	cols := []struct {
		table, column string
		max           int
	}{
		{"owed_notifications", "recipient", maxRecipientLen},
		{"owed_notifications", "kind", maxKindLen},
		{"owed_notifications", "ref_id", maxRefLen},
		{"owed_notifications", "channel", 64},
		{"owed_notifications", "tenant_id", tenant.MaxLength},
		{"owed_items", "recipient", maxRecipientLen},
		{"owed_items", "kind", maxKindLen},
		{"owed_items", "ref_id", maxRefLen},
	}
	for _, c := range cols {
		for _, over := range []bool{false, true} {
			// "é" is two bytes: max/2 of them fit, max/2+1 do not, and
			// both are well under max characters.
			value := strings.Repeat("é", c.max/2)
			if over {
				value += "é"
			}
			vals := map[string]string{"tenant_id": "acme", "recipient": "r", "channel": "sms", "kind": "k", "ref_id": "x"}
			vals[c.column] = value
			err := insertAsOwner(b, c.table, vals)
			var pqErr *pq.Error
			switch {
			case over && !(errors.As(err, &pqErr) && pqErr.Code == "23514"):
				t.Errorf("%s.%s of %d bytes (%d characters): %v, want a check violation",
					c.table, c.column, len(value), len([]rune(value)), err)
			case !over && err != nil:
				t.Errorf("%s.%s of %d bytes: %v, want it stored", c.table, c.column, len(value), err)
			}
		}
	}
}

// insertAsOwner inserts one row into table as the owning role, across the
// tenant scope, and rolls it back.
func insertAsOwner(b *bundle, table string, vals map[string]string) error {
	tx, err := b.db.Owner.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT set_config('owed.bypass_rls', 'on', true)`); err != nil {
		return err
	}
	q := `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload)
	      VALUES ($1, $2, $3, $4, $5, now(), '{"text": "t"}')`
	if table == "owed_items" {
		q = `INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at, payload)
		     VALUES ($1, $2, $3, $4, $5, now(), '{"text": "t"}')`
	}
	_, err = tx.Exec(q, vals["tenant_id"], vals["recipient"], vals["channel"], vals["kind"], vals["ref_id"])
	return err
}

// payload.Canonical is what the database prints back from jsonb, byte for
// byte, so the size the ledger checks is the size the database checks.
func TestCanonicalIsWhatTheDatabasePrints(t *testing.T) {
	b := setup(t)
	inputs := []string{
		`{"text":"hi"}`,
		`{"bb":1,"a":2,"a":3,"ccc":[1,2,{"z":null,"y":true}]}`,
		`{"text":"é/\u00e9\n\t\r\b\f\u0001\u001f\u007f\"\\ \ud83d\ude00 \/"}`,
		`[1.50e1, -0, -0.0, 1E-3, 100e-1, 0.1e1, 5E+2, 12.3400, 1.0e-2, -1e0, 123456789012345678901234567890, 0.000]`,
		`{"data": {"nested": {"deeper": [[], {}, "", 0]}}, "text": "x"}`,
		"{\"text\" : \"spaced\" ,\n \"html\":\"<b>\" }",
		`{"k":1e999,"m":1e-1000,"n":-12.5e-3}`,
	}
	for _, in := range inputs {
		canon, err := payload.Canonical([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		var db string
		var size int
		if err := b.db.App.QueryRow(`SELECT $1::jsonb::text, octet_length($1::jsonb::text)`, in).Scan(&db, &size); err != nil {
			t.Fatal(err)
		}
		if string(canon) != db || len(canon) != size {
			t.Errorf("%s:\n Go  %s (%d bytes)\n SQL %s (%d bytes)", in, canon, len(canon), db, size)
		}
		if !json.Valid(canon) {
			t.Errorf("%s: canonical form %s is not JSON", in, canon)
		}
	}
}
