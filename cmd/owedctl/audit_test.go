package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/console"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// The reproduction: a provider account held in the console and
// resumed with owedctl left the audit page showing a hold never lifted,
// since owedctl wrote no line. Both are on the trail now, each with its
// operator and reason.
func TestHoldInTheConsoleResumeFromOwedctlAuditsBoth(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	oncall := ledger.New(db.Operator, nil)
	holdInConsole(t, oncall, "alice", "twilio", "carrier incident")

	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runProviderResume(ctx, w, []string{"--account", "twilio", "--operator", "bob", "--reason", "carrier recovered",
			"--database-url", db.OperatorURL})
	})
	if err != nil || !strings.Contains(out, "resumed") {
		t.Fatalf("provider resume: %v\n%s", err, out)
	}
	got, err := oncall.OperatorActions(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.OperatorAction{
		{Operator: "bob", Action: "account_resume", Target: "account=twilio", Count: 1, Reason: "carrier recovered"},
		{Operator: "alice", Action: "account_hold", Target: "account=twilio", Count: 1, Reason: "carrier incident"},
	}
	if len(got) != len(want) {
		t.Fatalf("audit trail %+v, want %+v", got, want)
	}
	for i := range want {
		got[i].ID, got[i].At = 0, want[i].At
		if got[i] != want[i] {
			t.Errorf("audit line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Every other owedctl write lands on the trail too: tenants pause and
// resume, tokens create and revoke (as the token administrator), with
// --operator or the OS user, and --reason.
func TestOwedctlWritesAreAudited(t *testing.T) {
	db := testdb.New(t)
	tenants := func(args ...string) {
		t.Helper()
		if _, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runTenants(ctx, w, append(args, "--database-url", db.OperatorURL))
		}); err != nil {
			t.Fatalf("tenants %v: %v", args, err)
		}
	}
	tenants("pause", "--tenant", "acme", "--reason", "runaway campaign", "--operator", "alice")
	tenants("resume", "--tenant", "acme", "--actor", "bob")
	t.Setenv("OWED_TOKEN_ADMIN_DATABASE_URL", db.AdminURL)
	code, id, stderr, _ := runCaptured(t, "tokens", "create", "--tenant", "acme", "--name", "crm", "--operator", "carol", "--reason", "new CRM")
	if code != 0 {
		t.Fatalf("tokens create: exit %d: %s", code, stderr)
	}
	code, _, stderr, _ = runCaptured(t, "tokens", "revoke", "--token", strings.TrimSpace(id), "--reason", "leaked")
	if code != 0 {
		t.Fatalf("tokens revoke: exit %d: %s", code, stderr)
	}
	got, err := ledger.New(db.Operator, nil).OperatorActions(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	type line struct{ operator, action, reason string }
	me, err := osUserOr("", "--operator")
	if err != nil {
		t.Fatal(err)
	}
	want := []line{{me, "token_revoke", "leaked"}, {"carol", "token_create", "new CRM"},
		{"bob", "tenant_resume", ""}, {"alice", "tenant_pause", "runaway campaign"}}
	if len(got) != len(want) {
		t.Fatalf("audit trail %+v, want %v", got, want)
	}
	for i, w := range want {
		if g := got[i]; (line{g.Operator, g.Action, g.Reason}) != w || g.Count != 1 || !strings.Contains(g.Target, "acme") {
			t.Errorf("audit line %d: %+v, want %v of acme, count 1", i, g, w)
		}
	}
}

// holdInConsole holds account in a console served over l, signed in as
// operator, as on-call does from the pauses page: the form, its
// confirmation, then the confirmed post.
func holdInConsole(t *testing.T, l *ledger.Ledger, operator, account, reason string) {
	t.Helper()
	const token = "audit-test-console-token-0123456789"
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, console.New(console.Options{Ledger: l, Token: token, Log: zerolog.Nop()}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values) (int, string) {
		t.Helper()
		resp, err := c.PostForm(srv.URL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := post("/console/login", url.Values{"operator": {operator}, "token": {token}, "next": {"/console/"}}); code != http.StatusSeeOther {
		t.Fatalf("console login answered %d: %s", code, body)
	}
	resp, err := c.Get(srv.URL + "/console/pauses")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field on the pauses page: %s", page)
	}
	form := url.Values{"csrf": {string(m[1])}, "do": {"hold-account"}, "name": {account}, "why": {reason}, "confirm": {"yes"}}
	if code, body := post("/console/pauses/action", form); code != http.StatusOK || !strings.Contains(body, "is held") {
		t.Fatalf("the console's hold answered %d: %s", code, body)
	}
}
