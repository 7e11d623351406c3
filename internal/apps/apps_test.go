package apps_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/apps"
	"github.com/owedhq/owed/internal/testdb"
)

var ctx = context.Background()

// login creates a login for this test, "CREATE ROLE <name> LOGIN <attrs>",
// as the owner (it has CREATEROLE), and returns its name and a pool on db
// as it.
func login(t *testing.T, db *testdb.DB, attrs string) (string, *sql.DB) {
	t.Helper()
	b := make([]byte, 5)
	rand.Read(b)
	name := "owed_apps_test_" + hex.EncodeToString(b)
	if _, err := db.Owner.Exec("CREATE ROLE " + name + " LOGIN " + attrs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Owner.Exec("DROP OWNED BY " + name)
		db.Owner.Exec("DROP ROLE " + name)
	})
	u, err := url.Parse(db.AppURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	pool, err := sql.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return name, pool
}

// seen counts the notifications a login's transaction scoped to tenant
// sees, and tries to write one for it.
func seen(t *testing.T, pool *sql.DB, tenant string) (int, error) {
	t.Helper()
	tx, err := pool.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT set_config('owed.tenant_id', $1, true)`, tenant); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM owed_notifications`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
	                  VALUES ($1, 'r', 'sms', 'k', 'new', now())`, tenant)
	return n, err
}

// A login sees and writes a tenant's rows only while a binding gives it
// the tenant; binding and unbinding are the token administrator's, and
// each writes a line of the audit trail naming the operator and the
// database login that ran it.
func TestBindUnbindList(t *testing.T) {
	db := testdb.New(t)
	for _, tenant := range []string{"acme", "globex"} {
		if _, err := db.Owner.Exec(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at)
			VALUES ($1, 'r', 'sms', 'k', 'old', now())`, tenant); err != nil {
			t.Fatal(err)
		}
	}
	crm, pool := login(t, db, "IN ROLE owed_apps")
	if n, err := seen(t, pool, "acme"); n != 0 || err == nil {
		t.Fatalf("an unbound login sees %d rows of acme and writes one (err %v), want nothing", n, err)
	}

	b := apps.New(db.Admin)
	if added, err := b.Bind(ctx, crm, "acme", "alice", "the CRM's own SQL"); err != nil || !added {
		t.Fatalf("Bind = %v, %v", added, err)
	}
	if added, err := b.Bind(ctx, crm, "acme", "alice", "again"); err != nil || added {
		t.Fatalf("Bind again = %v, %v; want nothing new", added, err)
	}
	if n, err := seen(t, pool, "acme"); n != 1 || err != nil {
		t.Fatalf("the bound login sees %d rows of acme (err %v), want its 1 and a write", n, err)
	}
	if n, err := seen(t, pool, "globex"); n != 0 || err == nil {
		t.Fatalf("the login bound to acme sees %d rows of globex and writes one (err %v), want nothing", n, err)
	}
	list, err := b.List(ctx, crm)
	if err != nil || len(list) != 1 || list[0].Tenant != "acme" || list[0].BoundBy != "alice" || list[0].BoundLogin != testdb.AdminUser() {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if all, err := b.List(ctx, ""); err != nil || len(all) != 1 {
		t.Fatalf("List of every login = %+v, %v", all, err)
	}

	if had, err := b.Unbind(ctx, crm, "acme", "bob", "the CRM moved to the API"); err != nil || !had {
		t.Fatalf("Unbind = %v, %v", had, err)
	}
	if had, err := b.Unbind(ctx, crm, "acme", "bob", ""); err != nil || had {
		t.Fatalf("Unbind again = %v, %v; want nothing to unbind", had, err)
	}
	if n, err := seen(t, pool, "acme"); n != 0 || err == nil {
		t.Fatalf("the unbound login sees %d rows of acme (err %v), want nothing", n, err)
	}

	rows, err := db.Owner.Query(`SELECT operator, action, target, count, login FROM owed_operator_audit ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var operator, action, target, who string
		var count int
		if err := rows.Scan(&operator, &action, &target, &count, &who); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Join([]string{operator, action, target, string(rune('0' + count)), who}, " "))
	}
	rows.Close()
	admin, target := testdb.AdminUser(), "login="+crm+" tenant=acme"
	want := []string{"alice apps_bind " + target + " 1 " + admin, "alice apps_bind " + target + " 0 " + admin,
		"bob apps_unbind " + target + " 1 " + admin, "bob apps_unbind " + target + " 0 " + admin}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// Only the token administrator binds: the runtime role, on-call's login and
// the apps' login itself are refused, and so is a login that does not exist
// or is not a member of owed_apps, each named.
func TestBindRefusals(t *testing.T) {
	db := testdb.New(t)
	crm, self := login(t, db, "IN ROLE owed_apps")
	for who, pool := range map[string]*sql.DB{"the runtime role": db.App, "on-call's login": db.Operator, "the apps' login": self} {
		_, err := apps.New(pool).Bind(ctx, crm, "acme", "mallory", "")
		var pqErr *pq.Error
		if !errors.As(err, &pqErr) || pqErr.Code != "42501" {
			t.Errorf("%s binds: %v, want permission denied", who, err)
		}
	}
	plain, _ := login(t, db, "")
	b := apps.New(db.Admin)
	for _, c := range []struct{ login, tenant, operator, reason, want string }{
		{"owed_no_such_login", "acme", "alice", "", "does not exist"},
		{plain, "acme", "alice", "", "not a member of owed_apps"},
		{"", "acme", "alice", "", "login"},
		{crm, "", "alice", "", "tenant_id"},
		{crm, "acme", "", "", "operator"},
		{crm, "acme", "alice", strings.Repeat("r", apps.MaxReason+1), "reason"},
	} {
		if _, err := b.Bind(ctx, c.login, c.tenant, c.operator, c.reason); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Bind(%q, %q, %q, %d bytes) = %v, want an error naming %s", c.login, c.tenant, c.operator, len(c.reason), err, c.want)
		}
	}
	if list, err := b.List(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("bindings after the refusals: %+v, %v", list, err)
	}
}
