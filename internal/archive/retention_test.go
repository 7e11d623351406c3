package archive

import (
	"database/sql"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// oldMonth fills a month of its own with settled rows of acme and globex
// (one delivered with an attempt and a receipt), settled at settled, and
// returns that month's ledger partition and its ids' range. The month is
// next month's range, and the ids then move on to the month after, as
// the monthly maintenance moves them (owed_ledger_partitions_ensure), so
// the month is one retention may look at.
func oldMonth(t *testing.T, db *testdb.DB, settled time.Time, extra ...string) (string, int64, int64) {
	t.Helper()
	var part string
	var from, to int64
	if err := db.Owner.QueryRow(`SELECT partition_name, first_id, end_id
	    FROM owed_ledger_partitions_ensure(now() + interval '1 month', 0) WHERE partition_name LIKE 'owed_notifications\_%'`).
		Scan(&part, &from, &to); err != nil {
		t.Fatal(err)
	}
	if err := db.OwnerTx(ctx, func(tx *sql.Tx) error {
		for _, q := range append([]string{
			`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state, settled_at,
			        delivered_at, payload, provider, provider_message_id, attempts)
			 SELECT t, 'alice', 'sms', 'k', 'R-' || t, $1, 'delivered', $1, $1, '{"text": "hi"}', 'twilio:AC', 'SM-' || t, 1
			   FROM unnest(ARRAY['acme', 'globex']) t`,
			`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at,
			        outcome, provider_message_id, http_status)
			 SELECT id, tenant_id, 1, 'twilio:AC', $1, $1, 'accepted', provider_message_id, 201
			   FROM owed_notifications WHERE ref_id LIKE 'R-%'`,
			`INSERT INTO owed_receipts (tenant_id, notification_id, provider, provider_message_id, status, received_at)
			 SELECT tenant_id, id, 'twilio', provider_message_id, 'delivered', $1 FROM owed_notifications
			  WHERE ref_id = 'R-acme'`,
		}, extra...) {
			if _, err := tx.Exec(q, settled); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Owner.Exec(`SELECT owed_ledger_partitions_ensure(now() + interval '2 months', 0)`); err != nil {
		t.Fatal(err)
	}
	return part, from, to
}

// monthOf finds part among retention's answers.
func monthOf(t *testing.T, months []Month, part string) Month {
	t.Helper()
	for _, m := range months {
		if m.Partition == part {
			return m
		}
	}
	t.Fatalf("retention said nothing of %s: %+v", part, months)
	return Month{}
}

// partitionsOf lists the partitions of the three tables on [from, to).
func partitionsOf(t *testing.T, db *testdb.DB, from, to int64) []string {
	t.Helper()
	parts, err := Partitions(ctx, db.Owner)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range parts {
		if p.From == from && p.To == to {
			out = append(out, p.Name)
		}
	}
	return out
}

var keep400 = Retention{Default: Period(DefaultRetention)}

// A month whose rows are all settled and past the retention is archived,
// its three partitions detached and dropped whole, its keys deleted and
// the drop written on the operators' trail; restoring its archive brings
// its rows back, readable through the ledger.
func TestRetentionDropsAMonthWholeAfterItsArchive(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	settled := time.Now().UTC().Truncate(time.Microsecond)
	part, from, to := oldMonth(t, db, settled)
	dir := t.TempDir()
	opts := RunOptions{Retention: keep400, Dir: dir, Operator: "alice", Now: settled.Add(399 * 24 * time.Hour)}

	months, err := Run(ctx, db.Owner, opts)
	if err != nil {
		t.Fatal(err)
	}
	if m := monthOf(t, months, part); m.Dropped || !strings.Contains(m.Kept, "kept until") {
		t.Fatalf("a month inside its retention: %+v, want kept until its rows' retention ends", m)
	}
	dry := opts
	dry.Now, dry.DryRun, dry.Dir = settled.Add(401*24*time.Hour), true, ""
	if months, err = Run(ctx, db.Owner, dry); err != nil || !monthOf(t, months, part).Drop ||
		len(partitionsOf(t, db, from, to)) != 3 {
		t.Fatalf("dry run: %+v (%v), want it would drop and nothing dropped", months, err)
	}

	opts.Now = settled.Add(401 * 24 * time.Hour)
	months, err = Run(ctx, db.Owner, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := monthOf(t, months, part)
	if !m.Dropped || m.Rows != 2 || m.Archive != filepath.Join(dir, part) {
		t.Fatalf("the month past its retention: %+v, want its 2 rows archived in %s and dropped", m, filepath.Join(dir, part))
	}
	if left := partitionsOf(t, db, from, to); len(left) != 0 {
		t.Fatalf("partitions left of the dropped month: %v", left)
	}
	man, err := ReadManifest(m.Archive)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range man.Files {
		if want := map[string]int64{"owed_notifications": 2, "owed_notification_attempts": 2, "owed_receipts": 1}[f.Table]; f.Table != "owed_event_payloads" && f.Rows != want {
			t.Errorf("archive %s: %d rows, want %d", f.Name, f.Rows, want)
		}
	}
	var keys, audit int
	if err := db.Owner.QueryRow(`SELECT count(*) FROM owed_notification_keys WHERE notification_id >= $1 AND notification_id < $2`,
		from, to).Scan(&keys); err != nil || keys != 0 {
		t.Errorf("keys of the dropped month: %d (%v), want none", keys, err)
	}
	if err := db.Owner.QueryRow(`SELECT count(*) FROM owed_operator_audit WHERE action = 'retention_drop'
	    AND operator = 'alice' AND target LIKE $1 AND count = 2`, "partition="+part+"%").Scan(&audit); err != nil || audit != 1 {
		t.Errorf("audit lines of the drop: %d (%v), want 1", audit, err)
	}

	// The archive restores the month: its partitions come back, and its
	// rows are the ledger's again, read through the API's role.
	if _, err := Restore(ctx, db.Owner, m.Archive, Operator{Name: "alice", Reason: "INC-28"}); err != nil {
		t.Fatal(err)
	}
	if got := partitionsOf(t, db, from, to); len(got) != 3 {
		t.Fatalf("partitions after the restore: %v, want the month's three", got)
	}
	page, _, err := ledger.New(db.App, nil).FindPage(ctx, "acme", ledger.Filter{Limit: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 1 || page[0].RefID != "R-acme" || page[0].State != ledger.StateDelivered {
		t.Fatalf("acme's rows after the restore: %+v, want its delivered row", page)
	}
	var restored int
	if err := db.Owner.QueryRow(`SELECT count(*) FROM owed_notification_keys WHERE notification_id >= $1 AND notification_id < $2`,
		from, to).Scan(&restored); err != nil || restored != 2 {
		t.Errorf("keys of the restored month: %d (%v), want 2", restored, err)
	}
}

// A month holding one row still owed stays, and so does a month holding
// a row of a held tenant; each says why.
func TestRetentionKeepsOwedAndHeldMonths(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, extra, hold, kept string
	}{
		{"one row owed", `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload)
		     VALUES ('acme', 'bob', 'sms', 'k', 'LATE', $1::timestamptz + interval '2 years', '{"text": "late"}')`,
			"", "1 rows are still owed"},
		{"a held tenant", "", "globex", `compliance hold keeps it: tenant globex ("case 114"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			settled := time.Now().UTC()
			var extra []string
			if c.extra != "" {
				extra = append(extra, c.extra)
			}
			part, from, to := oldMonth(t, db, settled, extra...)
			if c.hold != "" {
				if added, err := AddHold(ctx, db.Owner, c.hold, "case 114", "carol", settled); err != nil || !added {
					t.Fatalf("AddHold: %v, %v", added, err)
				}
			}
			months, err := Run(ctx, db.Owner, RunOptions{Retention: keep400, Dir: t.TempDir(), Operator: "alice",
				Now: settled.Add(800 * 24 * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if m := monthOf(t, months, part); m.Dropped || !strings.Contains(m.Kept, c.kept) {
				t.Fatalf("%s: %+v, want kept: %q", part, m, c.kept)
			}
			if left := partitionsOf(t, db, from, to); len(left) != 3 {
				t.Fatalf("partitions of the kept month: %v, want its three", left)
			}
			if c.hold == "" {
				return
			}
			// Lifted, the hold keeps nothing.
			if had, err := RemoveHold(ctx, db.Owner, c.hold, "case closed", "carol", settled); err != nil || !had {
				t.Fatalf("RemoveHold: %v, %v", had, err)
			}
			months, err = Run(ctx, db.Owner, RunOptions{Retention: keep400, Dir: t.TempDir(), Operator: "alice",
				Now: settled.Add(800 * 24 * time.Hour)})
			if err != nil || !monthOf(t, months, part).Dropped {
				t.Fatalf("after the hold was lifted: %+v (%v), want the month dropped", months, err)
			}
		})
	}
}

// A tenant's own retention decides for its rows: a month keeps as long as
// the longest retention of a tenant with rows in it.
func TestRetentionPerTenant(t *testing.T) {
	var r TenantRetention
	if err := r.Decode("acme:800d; trial:co:30d"); err != nil {
		t.Fatal(err)
	}
	ret := Retention{Default: Period(DefaultRetention), Tenants: r}
	if ret.For("acme") != 800*24*time.Hour || ret.For("trial:co") != 30*24*time.Hour || ret.For("globex") != DefaultRetention {
		t.Fatalf("retentions: %v %v %v", ret.For("acme"), ret.For("trial:co"), ret.For("globex"))
	}
	for _, bad := range []string{"acme", "acme:1h", "acme:forever", "acme:3d;acme:4d"} {
		if err := new(TenantRetention).Decode(bad); err == nil || !strings.Contains(err.Error(), "OWED_RETENTION_TENANTS") {
			t.Errorf("%q: %v, want refused naming the variable", bad, err)
		}
	}
}

// counters reads the per-minute counters (owed_ledger_minutes), each key's
// slots summed, leaving out a key at zero.
func counters(t *testing.T, db *testdb.DB) map[string]int64 {
	t.Helper()
	rows, err := db.Owner.Query(`SELECT minute, tenant_id, outcome, bucket, sum(settled) FROM owed_ledger_minutes
	    GROUP BY 1, 2, 3, 4 HAVING sum(settled) <> 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var minute time.Time
		var tenant, outcome string
		var bucket, n int64
		if err := rows.Scan(&minute, &tenant, &outcome, &bucket, &n); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s %s %s %d", minute.UTC().Format(time.RFC3339), tenant, outcome, bucket)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The hourly counters (the minutes summed by hour across tenants) are
	// the same record, read by the long stats windows.
	hours, err := db.Owner.Query(`SELECT hour, outcome, bucket, sum(settled) FROM owed_ledger_hours
	    GROUP BY 1, 2, 3 HAVING sum(settled) <> 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer hours.Close()
	for hours.Next() {
		var hour time.Time
		var outcome string
		var bucket, n int64
		if err := hours.Scan(&hour, &outcome, &bucket, &n); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("hour %s %s %d", hour.UTC().Format(time.RFC3339), outcome, bucket)] = n
	}
	if err := hours.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The per-minute counters are the record of what settled: a month
// retention drops keeps its counts, as its archive keeps its rows, and a
// restore of that archive, whose inserts the counters' triggers count,
// takes them off again, so the month is never counted twice; restoring
// once more, when every row is there, inserts and counts nothing. Before,
// the restore counted the dropped month a second time.
func TestRetentionAndRestoreCountTheMonthOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	settled := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	// acme's row was sent twice, both accepted, the second flagged.
	part, _, _ := oldMonth(t, db, settled, `INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt,
	        provider, started_at, finished_at, outcome, provider_message_id, http_status, possible_duplicate)
	    SELECT id, tenant_id, 2, 'twilio:AC', $1, $1, 'accepted', provider_message_id, 201, true
	      FROM owed_notifications WHERE ref_id = 'R-acme'`)
	// Another month's row settled in the same minute stays counted.
	if _, err := db.Owner.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at,
	        state, settled_at, delivered_at, payload)
	    VALUES ('initech', 'bob', 'sms', 'k', 'R-other', $1, 'delivered', $1, $1, '{}')`, settled); err != nil {
		t.Fatal(err)
	}
	// globex's provider said its row was delivered: the counters count the
	// receipt's word by the row's settle minute too.
	if _, err := db.Owner.Exec(`UPDATE owed_notifications SET receipt_status = 'delivered' WHERE ref_id = 'R-globex'`); err != nil {
		t.Fatal(err)
	}
	minute := settled.Format(time.RFC3339)
	before := counters(t, db)
	for _, k := range []string{"acme delivered 0", "globex delivered 0", "initech delivered 0",
		"acme possible_duplicate -1", "acme accepted_again -1", "globex receipt_delivered -1"} {
		if before[minute+" "+k] != 1 {
			t.Fatalf("counters before retention: %v, want 1 for %s %s", before, minute, k)
		}
	}

	months, err := Run(ctx, db.Owner, RunOptions{Retention: keep400, Dir: t.TempDir(), Operator: "alice",
		Now: settled.Add(401 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	m := monthOf(t, months, part)
	if !m.Dropped {
		t.Fatalf("the month past its retention: %+v, want it dropped", m)
	}
	if got := counters(t, db); !maps.Equal(got, before) {
		t.Errorf("counters after the drop: %v, want those before it: %v", got, before)
	}
	for i := range 2 {
		if _, err := Restore(ctx, db.Owner, m.Archive, Operator{Name: "alice", Reason: "INC-28"}); err != nil {
			t.Fatal(err)
		}
		if got := counters(t, db); !maps.Equal(got, before) {
			t.Errorf("counters after restore %d of the archive: %v, want those before the drop: %v", i+1, got, before)
		}
	}
}

// A month retention has begun to retire (renamed, detached) but cannot
// drop goes back into the ledger whole, under its names, with its rows
// readable through the API's role again: when its archive cannot be
// written, when a hold on one of its tenants was placed after retention
// decided, and when one of its rows was reopened after retention decided.
// The next run retires it once nothing holds it.
func TestAMonthThatCannotGoAfterItsDetachGoesBack(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	settled := time.Now().UTC().Truncate(time.Microsecond)
	part, from, to := oldMonth(t, db, settled)
	parts := partitionsOf(t, db, from, to)
	now := settled.Add(401 * 24 * time.Hour)
	back := func(what string) {
		t.Helper()
		if got := partitionsOf(t, db, from, to); !slices.Equal(got, parts) {
			t.Fatalf("%s: the month's partitions are %v, want %v attached back", what, got, parts)
		}
		var forced int
		if err := db.Owner.QueryRow(`SELECT count(*) FROM pg_class WHERE relname = ANY($1) AND relforcerowsecurity`,
			pq.Array(parts)).Scan(&forced); err != nil || forced != 3 {
			t.Fatalf("%s: %d of the month's partitions force row-level security (%v), want 3", what, forced, err)
		}
		page, _, err := ledger.New(db.App, nil).FindPage(ctx, "acme", ledger.Filter{Limit: 10}, nil)
		if err != nil || len(page) != 1 || page[0].RefID != "R-acme" {
			t.Fatalf("%s: acme's rows %+v (%v), want its row", what, page, err)
		}
	}
	decided := func() Month {
		t.Helper()
		m := Month{Partition: part, From: from, To: to}
		if err := decide(ctx, db.Owner, RunOptions{Retention: keep400, Now: now}, &m); err != nil || !m.Drop {
			t.Fatalf("decide: %+v (%v), want the month to go", m, err)
		}
		return m
	}
	opts := func(dir string) RunOptions {
		return RunOptions{Retention: keep400, Dir: dir, Operator: "alice", Now: now}
	}

	// The archive's folder is not empty: the write fails after the detach.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, part, "x"), 0o750); err != nil {
		t.Fatal(err)
	}
	m := decided()
	if err := retire(ctx, db.Owner, opts(dir), &m); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("retire into a folder not empty: %v, want the archive's error", err)
	}
	back("after a failed archive")

	// A hold placed after retention decided.
	m = decided()
	if _, err := AddHold(ctx, db.Owner, "globex", "legal", "bob", now); err != nil {
		t.Fatal(err)
	}
	if err := retire(ctx, db.Owner, opts(t.TempDir()), &m); err != nil || m.Dropped ||
		!strings.Contains(m.Kept, "globex") {
		t.Fatalf("retire with a hold placed since: %+v (%v), want it kept by globex's hold", m, err)
	}
	back("after a hold came")
	if _, err := RemoveHold(ctx, db.Owner, "globex", "released", "bob", now); err != nil {
		t.Fatal(err)
	}

	// A row reopened after retention decided.
	m = decided()
	if _, err := db.Owner.Exec(`UPDATE owed_notifications SET state = 'pending', settled_at = NULL, delivered_at = NULL
	    WHERE ref_id = 'R-globex'`); err != nil {
		t.Fatal(err)
	}
	if err := retire(ctx, db.Owner, opts(t.TempDir()), &m); err != nil || m.Dropped || !strings.Contains(m.Kept, "owed") {
		t.Fatalf("retire with a row reopened since: %+v (%v), want it kept", m, err)
	}
	back("after a row was reopened")
	if _, err := db.Owner.Exec(`UPDATE owed_notifications SET state = 'delivered', settled_at = $1, delivered_at = $1
	    WHERE ref_id = 'R-globex'`, settled); err != nil {
		t.Fatal(err)
	}

	months, err := Run(ctx, db.Owner, opts(t.TempDir()))
	if err != nil || !monthOf(t, months, part).Dropped || len(partitionsOf(t, db, from, to)) != 0 {
		t.Fatalf("the next run: %+v (%v), want the month dropped", months, err)
	}
}
