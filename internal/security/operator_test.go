package security_test

// On-call's role (docs/security.md, "Roles"): holding a provider account,
// pausing a tenant and writing the operators' audit trail are
// owed_operator's alone, and the database records which login did each.

import (
	"database/sql"
	"testing"

	"github.com/owedhq/owed/internal/testdb"
)

// operatorWrites are the statements only owed_operator may run, each
// naming "alice" as the operator, as the review's forged audit line did.
var operatorWrites = []string{
	`SELECT owed_operator_audit_record(NULL, 'alice', 'dlq_delete', 'ids=1', 1, 'forged')`,
	`SELECT owed_provider_account_hold('twilio', 'forged', 'alice', NULL)`,
	`SELECT owed_provider_account_unhold('twilio', NULL)`,
	`SELECT owed_tenant_pause('tenant-a', 'forged', 'alice', NULL)`,
	`SELECT owed_tenant_resume('tenant-a')`,
}

// The runtime role (any service's login) and an owed_apps login can
// neither hold a provider account, nor pause or resume a tenant, nor write
// an audit line; on-call's login can, and every line and pause it writes
// names that login, whatever operator the caller says.
func TestOnlyOperatorsHoldPauseAndAudit(t *testing.T) {
	db := boundary(t)
	for who, u := range map[string]string{"the runtime role": db.AppURL, "an owed_apps login": appsRole(t, db)} {
		for _, stmt := range operatorWrites {
			err := inScope(t, u, nil, func(tx *sql.Tx) error {
				_, err := tx.Exec(stmt)
				return err
			})
			if !permissionDenied(err) {
				t.Errorf("%s: %s: %v, want permission denied", who, stmt, err)
			}
		}
	}
	var lines int
	if err := db.Owner.QueryRow(`SELECT count(*) FROM owed_operator_audit WHERE operator = 'alice'`).Scan(&lines); err != nil || lines != 0 {
		t.Fatalf("%d audit lines (err %v) after the refusals, want none", lines, err)
	}

	// On-call's own login, and another login granted owed_operator, may;
	// the database says which of them wrote each line.
	bob := newRole(t, db, "IN ROLE owed_operator")
	for login, u := range map[string]string{testdb.OperatorUser(): db.OperatorURL, userOf(t, bob): bob} {
		for _, stmt := range operatorWrites[:2] {
			if err := inScope(t, u, nil, func(tx *sql.Tx) error {
				_, err := tx.Exec(stmt)
				if err == nil {
					err = tx.Commit()
				}
				return err
			}); err != nil {
				t.Fatalf("%s: %s: %v", login, stmt, err)
			}
		}
		var operator, got string
		if err := db.Owner.QueryRow(`SELECT operator, login FROM owed_operator_audit ORDER BY id DESC LIMIT 1`).
			Scan(&operator, &got); err != nil || operator != "alice" || got != login {
			t.Errorf("the line %s wrote says operator %q, login %q (err %v); want alice, %s", login, operator, got, err, login)
		}
		if err := db.Owner.QueryRow(`SELECT hold_login FROM owed_provider_pace WHERE account = 'twilio'`).Scan(&got); err != nil ||
			got != login {
			t.Errorf("the hold %s made records login %q (err %v)", login, got, err)
		}
	}
	if err := inScope(t, db.OperatorURL, nil, func(tx *sql.Tx) error {
		if _, err := tx.Exec(operatorWrites[3]); err != nil {
			return err
		}
		return tx.Commit()
	}); err != nil {
		t.Fatal(err)
	}
	var login string
	if err := db.Owner.QueryRow(`SELECT login FROM owed_tenant_pauses WHERE tenant_id = 'tenant-a'`).Scan(&login); err != nil ||
		login != testdb.OperatorUser() {
		t.Errorf("the tenant pause records login %q (err %v), want %s", login, err, testdb.OperatorUser())
	}
}

// No login of the runtime role can pause a provider account for longer
// than an hour with one call: owed_pace_pause('x', 1e15, NULL) paused one
// until 2058.
func TestRuntimePauseIsBounded(t *testing.T) {
	db := testdb.New(t)
	for _, stmt := range []string{
		`SELECT owed_pace_pause('twilio', 1e15::bigint, NULL)`,
		`SELECT owed_provider_account_trip('sendgrid', 1e15::bigint, 'r', 'e', NULL)`,
	} {
		if _, err := db.App.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	var longest float64
	if err := db.App.QueryRow(`SELECT extract(epoch FROM max(paused_until) - now()) FROM owed_provider_pace`).Scan(&longest); err != nil {
		t.Fatal(err)
	}
	if longest > 3600 {
		t.Errorf("a runtime login paused an account for %.0f s, want at most an hour", longest)
	}
}
