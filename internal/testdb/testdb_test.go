package testdb

import "testing"

// The harness must hand tests a role that row-level security applies to: a
// superuser or a BYPASSRLS role would make every isolation test pass vacuously.
func TestAppRoleIsSubjectToRLS(t *testing.T) {
	t.Parallel()
	d := New(t)
	var super, bypass bool
	if err := d.App.QueryRow(
		"SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").Scan(&super, &bypass); err != nil {
		t.Fatal(err)
	}
	if super || bypass {
		t.Fatalf("application role: superuser=%v bypassrls=%v; want both false", super, bypass)
	}
	var n int
	if err := d.App.QueryRow("SELECT count(*) FROM owed_notifications").Scan(&n); err != nil {
		t.Fatalf("application role cannot read the ledger: %v", err)
	}
}
