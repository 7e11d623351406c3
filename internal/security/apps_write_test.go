package security_test

import (
	"database/sql"
	"strings"
	"testing"
)

// An application writing SQL writes owed rows only (owed_notifications'
// grants and owed_notifications_apps_pending): it schedules pending rows
// and may reschedule or cancel a pending row, but can fake no work in
// flight. An owed_apps login inserted 200 rows queued with a lease to
// 9999-01-01 and every sweep held back.
func TestAppsWriteOwedRowsOnly(t *testing.T) {
	db := boundary(t)
	apps := appsRole(t, db)
	try := func(stmt string) error {
		t.Helper()
		return inScope(t, apps, []string{scopeA}, func(tx *sql.Tx) error {
			_, err := tx.Exec(stmt)
			return err
		})
	}
	for what, stmt := range map[string]string{
		"a row faked in flight": `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, state, lease_until)
		    VALUES ('tenant-a', 'mallory', 'sms', 'k', 'FAKE-1', now(), 'queued', '9999-01-01')`,
		"a row with a claim": `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, claimed_at)
		    VALUES ('tenant-a', 'mallory', 'sms', 'k', 'FAKE-2', now(), now())`,
		"a row written in the past": `INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, created_at)
		    VALUES ('tenant-a', 'mallory', 'sms', 'k', 'FAKE-3', now(), '2000-01-01')`,
		"a lease on a pending row": `UPDATE owed_notifications SET lease_until = '9999-01-01' WHERE ref_id = 'A-1'`,
	} {
		if err := try(stmt); !permissionDenied(err) {
			t.Errorf("an apps' login writing %s: %v, want permission denied", what, err)
		}
	}
	if err := try(`UPDATE owed_notifications SET state = 'queued' WHERE ref_id = 'A-1'`); err == nil ||
		!strings.Contains(err.Error(), "row-level security") {
		t.Errorf("an apps' login moving a pending row to queued: %v, want a row-level security refusal", err)
	}

	err := inScope(t, apps, []string{scopeA}, func(tx *sql.Tx) error {
		var state string
		if err := tx.QueryRow(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, expires_at, payload)
		    VALUES ('tenant-a', 'alice', 'sms', 'k', 'A-2', now(), now() + interval '1 hour', '{"text":"a"}')
		    RETURNING state`).Scan(&state); err != nil || state != "pending" {
			t.Errorf("an apps' login scheduling a row: %q, %v; want it pending", state, err)
		}
		for _, c := range []struct{ what, stmt string }{
			{"rescheduling its pending row", `UPDATE owed_notifications SET due_at = due_at + interval '1 hour',
			    expires_at = expires_at + interval '1 hour', payload = '{"text":"later"}' WHERE ref_id = 'A-2'`},
			{"cancelling a pending row", `UPDATE owed_notifications SET state = 'cancelled', settled_at = now(),
			    last_error = 'not needed' WHERE ref_id = 'A-1'`},
		} {
			if n, err := changed(tx, c.stmt); err != nil || n != 1 {
				t.Errorf("an apps' login %s: %d rows, %v; want 1", c.what, n, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A row the sweep holds is not the application's to change.
	if _, err := db.Owner.Exec(`UPDATE owed_notifications SET state = 'queued', lease_until = now() + interval '10 minutes'
	    WHERE ref_id = 'A-1'`); err != nil {
		t.Fatal(err)
	}
	err = inScope(t, apps, []string{scopeA}, func(tx *sql.Tx) error {
		n, err := changed(tx, `UPDATE owed_notifications SET payload = '{"text":"changed"}' WHERE ref_id = 'A-1'`)
		if err == nil && n != 0 {
			t.Errorf("an apps' login changed a queued row")
		}
		return err
	})
	if err != nil {
		t.Errorf("an apps' login updating a queued row: %v, want no row changed and no error", err)
	}
}

// changed runs an update and says how many rows it changed.
func changed(tx *sql.Tx, stmt string) (int64, error) {
	res, err := tx.Exec(stmt)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
