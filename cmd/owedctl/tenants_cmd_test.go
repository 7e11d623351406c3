package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/testdb"
)

// tenants pause, list and resume a tenant as on-call's login, naming the
// actor, and the database records the login; pause without a reason is a
// usage error, and the services' role is refused, told what to connect as.
func TestTenantsPauseListResume(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runTenants(ctx, w, append(args, "--database-url", db.OperatorURL))
		})
	}
	_, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runTenants(ctx, w, []string{"pause", "--tenant", "acme", "--reason", "r", "--database-url", db.AppURL})
	})
	if err == nil || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "owed_operator") {
		t.Fatalf("pause as the services' role: %v, want a refusal naming owed_operator", err)
	}
	if out, err := run("pause", "--tenant", "acme", "--reason", "runaway campaign", "--actor", "alice"); err != nil ||
		!strings.Contains(out, "tenant acme paused by alice") {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	if out, err := run("list"); err != nil || !strings.Contains(out, "acme") || !strings.Contains(out, "alice") ||
		!strings.Contains(out, "runaway campaign") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := run("list", "--json"); err != nil || !strings.Contains(out, `"tenant_id": "acme"`) {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if list, err := pace.NewTenants(db.App, nil).List(context.Background()); err != nil || len(list) != 1 || list[0].Actor != "alice" {
		t.Fatalf("the pause as stored: %+v, %v", list, err)
	}
	var login string
	if err := db.Owner.QueryRow(`SELECT login FROM owed_tenant_pauses WHERE tenant_id = 'acme'`).Scan(&login); err != nil ||
		login != testdb.OperatorUser() {
		t.Fatalf("the pause's login: %q, %v; want %s", login, err, testdb.OperatorUser())
	}
	if out, err := run("resume", "--tenant", "acme"); err != nil || !strings.Contains(out, "tenant acme resumed") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	if out, err := run("resume", "--tenant", "acme"); err != nil || !strings.Contains(out, "was not paused") {
		t.Fatalf("second resume: %v\n%s", err, out)
	}
	if out, err := run("list", "--json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list --json with none paused: %v\n%s", err, out)
	}
	var usage usageError
	if _, err := run("pause", "--tenant", "acme"); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--reason") {
		t.Fatalf("pause without --reason: %v, want a usage error naming --reason", err)
	}
}

// provider pause holds an account (the actor defaults to the OS user),
// and provider resume lifts the hold.
func TestProviderPauseHoldsUntilResume(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	accounts := pace.NewAccounts(db.App, nil)
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runProviderPause(ctx, w, []string{"--account", "twilio", "--reason", "carrier incident", "--database-url", db.OperatorURL})
	})
	if err != nil || !strings.Contains(out, "provider account twilio held by") {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	st, err := accounts.State(context.Background(), "twilio")
	if err != nil || !st.Held() || st.Hold.Reason != "carrier incident" || st.Hold.Actor == "" {
		t.Fatalf("after pause: %+v, %v; want held with the reason and an actor", st, err)
	}
	out, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runProviderResume(ctx, w, []string{"--account", "twilio", "--database-url", db.OperatorURL})
	})
	if err != nil || !strings.Contains(out, "hold by") || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	if st, err := accounts.State(context.Background(), "twilio"); err != nil || st.Held() {
		t.Fatalf("after resume: %+v, %v; want not held", st, err)
	}
}
