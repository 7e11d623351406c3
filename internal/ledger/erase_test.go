package ledger

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// erasureFixture writes, as the owner, recipient alice-r of tenant acme
// everywhere owed keeps a recipient's data: a delivered row with its own
// payload, attempts (one whose error quotes the address) and a receipt; a
// row still owed; a row a worker is sending right now; two rows of events,
// one sharing its payload with bob, one with a payload alice's alone; her
// contact, her item and the undeliverable mark of her address. globex has a
// recipient of the same name, which the erasure must not touch. It returns
// the ids of acme's delivered row and of the row being sent.
func erasureFixture(t *testing.T, b *bundle) (delivered, sending int64) {
	t.Helper()
	if err := b.db.OwnerTx(ctx, func(tx *sql.Tx) error {
		exec := func(q string, args ...any) error {
			if _, err := tx.Exec(q, args...); err != nil {
				return fmt.Errorf("%w\n%s", err, q)
			}
			return nil
		}
		row := func(tenant, recipient, ref, state, payload string, payloadID any) (int64, error) {
			var id int64
			err := tx.QueryRow(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state,
			        settled_at, delivered_at, payload, payload_id, provider, provider_message_id, lease_until, claim_seq)
			    VALUES ($1, $2, 'sms', 'k', $3, $4::timestamptz, $5,
			        CASE WHEN $5 IN ('delivered', 'failed') THEN $4::timestamptz END,
			        CASE WHEN $5 = 'delivered' THEN $4::timestamptz END, $6::jsonb, $7,
			        CASE WHEN $5 = 'delivered' THEN 'twilio:AC' END, CASE WHEN $5 = 'delivered' THEN 'SM-' || $3 END,
			        CASE WHEN $5 = 'sending' THEN $4::timestamptz + interval '1 hour' END,
			        CASE WHEN $5 = 'sending' THEN 1 ELSE 0 END)
			    RETURNING id`, tenant, recipient, ref, b.now, state, nullJSON(payload), payloadID).Scan(&id)
			return id, err
		}
		shared := func(tenant, text string) (int64, error) {
			var id int64
			err := tx.QueryRow(`INSERT INTO owed_event_payloads (tenant_id, payload) VALUES ($1, $2) RETURNING id`,
				tenant, fmt.Sprintf(`{"text": %q}`, text)).Scan(&id)
			return id, err
		}
		var err error
		if delivered, err = row("acme", "alice-r", "A-1", "delivered", `{"text": "alice-secret-payload"}`, nil); err != nil {
			return err
		}
		if err := exec(`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at,
		        finished_at, outcome, provider_message_id, http_status, error)
		    VALUES ($1, 'acme', 1, 'twilio:AC', $2, $2, 'transient', NULL, 503, 'the carrier could not reach +15550001'),
		           ($1, 'acme', 2, 'twilio:AC', $2, $2, 'accepted', 'SM-A-1', 201, NULL)`, delivered, b.now); err != nil {
			return err
		}
		if err := exec(`INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, received_at)
		    VALUES ('acme', $1, 'twilio', 'SM-A-1', 'delivered', $2)`, delivered, b.now); err != nil {
			return err
		}
		if _, err := row("acme", "alice-r", "A-2", "pending", `{"text": "alice-owed-payload"}`, nil); err != nil {
			return err
		}
		if sending, err = row("acme", "alice-r", "A-3", "sending", `{"text": "alice-sending-payload"}`, nil); err != nil {
			return err
		}
		both, err := shared("acme", "an event for two")
		if err != nil {
			return err
		}
		hers, err := shared("acme", "alice-event-secret")
		if err != nil {
			return err
		}
		for _, r := range []struct {
			recipient, ref string
			payload        int64
		}{{"alice-r", "E-1", both}, {"bob-r", "E-1", both}, {"alice-r", "E-2", hers}} {
			if _, err := row("acme", r.recipient, r.ref, "pending", "", r.payload); err != nil {
				return err
			}
		}
		if _, err := row("globex", "alice-r", "G-1", "delivered", `{"text": "globex-alice-payload"}`, nil); err != nil {
			return err
		}
		if err := exec(`INSERT INTO owed_contacts (tenant_id, recipient, channel, address) VALUES
		        ('acme', 'alice-r', 'sms', '+15550001'), ('acme', 'bob-r', 'sms', '+15550002'),
		        ('globex', 'alice-r', 'sms', '+15550001')`); err != nil {
			return err
		}
		if err := exec(`INSERT INTO owed_undeliverable (tenant_id, channel, address, provider, code, reason, notification_id,
		        marked_at) VALUES ('acme', 'sms', '+15550001', 'twilio', '21610', 'STOP', $1, $2),
		        ('globex', 'sms', '+15550001', 'twilio', '21610', 'STOP', NULL, $2)`, delivered, b.now); err != nil {
			return err
		}
		return exec(`INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at, payload) VALUES
		        ('acme', 'alice-r', 'sms', 'meeting', 'M-1', $1, '{"text": "alice-item-secret"}'),
		        ('globex', 'alice-r', 'sms', 'meeting', 'M-1', $1, '{"text": "globex-item"}')`, b.now)
	}); err != nil {
		t.Fatal(err)
	}
	return delivered, sending
}

func nullJSON(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// aliceMarkers are what erasureFixture wrote of alice at acme: her name,
// her address and her payloads' texts.
var aliceMarkers = []string{"alice-r", "+15550001", "alice-secret-payload", "alice-owed-payload",
	"alice-sending-payload", "alice-event-secret", "alice-item-secret"}

// aliceLeft lists, per table of the schema with a tenant_id, the acme rows
// that still hold one of aliceMarkers, reading every column of every row
// as text: a table added later that keeps a recipient's data is checked
// without this test naming it.
func aliceLeft(t *testing.T, b *bundle) []string {
	t.Helper()
	rows, err := b.db.Owner.Query(`SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
	    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND a.attname = 'tenant_id'
	    ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	if len(tables) < 8 {
		t.Fatalf("found only the tables %v", tables)
	}
	var left []string
	for _, table := range tables {
		for _, m := range aliceMarkers {
			var n int
			if err := b.db.Owner.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s t WHERE t.tenant_id = 'acme'
			    AND strpos(t::text, $1) > 0`, table), m).Scan(&n); err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			if n > 0 {
				left = append(left, fmt.Sprintf("%s: %d rows hold %q", table, n, m))
			}
		}
	}
	return left
}

// Erasing a recipient removes her name, address and payloads from every
// table that holds them, keeps the delivery facts as tombstones, cancels
// what was still owed, leaves a row being sent until its send settles,
// touches no other recipient or tenant, and records the erasure without
// saying whom.
func TestEraseRemovesARecipientEverywhere(t *testing.T) {
	b := setup(t)
	delivered, sending := erasureFixture(t, b)
	if left := aliceLeft(t, b); len(left) == 0 {
		t.Fatal("the fixture wrote nothing of alice")
	}
	req := EraseRequest{Tenant: "acme", Recipient: "alice-r", RequestedBy: "owedctl:test", Reason: "GDPR request 7"}
	e, err := b.l.Erase(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Rows) != 4 || e.Cancelled != 3 || e.InFlight != 1 || e.Attempts != 1 || e.Contacts != 1 ||
		e.Undeliverable != 1 || e.Items != 1 || e.SharedPayloads != 1 {
		t.Errorf("first erasure %+v, want 4 rows (3 cancelled), 1 in flight, 1 attempt, contact, mark, item and payload", e)
	}
	// Only the row being sent still holds her, and only her name and its
	// own payload, and its schedule key (owed_notification_keys) her name
	// while the row does.
	left := aliceLeft(t, b)
	for _, l := range left {
		if !strings.HasPrefix(l, "owed_notifications: 1 rows hold") && l != `owed_notification_keys: 1 rows hold "alice-r"` {
			t.Errorf("after the first erasure: %s", l)
		}
	}
	if len(left) != 3 {
		t.Errorf("after the first erasure: %v, want the row in flight's name and payload", left)
	}

	// The send settles; erasing again takes the row.
	if _, err := b.db.Owner.Exec(`UPDATE owed_notifications SET state = 'delivered', settled_at = $2, delivered_at = $2,
	    lease_until = NULL WHERE id = $1`, sending, b.now); err != nil {
		t.Fatal(err)
	}
	if e, err = b.l.Erase(ctx, req); err != nil || len(e.Rows) != 1 || e.Rows[0] != sending || e.InFlight != 0 {
		t.Fatalf("second erasure %+v (%v), want the settled row %d", e, err, sending)
	}
	if left := aliceLeft(t, b); len(left) > 0 {
		t.Errorf("after the second erasure:\n%s", strings.Join(left, "\n"))
	}

	// The delivery facts stay.
	d, err := b.l.Get(ctx, "acme", delivered)
	if err != nil {
		t.Fatal(err)
	}
	if d.Recipient != fmt.Sprintf("%s%d", ErasePrefix, delivered) || d.State != StateDelivered || d.DeliveredAt == nil ||
		d.ProviderMessageID != "SM-A-1" || len(d.History) != 2 || d.History[0].HTTPStatus != 503 || d.History[0].Error != "erased" ||
		len(d.Receipts) != 1 || string(d.Payload) != "{}" {
		t.Errorf("tombstone %+v", d)
	}
	// bob's row of the shared event keeps its payload; globex keeps alice.
	var bobPayload string
	if err := b.db.Owner.QueryRow(`SELECT p.payload->>'text' FROM owed_notifications n
	    JOIN owed_event_payloads p ON p.tenant_id = n.tenant_id AND p.id = n.payload_id
	    WHERE n.tenant_id = 'acme' AND n.recipient = 'bob-r'`).Scan(&bobPayload); err != nil || bobPayload != "an event for two" {
		t.Errorf("bob's shared payload: %q (%v)", bobPayload, err)
	}
	for _, table := range []string{"owed_notifications", "owed_contacts", "owed_undeliverable", "owed_items"} {
		var n int
		if err := b.db.Owner.QueryRow(`SELECT count(*) FROM ` + table + ` t WHERE t.tenant_id = 'globex'
		    AND (strpos(t::text, 'alice-r') > 0 OR strpos(t::text, '+15550001') > 0)`).Scan(&n); err != nil || n != 1 {
			t.Errorf("globex's %s: %d rows of its alice (%v), want 1", table, n, err)
		}
	}
	// The audit says who and what, never whom.
	var lines int
	if err := b.db.Owner.QueryRow(`SELECT count(*) FROM owed_erasures WHERE tenant_id = 'acme'
	    AND requested_by = 'owedctl:test' AND reason = 'GDPR request 7'`).Scan(&lines); err != nil || lines != 2 {
		t.Errorf("owed_erasures holds %d lines of acme (%v), want 2", lines, err)
	}
}

// A bad request names each field and erases nothing.
func TestEraseValidates(t *testing.T) {
	b := setup(t)
	_, err := b.l.Erase(ctx, EraseRequest{Tenant: "", Recipient: " ", Channel: "pigeon", RequestedBy: ""})
	var v *ValidationError
	if !errors.As(err, &v) {
		t.Fatalf("err %v, want a ValidationError", err)
	}
	for _, f := range []string{"tenant_id", "recipient", "channel", "requested_by"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("%v does not name %s", err, f)
		}
	}
}

// An erasure is on the operators' trail as well as in owed_erasures, with
// who asked, why and how many rows, and without the recipient: on-call
// reads every erasure where it reads every other operator write.
func TestEraseIsOnTheOperatorsTrail(t *testing.T) {
	b := setup(t)
	erasureFixture(t, b)
	e, err := b.l.Erase(ctx, EraseRequest{Tenant: "acme", Recipient: "alice-r", RequestedBy: "owedctl:carol",
		Reason: "GDPR request 8"})
	if err != nil {
		t.Fatal(err)
	}
	var operator, target, reason string
	var count int
	if err := b.db.Owner.QueryRowContext(ctx, `SELECT operator, target, count, reason FROM owed_operator_audit
	    WHERE action = 'erase' ORDER BY id DESC LIMIT 1`).Scan(&operator, &target, &count, &reason); err != nil {
		t.Fatalf("the erasure's audit line: %v", err)
	}
	wantTarget := fmt.Sprintf("tenant=acme erasure=%d channel=every", e.ID)
	if operator != "owedctl:carol" || target != wantTarget || count != len(e.Rows) || reason != "GDPR request 8" {
		t.Errorf("audit line %q %q %d %q, want owedctl:carol %q %d %q", operator, target, count, reason,
			wantTarget, len(e.Rows), "GDPR request 8")
	}
	if strings.Contains(target+reason, "alice") {
		t.Errorf("the audit line names the recipient: %q %q", target, reason)
	}
}
