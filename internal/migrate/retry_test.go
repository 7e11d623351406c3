package migrate_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/testdb"
)

// conflictOnFirstTry is a migration body that PostgreSQL cancels with
// errcode on its first run and lets through on the next: the sequence's
// count survives the rollback, as a serving transaction's lock would be
// gone by the retry.
func conflictOnFirstTry(seq, errcode, then string) string {
	return `-- +goose StatementBegin
DO $$ BEGIN
    IF nextval('` + seq + `') = 1 THEN
        RAISE EXCEPTION 'a serving transaction holds the next table' USING ERRCODE = '` + errcode + `';
    END IF;
END $$;
-- +goose StatementEnd
` + then + "\n"
}

// A migration cancelled by a deadlock with a serving transaction (or by
// its own lock_timeout) is tried again, for up, down and down-to, as
// TestUpgradeAndRollback's rollback under load needed (it failed with
// "deadlock detected" in the Downs of 00048 and 00065); a migration run
// without a transaction, and any other error, are not.
func TestLockConflictIsTriedAgain(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	fsys := fstest.MapFS{
		"00001_sequences.sql": {Data: []byte(`-- +goose Up
CREATE SEQUENCE up_tries;
CREATE SEQUENCE down_tries;
CREATE SEQUENCE wait_tries;
CREATE SEQUENCE four_tries;
-- +goose Down
DROP SEQUENCE up_tries;
DROP SEQUENCE down_tries;
DROP SEQUENCE wait_tries;
DROP SEQUENCE four_tries;
`)},
		"00002_deadlock.sql": {Data: []byte("-- +goose Up\n" +
			conflictOnFirstTry("up_tries", "40P01", "CREATE TABLE probe_two (id int);") +
			"-- +goose Down\n" +
			conflictOnFirstTry("down_tries", "40P01", "DROP TABLE probe_two;"))},
		"00003_lock_timeout.sql": {Data: []byte("-- +goose Up\n" +
			conflictOnFirstTry("wait_tries", "55P03", "CREATE TABLE probe_three (id int);") +
			"-- +goose Down\nDROP TABLE probe_three;\n")},
	}
	runner := migrate.Runner{FS: fsys}
	applied, err := runner.Up(ctx, d.Owner)
	if err != nil || len(applied) != 3 || applied[0] != 1 || applied[2] != 3 {
		t.Fatalf("up: applied %v, err %v; want 1, 2, 3 with the conflicts tried again", applied, err)
	}
	tries := func(seq string) (n int64) {
		t.Helper()
		if err := d.Owner.QueryRow(`SELECT last_value FROM ` + seq).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if up, wait := tries("up_tries"), tries("wait_tries"); up != 2 || wait != 2 {
		t.Errorf("tries of 00002's up %d, of 00003's %d; want 2 each", up, wait)
	}
	if v, err := runner.Down(ctx, d.Owner); err != nil || v != 3 {
		t.Fatalf("down: %d %v", v, err)
	}
	if done, err := runner.DownTo(ctx, d.Owner, 1); err != nil || len(done) != 1 || done[0] != 2 {
		t.Fatalf("down-to 1: rolled back %v, err %v; want 2 after its deadlock", done, err)
	}
	if n := tries("down_tries"); n != 2 {
		t.Errorf("tries of 00002's down: %d, want 2", n)
	}

	// Without a transaction half the migration may have run, and any other
	// error says something about the migration itself: either goes to the
	// operator after one try.
	for _, c := range []struct{ name, body string }{
		{"00004_no_transaction.sql", "-- +goose NO TRANSACTION\n-- +goose Up\n" +
			conflictOnFirstTry("four_tries", "40P01", "CREATE TABLE probe_four (id int);") + "-- +goose Down\nDROP TABLE probe_four;\n"},
		{"00004_not_a_lock.sql", "-- +goose Up\n" +
			conflictOnFirstTry("four_tries", "23505", "CREATE TABLE probe_four (id int);") + "-- +goose Down\nDROP TABLE probe_four;\n"},
	} {
		delete(fsys, "00004_no_transaction.sql")
		fsys[c.name] = &fstest.MapFile{Data: []byte(c.body)}
		if _, err := d.Owner.Exec(`SELECT setval('four_tries', 1, false)`); err != nil {
			t.Fatal(err)
		}
		if _, err := runner.Up(ctx, d.Owner); err == nil || !strings.Contains(err.Error(), "a serving transaction holds") {
			t.Errorf("%s: up gave %v, want the migration's error", c.name, err)
		}
		if n := tries("four_tries"); n != 1 {
			t.Errorf("%s: tried %d times, want once", c.name, n)
		}
	}
}

// A migration whose session is ended under it (the server restarted, or
// an administrator terminated the backend) is tried again: its
// transaction rolled back whole. TestUpgradeAndRollback's rollback failed
// with "driver: bad connection" in 00085's Down when PostgreSQL 15.18
// crashed in another backend, which ends every session.
func TestLostConnectionIsTriedAgain(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	// The first try of each direction ends its own session, as a crash of
	// another backend or pg_terminate_backend would; the sequence's count
	// survives the rollback.
	endOnFirstTry := func(seq, then string) string {
		return `-- +goose StatementBegin
DO $$ BEGIN
    IF nextval('` + seq + `') = 1 THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
    END IF;
END $$;
-- +goose StatementEnd
` + then + "\n"
	}
	fsys := fstest.MapFS{
		"00001_sequences.sql": {Data: []byte(`-- +goose Up
CREATE SEQUENCE up_tries;
CREATE SEQUENCE down_tries;
-- +goose Down
DROP SEQUENCE up_tries;
DROP SEQUENCE down_tries;
`)},
		"00002_session_ends.sql": {Data: []byte("-- +goose Up\n" +
			endOnFirstTry("up_tries", "CREATE TABLE probe_two (id int);") +
			"-- +goose Down\n" +
			endOnFirstTry("down_tries", "DROP TABLE probe_two;"))},
	}
	runner := migrate.Runner{FS: fsys}
	applied, err := runner.Up(ctx, d.Owner)
	if err != nil || len(applied) != 2 || applied[1] != 2 {
		t.Fatalf("up: applied %v, err %v; want 1 and 2, 2 tried again after its session ended", applied, err)
	}
	tries := func(seq string) (n int64) {
		t.Helper()
		if err := d.Owner.QueryRow(`SELECT last_value FROM ` + seq).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var probe bool
	if err := d.Owner.QueryRow(`SELECT to_regclass('probe_two') IS NOT NULL`).Scan(&probe); err != nil || !probe {
		t.Errorf("after up: probe_two exists %v (%v), want it created by the second try", probe, err)
	}
	if done, err := runner.DownTo(ctx, d.Owner, 1); err != nil || len(done) != 1 || done[0] != 2 {
		t.Fatalf("down-to 1: rolled back %v, err %v; want 2 after its session ended", done, err)
	}
	if up, down := tries("up_tries"), tries("down_tries"); up != 2 || down != 2 {
		t.Errorf("tries of 00002's up %d, of its down %d; want 2 each", up, down)
	}
}
