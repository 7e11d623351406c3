package migrate_test

import (
	"database/sql"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/testdb"
	"github.com/owedhq/owed/migrations"
)

func TestBreaksBefore(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, text string
		want       int64
		err        string
	}{
		{"none", "-- +goose Up\nALTER TABLE t ADD COLUMN c int;\n", 0, ""},
		{"marked", "-- drops t.c, which schema 40's code no longer reads\n-- owed:breaks-before 40\n-- +goose Up\n", 40, ""},
		{"spaced", "--   owed:breaks-before   7  \n", 7, ""},
		{"inside a line is no marker", "SELECT 1; -- owed:breaks-before 40\n", 0, ""},
		{"newer than itself", "-- owed:breaks-before 43\n", 0, "from 0 to 42"},
		{"not a number", "-- owed:breaks-before forty\n", 0, `"forty"`},
		{"twice", "-- owed:breaks-before 40\n-- owed:breaks-before 41\n", 0, "at most one"},
	}
	for _, c := range cases {
		got, err := migrate.BreaksBefore(42, c.text)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %d, %v; want an error with %q", c.name, got, err, c.err)
		}
	}
}

// This build's range is well formed and named by its newest migration.
func TestThisBuild(t *testing.T) {
	t.Parallel()
	b, err := migrate.This()
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(migrations.FS, "*.sql")
	last := names[len(names)-1]
	if !strings.HasPrefix(last, fmt.Sprintf("%05d_", b.Head)) {
		t.Errorf("head %d, but the newest migration is %s", b.Head, last)
	}
	if b.Oldest < 1 || b.Oldest > b.Head {
		t.Errorf("OldestSchema %d outside 1..%d", b.Oldest, b.Head)
	}
	for _, n := range names {
		text, _ := fs.ReadFile(migrations.FS, n)
		var v int64
		fmt.Sscanf(n, "%d", &v)
		if _, err := migrate.BreaksBefore(v, string(text)); err != nil {
			t.Error(err)
		}
	}
}

// Readiness accepts every schema in the range and says what to do outside
// it: each case is a build of another range against one database.
func TestCheckRange(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	this, err := migrate.This()
	if err != nil {
		t.Fatal(err)
	}
	h := this.Head
	check := func(b migrate.Build) migrate.Compat {
		t.Helper()
		// As the services' role: it may read both tables.
		c, err := migrate.Check(ctx, d.App, b)
		if err != nil {
			t.Fatal(err)
		}
		if c.Schema != h {
			t.Fatalf("schema %d, want %d", c.Schema, h)
		}
		return c
	}
	if c := check(this); c.Err() != nil || c.Requires != 0 || c.String() != fmt.Sprintf("ok: schema %d", h) {
		t.Errorf("this build at head: %+v %v %q", c, c.Err(), c)
	}
	// A newer build whose oldest supported schema is beyond this one.
	newer := check(migrate.Build{Oldest: h + 2, Head: h + 5})
	if err := newer.Err(); err == nil || err.Error() != fmt.Sprintf(
		"schema %d is older than this release's oldest supported %d: run owedctl migrate up", h, h+2) {
		t.Errorf("newer build: %v", err)
	}
	// An older build on the expanded schema: nothing breaks it.
	older := check(migrate.Build{Oldest: 1, Head: h - 1})
	if older.Err() != nil || !strings.Contains(older.String(), "newer than this build's") {
		t.Errorf("older build on an expand-only schema: %v %q", older.Err(), older)
	}
	// The head migration declares itself a contract for binaries before it.
	if err := d.OwnerTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE owed_schema_compat SET breaks_before = $1 WHERE version = $1`, h)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	broken := check(migrate.Build{Oldest: 1, Head: h - 1})
	want := fmt.Sprintf("schema %d requires binaries of schema ≥ %d; this build is %d: upgrade the binary or roll the schema "+
		"back with owedctl migrate down-to %d", h, h, h-1, h-1)
	if err := broken.Err(); err == nil || err.Error() != want || broken.String() != want {
		t.Errorf("older build on a contracted schema: %v, want %q", err, want)
	}
	if c := check(this); c.Err() != nil || c.Requires != h {
		t.Errorf("this build on its own contract: %+v %v", c, c.Err())
	}
}

// contractFS is the embedded migrations plus a contract migration 99 that
// breaks every binary before it and checks it was announced first.
func contractFS(t *testing.T) fs.FS {
	t.Helper()
	m := fstest.MapFS{}
	names, _ := fs.Glob(migrations.FS, "*.sql")
	for _, n := range names {
		b, _ := fs.ReadFile(migrations.FS, n)
		m[n] = &fstest.MapFile{Data: b}
	}
	// Its Up fails unless the runner announced it before running it.
	m["00099_contract.sql"] = &fstest.MapFile{Data: []byte(`-- owed:breaks-before 99
-- +goose Up
-- +goose StatementBegin
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM owed_schema_compat WHERE version = 99 AND breaks_before = 99) THEN
        RAISE EXCEPTION 'contract migration 99 ran before it was announced';
    END IF;
END $$;
-- +goose StatementEnd
CREATE TABLE owed_contract_probe (id int);
-- +goose Down
DROP TABLE owed_contract_probe;
`)}
	return m
}

// The runner records each applied migration's marker and removes it again
// on rollback; a down-to past the compatibility table leaves a schema the
// check still reads.
func TestRecordFollowsUpAndDown(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	this, _ := migrate.This()
	requires := func() migrate.Compat {
		t.Helper()
		c, err := migrate.Check(ctx, d.App, this)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Numbers may be skipped (a number reserved and never used), so the
	// count is of the files, not the head's number.
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	if err := d.Owner.QueryRow(`SELECT count(*) FROM owed_schema_compat WHERE breaks_before = 0`).Scan(&rows); err != nil || rows != int64(len(files)) {
		t.Fatalf("%d rows of breaks_before 0 after up (err %v), want one per migration, %d", rows, err, len(files))
	}
	runner := migrate.Runner{FS: contractFS(t)}
	if applied, err := runner.Up(ctx, d.Owner); err != nil || len(applied) != 1 || applied[0] != 99 {
		t.Fatalf("up with the contract: %v %v", applied, err)
	}
	c := requires()
	if c.Schema != 99 || c.Requires != 99 || c.Err() == nil || !strings.Contains(c.Err().Error(), "down-to") {
		t.Fatalf("after the contract: %+v %v", c, c.Err())
	}
	// This build has no Down of 99, and says whose owedctl has.
	if _, err := migrate.DownTo(ctx, d.Owner, this.Head); err == nil || !strings.Contains(err.Error(), "newer than this build's") {
		t.Errorf("down-to with a build that lacks the migration: %v", err)
	}
	if done, err := runner.DownTo(ctx, d.Owner, this.Head); err != nil || len(done) != 1 {
		t.Fatalf("down-to %d: %v %v", this.Head, done, err)
	}
	if c := requires(); c.Schema != this.Head || c.Requires != 0 || c.Err() != nil {
		t.Errorf("after rolling the contract back: %+v %v", c, c.Err())
	}
	// Below the table's own migration the check still works, and says to
	// migrate up when this build needs more.
	if _, err := migrate.DownTo(ctx, d.Owner, 26); err != nil {
		t.Fatal(err)
	}
	c, err = migrate.Check(ctx, d.App, migrate.Build{Oldest: 27, Head: this.Head})
	if err != nil || c.Schema != 26 || c.Requires != 0 || c.Err() == nil || !strings.Contains(c.Err().Error(), "run owedctl migrate up") {
		t.Errorf("at 26: %+v %v %v", c, c.Err(), err)
	}
	if _, err := migrate.Up(ctx, d.Owner); err != nil {
		t.Fatal(err)
	}
	if c := requires(); c.Schema != this.Head || c.Err() != nil {
		t.Errorf("up again: %+v %v", c, c.Err())
	}
}
