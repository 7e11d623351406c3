package ledger

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/testdb"
)

// partitionOf is the ledger partition holding id, from the catalog
// (owed_ledger_partitions, sql/notifications.sql).
func partitionOf(t *testing.T, b *bundle, id int64) string {
	t.Helper()
	var name string
	if err := b.db.Owner.QueryRow(`SELECT partition FROM owed_ledger_partitions()
	    WHERE parent = 'owed_notifications' AND coalesce(from_id <= $1, true) AND to_id > $1`, id).Scan(&name); err != nil {
		t.Fatalf("the partition of id %d: %v", id, err)
	}
	return name
}

// Every partition of the ledger, its attempts and its receipts grants
// nothing: the roles read and write them through their parents, whose
// policies and grants are the only ones that apply to a statement naming
// a parent, so a partition named directly must refuse them, or its rows
// would be every tenant's. And a look-up by an array of ids reads the one
// partition the ids are in.
func TestPartitionsGrantNothing(t *testing.T) {
	b := setup(t)
	s := mustSchedule(t, b, "acme", row("alice", "P-1", b.now))
	rows, err := b.db.Owner.Query(`SELECT p.partition, c.relrowsecurity AND c.relforcerowsecurity,
	        has_table_privilege($1, c.oid, 'SELECT, INSERT, UPDATE, DELETE'),
	        has_table_privilege('owed_runtime', c.oid, 'SELECT, INSERT, UPDATE, DELETE'),
	        has_table_privilege('owed_apps', c.oid, 'SELECT, INSERT, UPDATE, DELETE'),
	        has_table_privilege('owed_definer', c.oid, 'SELECT, INSERT, UPDATE, DELETE')
	   FROM owed_ledger_partitions() p JOIN pg_class c ON c.oid = p.partition::regclass`, testdb.AppUser())
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for rows.Next() {
		var name string
		var forced, app, runtime, apps, definer bool
		if err := rows.Scan(&name, &forced, &app, &runtime, &apps, &definer); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, name)
		if !forced || app || runtime || apps || definer {
			t.Errorf("partition %s: row level security forced %v; privileges of the app login %v, owed_runtime %v, "+
				"owed_apps %v, owed_definer %v; want forced and none", name, forced, app, runtime, apps, definer)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	// A fresh install has, of each table, the legacy partition (the table
	// the migrations made before the ledger was partitioned, empty), this
	// month's and the next.
	if len(parts) != 9 || parts[0] != "owed_notifications_legacy" || parts[1] != "owed_notification_attempts_legacy" ||
		parts[2] != "owed_receipts_legacy" {
		t.Fatalf("partitions %v, want the legacy ones first, then this month's and the next of each table", parts)
	}

	home := partitionOf(t, b, s[0].ID)
	if !strings.HasPrefix(home, "owed_notifications_y") {
		t.Fatalf("a row scheduled now is in %s, want this month's partition", home)
	}
	tx, err := b.db.App.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT set_config('owed.tenant_id', 'acme', true)`); err != nil {
		t.Fatal(err)
	}
	var n int
	var pqErr *pq.Error
	if err := tx.QueryRow(`SELECT count(*) FROM ` + pq.QuoteIdentifier(home)).Scan(&n); !errors.As(err, &pqErr) ||
		pqErr.Code != "42501" {
		t.Fatalf("the app login reading partition %s directly: %d rows, %v; want insufficient_privilege", home, n, err)
	}

	var plan string
	if err := b.db.Owner.QueryRow(`EXPLAIN (FORMAT JSON) SELECT id FROM owed_notifications WHERE id = ANY($1)`,
		pq.Array([]int64{s[0].ID})).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if read := relationsRead(t, plan); len(read) != 1 || read[0] != home {
		t.Errorf("a look-up by an array of ids reads %v, want %s alone:\n%s", read, home, plan)
	}
}

// relationsRead lists the ledger partitions a JSON plan reads, each once.
func relationsRead(t *testing.T, plan string) []string {
	t.Helper()
	var doc []map[string]any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil || len(doc) == 0 {
		t.Fatalf("EXPLAIN output: %v\n%s", err, plan)
	}
	seen := map[string]bool{}
	var out []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, _ := n["Relation Name"].(string); strings.HasPrefix(rel, "owed_notifications_") && !seen[rel] {
			seen[rel] = true
			out = append(out, rel)
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(doc[0]["Plan"].(map[string]any))
	return out
}

// The schedule key holds across partitions (owed_notification_keys): a
// row of next month's range does not repeat a key of this month's, a
// schedule of a taken key answers the row that has it, and a move onto a
// taken key is a conflict, as on the unpartitioned table.
func TestScheduleKeyHoldsAcrossPartitions(t *testing.T) {
	b := setup(t)
	first := mustSchedule(t, b, "acme", row("alice", "K-1", b.now))
	// The ids move to next month's range, as the month's maintenance
	// moves them (owed_ledger_partitions_ensure).
	var nextFirst int64
	if err := b.db.Owner.QueryRow(`SELECT first_id FROM owed_ledger_partitions_ensure(now() + interval '1 month', 0)`).
		Scan(&nextFirst); err != nil {
		t.Fatal(err)
	}
	again := mustSchedule(t, b, "acme", row("alice", "K-1", b.now), row("alice", "K-1", b.now.Add(time.Hour)))
	if again[0].ID != first[0].ID || again[0].Created {
		t.Fatalf("the key scheduled again in another month: %+v, want row %d, not created", again[0], first[0].ID)
	}
	if !again[1].Created || again[1].ID < nextFirst {
		t.Fatalf("a new key: %+v, want a row of next month's range (from %d)", again[1], nextFirst)
	}
	if p1, p2 := partitionOf(t, b, first[0].ID), partitionOf(t, b, again[1].ID); p1 == p2 {
		t.Fatalf("both rows are in %s, want two months' partitions", p1)
	}
	if _, err := b.l.Update(ctx, "acme", again[1].ID, Change{DueAt: b.now}); !errors.Is(err, ErrConflict) {
		t.Errorf("a move onto the key of a row of another partition: %v, want ErrConflict", err)
	}
	// An application's own insert of a taken key is skipped, as the API's
	// schedule is, whichever partition holds the key.
	tx, err := b.db.App.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT set_config('owed.tenant_id', 'acme', true)`); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
	    VALUES ('acme', 'alice', 'sms', 'follow_up', 'K-1', $1)`, b.now)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Errorf("an insert of a taken key wrote %d rows, want none", n)
	}
	var rowsOfKey int
	if err := tx.QueryRow(`SELECT count(*) FROM owed_notifications WHERE recipient = 'alice' AND ref_id = 'K-1'
	    AND due_at = $1`, b.now).Scan(&rowsOfKey); err != nil || rowsOfKey != 1 {
		t.Errorf("rows of the key: %d (err %v), want 1", rowsOfKey, err)
	}
}
