package migrate_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/migrate"
	"github.com/owedhq/owed/internal/tenant"
	"github.com/owedhq/owed/internal/testdb"
)

var ctx = context.Background()

// Every migration rolls back, in order, to an empty schema, and the whole
// set applies again on top: a Down that does not undo its Up fails here.
func TestUpDownUp(t *testing.T) {
	t.Parallel()
	db := testdb.New(t).Owner
	st, err := migrate.Status(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for range st {
		if _, err := migrate.Down(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if cur, _, err := migrate.AtHead(ctx, db); err != nil || cur != 0 {
		t.Fatalf("after rolling every migration back: version %d (err %v), want 0", cur, err)
	}
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`).
		Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("after rolling every migration back %d tables remain (err %v)", tables, err)
	}
	applied, err := migrate.Up(ctx, db)
	if err != nil || len(applied) != len(st) {
		t.Fatalf("up again applied %v (err %v), want all %d", applied, err, len(st))
	}
	if cur, target, err := migrate.AtHead(ctx, db); err != nil || cur != target {
		t.Fatalf("after up: version %d of %d (err %v)", cur, target, err)
	}
}

// The tables bound tenant_id in bytes, as tenant.Validate does: an id of
// MaxLength bytes fits, one of fewer characters but more bytes does not.
func TestTenantIDBoundIsTenantValidates(t *testing.T) {
	t.Parallel()
	db := testdb.New(t).Owner
	fits := strings.Repeat("ö", tenant.MaxLength/2)
	tooLong := fits + "ö" // MaxLength/2+1 characters, MaxLength+2 bytes
	if tenant.Validate(fits) != nil || tenant.Validate(tooLong) == nil {
		t.Fatal("the fixtures no longer straddle tenant.Validate's bound")
	}
	inserts := map[string]string{
		"owed_notifications": `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
		                  VALUES ($1, 'r', 'sms', 'k', 'ref', now())`,
		"owed_api_tokens": `INSERT INTO owed_api_tokens (tenant_id, token_hash) VALUES ($1, sha256(convert_to($1, 'UTF8')))`,
		"owed_items": `INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at)
		               VALUES ($1, 'r', 'sms', 'k', 'ref', now())`,
	}
	insert := func(query, id string) error {
		return inTx(db, func(tx *sql.Tx) error {
			_, err := tx.Exec(query, id)
			return err
		})
	}
	for table, q := range inserts {
		if err := insert(q, fits); err != nil {
			t.Errorf("%s refused a tenant id of %d bytes: %v", table, len(fits), err)
		}
		if err := insert(q, tooLong); err == nil || !strings.Contains(err.Error(), table+"_tenant_id_check") {
			t.Errorf("%s: a tenant id of %d bytes got %v, want %s_tenant_id_check", table, len(tooLong), err, table)
		}
	}
}

// inTx runs fn as the owner, which the policies exempt (the fixtures name
// ids tenant.Enter refuses), and rolls back.
func inTx(db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}
