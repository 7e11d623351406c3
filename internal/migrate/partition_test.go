package migrate_test

import (
	"database/sql"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/testdb"
	"github.com/owedhq/owed/migrations"
)

// The partitioning of the ledger (docs/upgrade.md) keeps an existing
// ledger whole: its rows, attempts and receipts become the legacy
// partitions', their schedule keys are backfilled (a replay of a legacy
// row's key is still that row, a move onto it still a conflict), new rows
// take this month's range, and the rollback puts every row, new ones
// included, back in one table.
func TestPartitioningKeepsTheLedger(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	// The schema before the partitioning, found by the migration's name
	// (its number is the merge's to choose).
	names, err := fs.Glob(migrations.FS, "*_ledger_partitions.sql")
	if err != nil || len(names) != 1 {
		t.Fatalf("the partitioning's migration: %v (%v)", names, err)
	}
	n, err := strconv.ParseInt(strings.SplitN(names[0], "_", 2)[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	before := n - 1
	if _, err := migrate.DownTo(ctx, db.Owner, before); err != nil {
		t.Fatal(err)
	}
	var kind string
	if err := db.Owner.QueryRow(`SELECT relkind::text FROM pg_class WHERE oid = 'owed_notifications'::regclass`).
		Scan(&kind); err != nil || kind != "r" {
		t.Fatalf("before: the ledger is of kind %q (%v), want a plain table", kind, err)
	}
	due := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload, state, settled_at,
			        delivered_at, provider_message_id)
			 SELECT 'acme', 'r' || g, 'sms', 'k', 'old', $1, '{}', 'delivered', $1, $1, 'SM-' || g FROM generate_series(1, 50) g`,
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at,
			        outcome, provider_message_id)
			 SELECT id, tenant_id, 1, 'twilio:AC', $1, $1, 'accepted', provider_message_id FROM owed_notifications`,
			`INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, received_at)
			 SELECT tenant_id, id, 'twilio', provider_message_id, 'delivered', $1 FROM owed_notifications`,
		} {
			if _, err := tx.Exec(q, due); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	if _, err := migrate.Up(ctx, db.Owner); err != nil {
		t.Fatal(err)
	}
	counts := func(table string) (n int64) {
		t.Helper()
		if err := db.Owner.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for table, want := range map[string]int64{"owed_notifications_legacy": 50, "owed_notification_attempts_legacy": 50,
		"owed_receipts_legacy": 50, "owed_notification_keys": 50} {
		if n := counts(table); n != want {
			t.Errorf("after the upgrade %s holds %d rows, want %d", table, n, want)
		}
	}
	l := ledger.New(db.App, nil)
	s, err := l.Schedule(ctx, "acme", []ledger.NewNotification{
		{Recipient: "r1", Channel: "sms", Kind: "k", RefID: "old", DueAt: due, Payload: []byte(`{"text":"x"}`)},
		{Recipient: "r1", Channel: "sms", Kind: "k", RefID: "new", DueAt: due, Payload: []byte(`{"text":"x"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if s[0].Created || s[0].ID > 50 {
		t.Errorf("a legacy row's key scheduled again: %+v, want the legacy row", s[0])
	}
	if !s[1].Created || s[1].ID < 1e11 {
		t.Errorf("a new row: %+v, want one of this month's range", s[1])
	}

	if _, err := migrate.DownTo(ctx, db.Owner, before); err != nil {
		t.Fatal(err)
	}
	if err := db.Owner.QueryRow(`SELECT relkind::text FROM pg_class WHERE oid = 'owed_notifications'::regclass`).
		Scan(&kind); err != nil || kind != "r" {
		t.Fatalf("after the rollback: the ledger is of kind %q (%v), want a plain table", kind, err)
	}
	if n := counts("owed_notifications"); n != 51 {
		t.Errorf("after the rollback the ledger holds %d rows, want the 50 old and the new one", n)
	}
	if n := counts("owed_notification_attempts"); n != 50 {
		t.Errorf("after the rollback %d attempts, want 50", n)
	}
	// Upgraded again, the ledger holds rows of this month's range already:
	// the legacy partition takes the rest of the month, and scheduling goes on.
	if _, err := migrate.Up(ctx, db.Owner); err != nil {
		t.Fatalf("up again after the rollback: %v", err)
	}
	s, err = l.Schedule(ctx, "acme", []ledger.NewNotification{
		{Recipient: "r1", Channel: "sms", Kind: "k", RefID: "new", DueAt: due, Payload: []byte(`{"text":"x"}`)},
		{Recipient: "r1", Channel: "sms", Kind: "k", RefID: "newer", DueAt: due, Payload: []byte(`{"text":"x"}`)}})
	if err != nil || s[0].Created || !s[1].Created {
		t.Fatalf("scheduling after the second upgrade: %+v (%v), want the row of before and a new one", s, err)
	}
}
