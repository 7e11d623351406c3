package main

import (
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/testdb"
)

// TestTokensConnectAsTheTokenAdministrator: a shell holding the
// application role's URL in OWED_DATABASE_URL (the dev stack's env file)
// lists tokens through OWED_TOKEN_ADMIN_DATABASE_URL; without it the
// database's refusal comes back saying what to connect as.
func TestTokensConnectAsTheTokenAdministrator(t *testing.T) {
	db := testdb.New(t)
	t.Setenv("OWED_DATABASE_URL", db.AppURL)
	t.Setenv(tokenAdminLogin.variable, "")
	code, _, stderr, _ := runCaptured(t, "tokens", "list", "--tenant", "acme")
	if code != 1 || !strings.Contains(stderr, "permission denied") || !strings.Contains(stderr, tokenAdminLogin.variable) {
		t.Errorf("tokens list as the application role: exit %d, %q; want 1 and the permission error naming %s", code, stderr, tokenAdminLogin.variable)
	}
	t.Setenv(tokenAdminLogin.variable, db.AdminURL)
	if code, _, stderr, _ := runCaptured(t, "tokens", "create", "--tenant", "acme", "--name", "billing"); code != 0 {
		t.Fatalf("tokens create with %s set: exit %d\n%s", tokenAdminLogin.variable, code, stderr)
	}
	code, stdout, stderr, _ := runCaptured(t, "tokens", "list", "--tenant", "acme")
	if code != 0 || !strings.Contains(stdout, "billing") {
		t.Errorf("tokens list with %s set: exit %d, %q %q; want the token listed", tokenAdminLogin.variable, code, stdout, stderr)
	}
}
