package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/testdb"
)

// apps bind, list and unbind an owed_apps login as the token
// administrator, naming the operator; the services' role is refused, and a
// missing --login is a usage error.
func TestAppsBindListUnbind(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const login = "owed_owedctl_apps_test"
	if _, err := db.Owner.Exec(`CREATE ROLE ` + login + ` LOGIN IN ROLE owed_apps`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Owner.Exec(`DROP ROLE ` + login) })
	run := func(dbURL string, args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runApps(ctx, w, append(args, "--database-url", dbURL))
		})
	}
	if out, err := run(db.AdminURL, "bind", "--login", login, "--tenant", "acme", "--operator", "alice", "--reason", "crm"); err != nil ||
		!strings.Contains(out, "may name tenant acme (bound by alice)") {
		t.Fatalf("bind: %v\n%s", err, out)
	}
	if out, err := run(db.AdminURL, "list", "--json"); err != nil || !strings.Contains(out, `"login": "`+login+`"`) ||
		!strings.Contains(out, `"bound_login": "`+testdb.AdminUser()+`"`) {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if out, err := run(db.AdminURL, "list", "--login", login); err != nil || !strings.Contains(out, "acme") || !strings.Contains(out, "alice") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if _, err := run(db.AppURL, "bind", "--login", login, "--tenant", "globex", "--operator", "mallory"); err == nil ||
		!strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("bind as the services' role: %v, want permission denied", err)
	}
	if out, err := run(db.AdminURL, "unbind", "--login", login, "--tenant", "acme", "--operator", "bob"); err != nil ||
		!strings.Contains(out, "no longer sees tenant acme") {
		t.Fatalf("unbind: %v\n%s", err, out)
	}
	if out, err := run(db.AdminURL, "list", "--json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list --json after unbind: %v\n%s", err, out)
	}
	var usage usageError
	if _, err := run(db.AdminURL, "bind", "--tenant", "acme"); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--login") {
		t.Fatalf("bind without --login: %v, want a usage error naming --login", err)
	}
}
