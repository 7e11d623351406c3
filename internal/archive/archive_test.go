package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

var ctx = context.Background()

// tester is who the tests' restores name.
var tester = Operator{Name: "alice-oncall", Reason: "INC-7: restore January for an audit"}

// seed writes, as the owner, four settled rows of two tenants (one
// delivered with two attempts and a receipt, two of an event sharing a
// payload, one expired without an expiry of its own) and, after them, one
// row still owed. It returns the owed row's id: [1, owed) is settled.
func seed(t *testing.T, db *testdb.DB, now time.Time) int64 {
	t.Helper()
	var owed int64
	if err := db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`INSERT INTO owed_event_payloads (tenant_id, payload) SELECT 'acme', '{"text": "event"}' WHERE $1::timestamptz IS NOT NULL`,
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, state,
			        settled_at, delivered_at, payload, provider, provider_message_id, attempts)
			 VALUES ('acme', 'alice', 'sms', 'k', 'A-1', $1, $1::timestamptz + interval '1 hour', 'delivered', $1, $1,
			         '{"text": "hello alice"}', 'twilio:AC', 'SM-1', 2)`,
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state, settled_at,
			        delivered_at, payload, payload_id)
			 SELECT 'acme', r, 'sms', 'ev', 'E-1', $1, 'delivered', $1, $1, NULL, ` + "(SELECT max(id) FROM owed_event_payloads)" + `
			   FROM unnest(ARRAY['bob', 'carol']) r`,
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state, settled_at,
			        last_error, payload)
			 VALUES ('globex', 'dave', 'email', 'k', 'G-1', $1, 'expired', $1, 'expired', '{"subject": "s", "text": "t"}')`,
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at,
			        outcome, provider_message_id, http_status, error)
			 SELECT id, 'acme', a, 'twilio:AC', $1, $1, CASE a WHEN 1 THEN 'transient' ELSE 'accepted' END,
			        CASE a WHEN 2 THEN 'SM-1' END, CASE a WHEN 1 THEN 503 ELSE 201 END,
			        CASE a WHEN 1 THEN 'could not reach +15550001' END
			   FROM owed_notifications, generate_series(1, 2) a WHERE ref_id = 'A-1'`,
			`INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, received_at)
			 SELECT 'acme', id, 'twilio', 'SM-1', 'delivered', $1 FROM owed_notifications WHERE ref_id = 'A-1'`,
		} {
			if _, err := tx.Exec(q, now); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload)
		    VALUES ('acme', 'erin', 'sms', 'k', 'O-1', now() + interval '1 day', '{"text": "owed"}') RETURNING id`).
			Scan(&owed); err != nil {
			return err
		}
		// The default grace would give a restored row without an expiry
		// one; the restore must take it back.
		_, err := tx.Exec(`INSERT INTO owed_default_grace (scope, grace) VALUES ('default', '1 hour')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return owed
}

// snapshot reads every row of the range's tables as text, by table.
func snapshot(t *testing.T, db *testdb.DB, to int64) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for table, q := range map[string]string{
		"owed_notifications":         `SELECT row_to_json(n)::text FROM owed_notifications n WHERE id < $1 ORDER BY id`,
		"owed_notification_attempts": `SELECT row_to_json(a)::text FROM owed_notification_attempts a WHERE notification_id < $1 ORDER BY id`,
		"owed_receipts":              `SELECT row_to_json(r)::text FROM owed_receipts r WHERE notification_id < $1 ORDER BY id`,
		"owed_event_payloads":        `SELECT row_to_json(p)::text FROM owed_event_payloads p WHERE $1::bigint > 0 ORDER BY id`,
	} {
		rows, err := db.Owner.Query(q, to)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out[table] = append(out[table], s)
		}
		rows.Close()
	}
	return out
}

// dropRange removes the range's rows as dropping their partition will.
func dropRange(t *testing.T, db *testdb.DB, to int64) {
	t.Helper()
	if err := db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`DELETE FROM owed_receipts WHERE notification_id < $1`,
			`DELETE FROM owed_notification_attempts WHERE notification_id < $1`,
			`DELETE FROM owed_notifications WHERE id < $1`,
			`DELETE FROM owed_event_payloads WHERE $1::bigint > 0`,
		} {
			if _, err := tx.Exec(q, to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// An archive of a settled range holds every row of the range, its attempts,
// receipts and shared payloads as JSON lines with a manifest whose
// checksums catch a changed file; a restore after the range is gone brings
// back exactly what was archived, twice changing nothing; a range with a
// row still owed is refused.
func TestWriteAndRestore(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	owed := seed(t, db, now)
	before := snapshot(t, db, owed)

	if _, err := Write(ctx, db.Owner, 1, owed+1, filepath.Join(t.TempDir(), "a"), now); !errors.Is(err, ErrOwed) {
		t.Fatalf("archiving a range with an owed row: %v, want ErrOwed", err)
	}
	dir := filepath.Join(t.TempDir(), "2026-01")
	m, err := Write(ctx, db.Owner, 1, owed, dir, now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"owed_notifications": 4, "owed_notification_attempts": 2, "owed_receipts": 1,
		"owed_event_payloads": 1}
	for _, f := range m.Files {
		if f.Rows != want[f.Table] || int64(len(lines(t, filepath.Join(dir, f.Name)))) != f.Rows {
			t.Errorf("%s: manifest %d rows, file %d lines, want %d", f.Name, f.Rows,
				len(lines(t, filepath.Join(dir, f.Name))), want[f.Table])
		}
	}
	if sums, err := os.ReadFile(filepath.Join(dir, SumsName)); err != nil || strings.Count(string(sums), "\n") != 4 {
		t.Errorf("%s: %q (%v)", SumsName, sums, err)
	}
	if _, err := Write(ctx, db.Owner, 1, owed, dir, now); err == nil {
		t.Error("a second archive into the same folder was written")
	}

	// A changed file is refused before anything is written.
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(bad, "owed_receipts.jsonl.gz")
	b, _ := os.ReadFile(name)
	b[len(b)-1] ^= 0xff
	os.WriteFile(name, b, 0o640)
	if _, err := Restore(ctx, db.Owner, bad, tester); err == nil || !strings.Contains(err.Error(), "owed_receipts.jsonl.gz") {
		t.Errorf("restoring a changed file: %v, want a refusal naming it", err)
	}

	dropRange(t, db, owed)
	res, err := Restore(ctx, db.Owner, dir, tester)
	if err != nil {
		t.Fatal(err)
	}
	for table, n := range want {
		if res.Rows[table] != n {
			t.Errorf("restored %d rows of %s, want %d", res.Rows[table], table, n)
		}
	}
	after := snapshot(t, db, owed)
	for table := range want {
		if strings.Join(after[table], "\n") != strings.Join(before[table], "\n") {
			t.Errorf("%s after the restore:\n%s\nwant:\n%s", table, strings.Join(after[table], "\n"),
				strings.Join(before[table], "\n"))
		}
	}
	if res, err := Restore(ctx, db.Owner, dir, tester); err != nil || res.Rows["owed_notifications"] != 0 {
		t.Errorf("a second restore: %+v (%v), want nothing new", res, err)
	}
}

// A recipient erased after her rows were archived does not come back with
// a restore: her rows return as tombstones, her attempts' errors erased.
func TestRestoreAppliesLaterErasures(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	owed := seed(t, db, now)
	dir := filepath.Join(t.TempDir(), "2026-01")
	if _, err := Write(ctx, db.Owner, 1, owed, dir, now); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.New(db.App, nil).Erase(ctx, ledger.EraseRequest{Tenant: "acme", Recipient: "alice",
		RequestedBy: "owedctl:test", Reason: "request"}); err != nil {
		t.Fatal(err)
	}
	dropRange(t, db, owed)
	res, err := Restore(ctx, db.Owner, dir, tester)
	if err != nil {
		t.Fatal(err)
	}
	if res.Erased != 1 {
		t.Errorf("made %d rows tombstones again, want alice's 1", res.Erased)
	}
	for _, table := range []string{"owed_notifications", "owed_notification_attempts"} {
		var n int
		if err := db.Owner.QueryRow(`SELECT count(*) FROM ` + table + ` t WHERE strpos(t::text, 'alice') > 0
		    OR strpos(t::text, '+15550001') > 0`).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s holds alice in %d rows after the restore (%v)", table, n, err)
		}
	}
}

// A restore is a line on the operators' trail, as an erasure is: who ran
// it and why, the id range and the archive it came from, and the rows it
// wrote back; a restore that names no operator writes nothing. Before, a
// restore left no trace an auditor could find.
func TestRestoreIsOnTheOperatorsTrail(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	owed := seed(t, db, now)
	dir := filepath.Join(t.TempDir(), "2026-01")
	if _, err := Write(ctx, db.Owner, 1, owed, dir, now); err != nil {
		t.Fatal(err)
	}
	dropRange(t, db, owed)
	if _, err := Restore(ctx, db.Owner, dir, Operator{Reason: "no one"}); err == nil ||
		!strings.Contains(err.Error(), "operator") {
		t.Fatalf("a restore naming no operator: %v, want a refusal", err)
	}
	res, err := Restore(ctx, db.Owner, dir, tester)
	if err != nil {
		t.Fatal(err)
	}
	var operator, target, reason, login string
	var count int64
	if err := db.Owner.QueryRow(`SELECT operator, target, count, reason, login FROM owed_operator_audit
	    WHERE action = 'archive_restore'`).Scan(&operator, &target, &count, &reason, &login); err != nil {
		t.Fatalf("the restore's line: %v", err)
	}
	wantTarget := fmt.Sprintf("ids [1, %d) from %s", owed, dir)
	if operator != tester.Name || reason != tester.Reason || count != res.Rows["owed_notifications"] || count != 4 ||
		!strings.HasPrefix(target, wantTarget) || !strings.Contains(target, "attempts=2") || login == "" {
		t.Errorf("the restore's line: operator %q, target %q, count %d, reason %q, login %q; want %q, %q…, 4 rows, %q",
			operator, target, count, reason, login, tester.Name, wantTarget, tester.Reason)
	}
}
