package security_test

// The database boundary (docs/security.md, "Database roles"): tenant
// isolation holds against the application role itself and against an
// application's own SQL role, whatever SQL either issues, because it is a
// privilege (internal/migrate/sql/roles.sql, and each table's policies and
// grants in its home: docs/sql.md) and not a setting a session may set.

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/testdb"
)

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// boundary is a database holding rows of tenantA and tenantB in every table
// an application fills, written as the owner (the policies exempt it).
func boundary(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	for _, stmt := range []string{
		`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload)
		 VALUES ('tenant-a', 'alice', 'sms', 'k', 'A-1', now() - interval '1 minute', '{"text":"a"}'),
		        ('tenant-b', 'bob', 'sms', 'k', 'B-1', now() - interval '1 minute', '{"text":"b"}')`,
		`INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at)
		 VALUES ('tenant-a', 'alice', 'sms', 'k', 'A-1', now() + interval '1 hour'),
		        ('tenant-b', 'bob', 'sms', 'k', 'B-1', now() + interval '1 hour')`,
		`INSERT INTO owed_contacts (tenant_id, recipient, channel, address, opted_out)
		 VALUES ('tenant-a', 'alice', 'sms', '+15550001', false), ('tenant-b', 'bob', 'sms', '+15550002', false)`,
		`INSERT INTO owed_api_tokens (tenant_id, token_hash, name, revoked_at)
		 VALUES ('tenant-b', sha256('b'), 'revoked', now())`,
	} {
		if _, err := db.Owner.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return db
}

// appsRole is a login of the apps' group, as an application writing SQL
// connects, bound to tenantA (owedctl apps bind).
func appsRole(t *testing.T, db *testdb.DB) string {
	t.Helper()
	u := newRole(t, db, "IN ROLE owed_apps")
	bind(t, db, userOf(t, u), tenantA)
	return u
}

// bind lets login name tenant, as owedctl apps bind does.
func bind(t *testing.T, db *testdb.DB, login, tenant string) {
	t.Helper()
	if _, err := db.Admin.Exec(`SELECT owed_apps_bind($1, $2, 'security_test', '')`, login, tenant); err != nil {
		t.Fatal(err)
	}
}

// inScope runs fn in one transaction on the pool at dbURL after the
// statements set (each a set_config), and rolls it back.
func inScope(t *testing.T, dbURL string, set []string, fn func(*sql.Tx) error) error {
	t.Helper()
	pool, err := sql.Open("postgres", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tx, err := pool.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, s := range set {
		if _, err := tx.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return fn(tx)
}

const (
	setBypass = `SELECT set_config('owed.bypass_rls', 'on', true)`
	scopeA    = `SELECT set_config('owed.tenant_id', 'tenant-a', true)`
)

// countB counts tenantB's rows of table as the transaction sees them.
func countB(tx *sql.Tx, table string) (int, error) {
	var n int
	err := tx.QueryRow(`SELECT count(*) FROM ` + table + ` WHERE tenant_id = 'tenant-b'`).Scan(&n)
	return n, err
}

func permissionDenied(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "42501"
}

// Setting owed.bypass_rls, with or without a tenant scope, reads nothing of
// another tenant, as the application role and as an apps' role.
func TestBypassSettingReadsNothingOfAnotherTenant(t *testing.T) {
	db := boundary(t)
	roles := map[string]string{"the application role": db.AppURL, "an apps' role": appsRole(t, db)}
	for who, u := range roles {
		for _, set := range [][]string{{setBypass}, {setBypass, scopeA}} {
			for _, table := range []string{"owed_notifications", "owed_items", "owed_contacts"} {
				err := inScope(t, u, set, func(tx *sql.Tx) error {
					n, err := countB(tx, table)
					if err == nil && n != 0 {
						t.Errorf("%s after %v sees %d of %s's rows in %s, want none", who, set, n, tenantB, table)
					}
					return err
				})
				if err != nil {
					t.Errorf("%s reading %s: %v", who, table, err)
				}
			}
		}
	}
}

// A row for tenant B cannot be written while scoped to tenant A, bypass
// setting or not.
func TestInsertForAnotherTenantFails(t *testing.T) {
	db := boundary(t)
	roles := map[string]string{"the application role": db.AppURL, "an apps' role": appsRole(t, db)}
	for who, u := range roles {
		for _, set := range [][]string{{scopeA}, {setBypass, scopeA}, {setBypass}} {
			err := inScope(t, u, set, func(tx *sql.Tx) error {
				_, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
				                   VALUES ('tenant-b', 'mallory', 'sms', 'k', 'M-1', now())`)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), "row-level security") {
				t.Errorf("%s after %v inserted a row for %s (err %v), want a row-level security refusal", who, set, tenantB, err)
			}
			err = inScope(t, u, set, func(tx *sql.Tx) error {
				res, err := tx.Exec(`UPDATE owed_notifications SET payload = '{"text":"owned"}' WHERE tenant_id = 'tenant-b'`)
				if err == nil {
					if n, _ := res.RowsAffected(); n != 0 {
						t.Errorf("%s after %v updated %d of %s's rows", who, set, n, tenantB)
					}
				}
				return err
			})
			if err != nil {
				t.Errorf("%s update: %v", who, err)
			}
		}
	}
}

// owed.bypass_rls given for every session, in the URL's options or in
// PGOPTIONS, reads nothing either.
func TestSessionWideBypassReadsNothing(t *testing.T) {
	db := boundary(t)
	check := func(name, u string) {
		t.Helper()
		err := inScope(t, u, nil, func(tx *sql.Tx) error {
			n, err := countB(tx, "owed_notifications")
			if err == nil && n != 0 {
				t.Errorf("%s: a session sees %d of %s's rows, want none", name, n, tenantB)
			}
			return err
		})
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	check("options=-c owed.bypass_rls=on", withOption(db.AppURL, "-c owed.bypass_rls=on"))
	check("apps' role, options=-c owed.bypass_rls=on", withOption(appsRole(t, db), "-c owed.bypass_rls=on"))
	t.Setenv("PGOPTIONS", "-c owed.bypass_rls=on")
	check("PGOPTIONS=-c owed.bypass_rls=on", db.AppURL)
}

// The runtime role, and on-call's login with it, can neither mint nor
// un-revoke a token, nor read one, nor write the pace of any provider
// account except through its functions.
func TestRuntimeRoleCannotWriteTokensOrPace(t *testing.T) {
	db := boundary(t)
	for _, stmt := range []string{
		`INSERT INTO owed_api_tokens (tenant_id, token_hash, name) VALUES ('tenant-b', sha256('minted'), 'minted')`,
		`UPDATE owed_api_tokens SET revoked_at = NULL`,
		`UPDATE owed_api_tokens SET last_used_at = now()`,
		`SELECT token_hash FROM owed_api_tokens`,
		`INSERT INTO owed_provider_pace (account, tat, paused_until, updated_at) VALUES ('twilio', now() + interval '1 day', now() + interval '1 day', now())`,
		`UPDATE owed_provider_pace SET paused_until = now() + interval '1 day'`,
		`INSERT INTO owed_provider_limited_minutes (account, minute) VALUES ('twilio', now())`,
	} {
		for who, u := range map[string]string{"the application role": db.AppURL, "an apps' role": appsRole(t, db),
			"on-call's login": db.OperatorURL} {
			err := inScope(t, u, []string{scopeA}, func(tx *sql.Tx) error {
				_, err := tx.Exec(stmt)
				return err
			})
			if !permissionDenied(err) {
				t.Errorf("%s: %s: %v, want permission denied", who, stmt, err)
			}
		}
	}
	// The token administrator can: it is the one role that mints tokens.
	if _, err := db.Admin.Exec(`INSERT INTO owed_api_tokens (tenant_id, token_hash) VALUES ('tenant-a', sha256('admin'))`); err != nil {
		t.Errorf("the token administrator cannot mint a token: %v", err)
	}
}

// The apps' role runs none of the services' cross-tenant functions and
// reads nothing of the tables that are not a tenant's; it does write its own
// tenant's notifications.
func TestAppsRoleIsItsTenantsNotifications(t *testing.T) {
	db := boundary(t)
	u := appsRole(t, db)
	for _, stmt := range []string{
		`SELECT * FROM owed_sweep_lease(0, NULL, 60, 60, 100, NULL, 0)`,
		`SELECT owed_sweep_mark_queued(ARRAY[1::bigint], NULL, 60)`,
		`SELECT * FROM owed_ledger_tenants_of(ARRAY[1::bigint, 2])`,
		`SELECT * FROM owed_materialise_upcoming(now(), now() + interval '1 day')`,
		`SELECT * FROM owed_token_authenticate(sha256('b'), NULL, 60)`,
		`SELECT owed_pace_pause('twilio', 86400000000, NULL)`,
		`SELECT count(*) FROM owed_api_tokens`,
		`SELECT count(*) FROM owed_provider_pace`,
		`SELECT count(*) FROM owed_notification_attempts`,
	} {
		err := inScope(t, u, []string{scopeA}, func(tx *sql.Tx) error {
			_, err := tx.Exec(stmt)
			return err
		})
		if !permissionDenied(err) {
			t.Errorf("apps' role: %s: %v, want permission denied", stmt, err)
		}
	}
	err := inScope(t, u, []string{scopeA}, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
		                      VALUES ('tenant-a', 'carol', 'sms', 'k', 'A-2', now())`); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil || n != 2 {
			t.Errorf("apps' role scoped to %s sees %d rows (err %v), want its 2", tenantA, n, err)
		}
		return nil
	})
	if err != nil {
		t.Errorf("apps' role writing its own tenant's notification: %v", err)
	}
}

// Every SECURITY DEFINER function has its search_path pinned, is owned by
// owed_definer, and is not executable by PUBLIC; no harness login is a
// member of owed_definer.
func TestDefinerFunctionsArePinnedAndPrivate(t *testing.T) {
	db := testdb.New(t)
	rows, err := db.Owner.Query(`
SELECT p.oid::regprocedure::text, pg_get_userbyid(p.proowner), coalesce(array_to_string(p.proconfig, ';'), ''),
       p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public' AND p.prosecdef`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ledgerOwner string
	if err := db.Owner.QueryRow(`SELECT pg_get_userbyid(relowner) FROM pg_class
	    WHERE oid = 'owed_notifications'::regclass`).Scan(&ledgerOwner); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for rows.Next() {
		var name, owner, config string
		var public bool
		if err := rows.Scan(&name, &owner, &config, &public); err != nil {
			t.Fatal(err)
		}
		seen[name[:strings.Index(name, "(")]] = true
		if config != "search_path=pg_catalog, public, pg_temp" {
			t.Errorf("%s: proconfig %q, want search_path pinned to pg_catalog, public, pg_temp", name, config)
		}
		// The one exception creates the ledger's partitions, which takes
		// the tables' ownership: it is the schema owner's, takes no
		// argument and only makes the months the sweeper's maintenance
		// makes (owed_ledger_partitions_keep, notifications.sql).
		if want := "owed_definer"; name == "owed_ledger_partitions_keep()" {
			if owner != ledgerOwner {
				t.Errorf("%s is owned by %s, want the ledger's owner %s", name, owner, ledgerOwner)
			}
		} else if owner != want {
			t.Errorf("%s is owned by %s, want owed_definer", name, owner)
		}
		if public {
			t.Errorf("%s is executable by PUBLIC", name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"owed_sweep_lease", "owed_sweep_survey", "owed_sweep_expire", "owed_sweep_mark_queued",
		"owed_sweep_release", "owed_sweep_leasable", "owed_ledger_backlog", "owed_ledger_stats", "owed_ledger_tenants_of",
		"owed_materialise_upcoming", "owed_pace_reserve", "owed_pace_give_back", "owed_pace_pause",
		"owed_token_authenticate", "owed_token_touch"} {
		if !seen[f] {
			t.Errorf("no SECURITY DEFINER function %s", f)
		}
	}
	for _, login := range []string{testdb.AppUser(), testdb.AdminUser(), testdb.OperatorUser()} {
		var member bool
		if err := db.Owner.QueryRow(`SELECT pg_has_role($1, 'owed_definer', 'MEMBER')`, login).Scan(&member); err != nil || member {
			t.Errorf("%s is a member of owed_definer (err %v)", login, err)
		}
	}
}

// A login of any name granted owed_runtime starts and runs the sweeper's
// cross-tenant statements; a member of owed_definer, owed_token_admin or
// owed_operator, or a login without owed_runtime, is refused at start-up,
// naming why.
func TestRuntimeMembershipIsWhatCounts(t *testing.T) {
	db := boundary(t)
	acme := newRole(t, db, "IN ROLE owed_runtime")
	if err := start(acme, false); err != nil {
		t.Fatalf("a login granted owed_runtime: Start: %v", err)
	}
	pool, err := sql.Open("postgres", acme)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l := ledger.New(pool, nil)
	ctx := context.Background()
	leased, err := l.Lease(ctx, ledger.LeaseParams{Limit: 10, For: time.Minute})
	if err != nil || len(leased) != 2 {
		t.Fatalf("lease as a login granted owed_runtime: %d rows (err %v), want both tenants' 2", len(leased), err)
	}
	if n, err := l.MarkQueued(ctx, []int64{leased[0].ID, leased[1].ID}, time.Minute); err != nil || n != 2 {
		t.Errorf("mark queued: %d (err %v), want 2", n, err)
	}
	if _, err := l.Survey(ctx, time.Minute, ledger.Sharing{}, 100); err != nil {
		t.Errorf("survey: %v", err)
	}
	if b, err := l.Backlog(ctx); err != nil || b.Owed != 2 {
		t.Errorf("backlog: %+v (err %v), want 2 owed", b, err)
	}
	if d, err := l.GetAny(ctx, leased[0].ID); err != nil || d.ID != leased[0].ID {
		t.Errorf("get any: %+v (err %v)", d.Notification, err)
	}

	app := testdb.AppUser()
	for _, c := range []struct{ name, url, want string }{
		{"a login without owed_runtime", newRole(t, db, ""), "not a member of owed_runtime"},
		{"a member of owed_definer", newRole(t, db, "IN ROLE "+app+", owed_definer"), "owed_definer"},
		{"a member of owed_token_admin", newRole(t, db, "IN ROLE "+app+", owed_token_admin"), "owed_token_admin"},
		{"the token administrator", db.AdminURL, "owed_token_admin"},
		{"a member of owed_operator", newRole(t, db, "IN ROLE "+app+", owed_operator"), "owed_operator"},
		{"on-call's login", db.OperatorURL, "owed_operator"},
	} {
		err := start(c.url, false)
		var insecure *service.InsecureRoleError
		if !errors.As(err, &insecure) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Start = %v, want a refusal naming %q", c.name, err, c.want)
		}
	}
}

// An owed_apps login reads and writes only the tenants it is bound to
// (owed_apps_logins, by session_user): naming another tenant, the review's
// set_config('owed.tenant_id', 'globex', true), reads no payload and
// updates no row; a login with no binding sees and writes nothing; and a
// login that can SET ROLE to another apps login does not borrow its
// bindings.
func TestAppsLoginIsBoundToItsTenants(t *testing.T) {
	db := boundary(t)
	scopeB := `SELECT set_config('owed.tenant_id', 'tenant-b', true)`
	tables := []string{"owed_notifications", "owed_items", "owed_contacts", "owed_undeliverable"}
	crmB := newRole(t, db, "IN ROLE owed_apps")
	bind(t, db, userOf(t, crmB), tenantB)
	crmA := appsRole(t, db)
	if _, err := db.Owner.Exec(`GRANT ` + userOf(t, crmB) + ` TO ` + userOf(t, crmA)); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		url string
		set []string
	}{
		"a login bound to tenant A, naming B":           {crmA, []string{scopeB}},
		"a login bound to A, SET ROLE to B's, naming B": {crmA, []string{`SET LOCAL ROLE ` + userOf(t, crmB), scopeB}},
		"a login with no binding, naming B":             {newRole(t, db, "IN ROLE owed_apps"), []string{scopeB}},
	}
	for who, c := range cases {
		err := inScope(t, c.url, c.set, func(tx *sql.Tx) error {
			for _, table := range tables {
				if n, err := countB(tx, table); err != nil || n != 0 {
					t.Errorf("%s sees %d of %s's rows in %s (err %v), want none", who, n, tenantB, table, err)
				}
			}
			var payload sql.NullString
			if err := tx.QueryRow(`SELECT payload::text FROM owed_notifications WHERE tenant_id = 'tenant-b'`).Scan(&payload); err != sql.ErrNoRows {
				t.Errorf("%s read tenant B's payload %v (err %v), want no row", who, payload, err)
			}
			res, err := tx.Exec(`UPDATE owed_notifications SET payload = '{"text":"owned"}' WHERE tenant_id = 'tenant-b'`)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 0 {
				t.Errorf("%s updated %d of tenant B's rows", who, n)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", who, err)
		}
		err = inScope(t, c.url, c.set, func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
			                   VALUES ('tenant-b', 'mallory', 'sms', 'k', 'M-1', now())`)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "row-level security") {
			t.Errorf("%s inserted a row for %s (err %v), want a row-level security refusal", who, tenantB, err)
		}
	}
	// The login bound to B does see B's rows.
	err := inScope(t, crmB, []string{scopeB}, func(tx *sql.Tx) error {
		n, err := countB(tx, "owed_notifications")
		if err == nil && n != 1 {
			t.Errorf("the login bound to %s sees %d of its rows, want 1", tenantB, n)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}

// The token administrator mints tokens and binds owed_apps logins, and
// touches nothing of the ledger: no tenant table, no cross-tenant function,
// no hold, pause or audit line.
func TestTokenAdminTouchesNoLedger(t *testing.T) {
	db := boundary(t)
	for _, stmt := range append([]string{
		`SELECT count(*) FROM owed_notifications`,
		`SELECT count(*) FROM owed_items`,
		`SELECT count(*) FROM owed_contacts`,
		`SELECT count(*) FROM owed_provider_pace`,
		`SELECT * FROM owed_ledger_tenants_of(ARRAY[1::bigint, 2])`,
		`SELECT * FROM owed_sweep_lease(0, NULL, 60, 60, 100, NULL, 0)`,
	}, operatorWrites...) {
		err := inScope(t, db.AdminURL, []string{scopeA}, func(tx *sql.Tx) error {
			_, err := tx.Exec(stmt)
			return err
		})
		if !permissionDenied(err) {
			t.Errorf("the token administrator: %s: %v, want permission denied", stmt, err)
		}
	}
}

// The console's own login (OWED_OPERATOR_DATABASE_URL) must be a member
// of owed_operator, and is checked as a service's login is otherwise: the
// services' login, the token administrator and the owner are refused,
// each naming why; on-call's login is accepted.
func TestConsoleLoginMustBeAnOperator(t *testing.T) {
	db := testdb.New(t)
	open := func(u string) error {
		pool, err := service.OpenOperatorDB(context.Background(), zerolog.Nop(), "OWED_OPERATOR_DATABASE_URL", u, 1, false)
		if err == nil {
			pool.Close()
		}
		return err
	}
	if err := open(db.OperatorURL); err != nil {
		t.Fatalf("on-call's login: %v", err)
	}
	for _, c := range []struct{ name, url, want string }{
		{"the services' login", db.AppURL, "not a member of owed_operator"},
		{"the token administrator", db.AdminURL, "owed_token_admin"},
		{"the owner", db.OwnerURL, "owns"},
		{"a member of owed_operator and owed_definer", newRole(t, db, "IN ROLE owed_operator, owed_definer"), "owed_definer"},
	} {
		err := open(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "OWED_OPERATOR_DATABASE_URL") {
			t.Errorf("%s: %v, want a refusal naming OWED_OPERATOR_DATABASE_URL and %q", c.name, err, c.want)
		}
	}
}

// The worker's batches scope a statement to a set of tenants
// (owed.tenant_ids, owed_tenant_scope): a set naming tenant A reads,
// updates and inserts nothing of tenant B's in the ledger's tables, and it
// means nothing to an apps' role, whose policies name its bindings alone.
func TestTenantSetScopesLikeOneTenant(t *testing.T) {
	db := boundary(t)
	for _, stmt := range []string{
		`INSERT INTO owed_event_payloads (tenant_id, payload) VALUES ('tenant-b', '{"text":"b"}')`,
		`INSERT INTO owed_undeliverable (tenant_id, channel, address, provider, code, reason, marked_at)
		 VALUES ('tenant-b', 'sms', '+15550002', 'sandbox', 'blocked', 'blocked', now())`,
		`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at, outcome)
		 SELECT id, tenant_id, 1, 'sandbox', now(), now(), 'accepted' FROM owed_notifications WHERE tenant_id = 'tenant-b'`,
	} {
		if _, err := db.Owner.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	setA := `SELECT set_config('owed.tenant_ids', '{tenant-a}', true)`
	roles := map[string]string{"the application role": db.AppURL, "an apps' role": appsRole(t, db)}
	for who, u := range roles {
		for _, table := range []string{"owed_notifications", "owed_event_payloads", "owed_undeliverable",
			"owed_notification_attempts"} {
			err := inScope(t, u, []string{setA}, func(tx *sql.Tx) error {
				n, err := countB(tx, table)
				if err == nil && n != 0 {
					t.Errorf("%s with the set {tenant-a} sees %d of %s's rows in %s, want none", who, n, tenantB, table)
				}
				return err
			})
			if err != nil && !permissionDenied(err) {
				t.Errorf("%s reading %s: %v", who, table, err)
			}
		}
		err := inScope(t, u, []string{setA}, func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
			                   VALUES ('tenant-b', 'mallory', 'sms', 'k', 'M-2', now())`)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "row-level security") {
			t.Errorf("%s with the set {tenant-a} inserted a row for %s (err %v), want a row-level security refusal", who, tenantB, err)
		}
		err = inScope(t, u, []string{setA}, func(tx *sql.Tx) error {
			res, err := tx.Exec(`UPDATE owed_notifications SET payload = '{"text":"owned"}' WHERE tenant_id = 'tenant-b'`)
			if err == nil {
				if n, _ := res.RowsAffected(); n != 0 {
					t.Errorf("%s with the set {tenant-a} updated %d of %s's rows", who, n, tenantB)
				}
			}
			return err
		})
		if err != nil {
			t.Errorf("%s update: %v", who, err)
		}
	}
	// The set names what it names: the application role sees tenant A's row
	// through it, which is what the worker's batches need.
	err := inScope(t, db.AppURL, []string{setA}, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("the application role with the set {tenant-a} sees %d rows, want tenant A's one", n)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// A tenant set given for every session is refused at start-up, as a tenant
// scope is: every statement outside a batch would see those tenants' rows.
func TestSessionWideTenantSetIsRefused(t *testing.T) {
	db := testdb.New(t)
	pool, err := sql.Open("postgres", withOption(db.AppURL, "-c owed.tenant_ids={tenant-a}"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = service.CheckRole(context.Background(), pool)
	if err == nil || !strings.Contains(err.Error(), "owed.tenant_ids") {
		t.Fatalf("CheckRole with owed.tenant_ids set for every session: %v, want a refusal naming owed.tenant_ids", err)
	}
}
