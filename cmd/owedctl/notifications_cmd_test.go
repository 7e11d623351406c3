package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// lookupFixture is a database with two of acme's rows, one delivered with
// a recorded attempt and one still pending, and one of globex's rows.
type lookupFixture struct {
	dbURL     string
	delivered int64
	pending   int64
	other     int64
}

func setupLookup(t *testing.T) lookupFixture {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	row := func(recipient, ref string) ledger.NewNotification {
		return ledger.NewNotification{Recipient: recipient, Channel: "email", Kind: "reminder", RefID: ref,
			DueAt: due, Payload: json.RawMessage(`{"subject":"Invoice due","text":"Please pay ` + ref + `"}`)}
	}
	acme, err := l.Schedule(ctx, "acme", []ledger.NewNotification{row("user-1", "INV-1"), row("user-2", "INV-2")})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	globex, err := l.Schedule(ctx, "globex", []ledger.NewNotification{row("user-9", "INV-9")})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	c, err := l.ClaimForSend(ctx, "acme", acme[0].ID, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute})
	if err != nil || c.Outcome != ledger.ClaimSend {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}
	start := time.Now()
	if _, err := l.SettleDelivered(ctx, c.Hold, ledger.Attempt{Attempt: 1, Provider: "sandbox",
		StartedAt: start, FinishedAt: start.Add(40 * time.Millisecond), ProviderMessageID: "sbx-msg-77", HTTPStatus: 202}); err != nil {
		t.Fatalf("settle: %v", err)
	}
	return lookupFixture{dbURL: db.AppURL, delivered: acme[0].ID, pending: acme[1].ID, other: globex[0].ID}
}

func runCmd(t *testing.T, fn func(context.Context, *bytes.Buffer) error) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := fn(context.Background(), &out)
	return out.String(), err
}

func TestNotificationsShowPrintsTheRowAndEveryAttempt(t *testing.T) {
	t.Parallel()
	f := setupLookup(t)
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runNotifications(ctx, w, []string{"show", strconv.FormatInt(f.delivered, 10), "--database-url", f.dbURL})
	})
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	for _, want := range []string{"state:", "delivered", "tenant:", "acme", "sbx-msg-77", "accepted", "202", "INV-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}

	// A pending row has no attempts yet, and says so.
	out, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runNotifications(ctx, w, []string{"show", "--database-url", f.dbURL, strconv.FormatInt(f.pending, 10)})
	})
	if err != nil || !strings.Contains(out, "pending") || !strings.Contains(out, "no send attempts") {
		t.Errorf("show pending: err=%v\n%s", err, out)
	}

	// --json carries the attempts under "attempts".
	out, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runNotifications(ctx, w, []string{"show", strconv.FormatInt(f.delivered, 10), "--json", "--database-url", f.dbURL})
	})
	if err != nil {
		t.Fatalf("show --json: %v", err)
	}
	var d ledger.Detail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("show --json is not JSON: %v\n%s", err, out)
	}
	if d.State != ledger.StateDelivered || len(d.History) != 1 || d.History[0].ProviderMessageID != "sbx-msg-77" {
		t.Errorf("show --json: %+v", d)
	}
}

func TestNotificationsShowUnknownIDFails(t *testing.T) {
	t.Parallel()
	f := setupLookup(t)
	_, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runNotifications(ctx, w, []string{"show", strconv.FormatInt(f.other+1000, 10), "--database-url", f.dbURL})
	})
	var ue usageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "not found") {
		t.Errorf("show of a missing id: got %v, want a plain not-found failure (exit 1)", err)
	}
}

func TestNotificationsFindStaysInTheTenantAndFilters(t *testing.T) {
	t.Parallel()
	f := setupLookup(t)
	find := func(args ...string) string {
		t.Helper()
		out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runNotifications(ctx, w, append([]string{"find", "--database-url", f.dbURL}, args...))
		})
		if err != nil {
			t.Fatalf("find %v: %v", args, err)
		}
		return out
	}
	out := find("--tenant", "acme")
	for _, want := range []string{"user-1", "user-2", "delivered", "pending", "sbx-msg-77"} {
		if !strings.Contains(out, want) {
			t.Errorf("find --tenant acme lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "user-9") {
		t.Errorf("find --tenant acme shows globex's row:\n%s", out)
	}
	out = find("--tenant", "acme", "--ref", "INV-2")
	if !strings.Contains(out, "user-2") || strings.Contains(out, "user-1") {
		t.Errorf("find --ref INV-2:\n%s", out)
	}
	out = find("--tenant", "acme", "--recipient", "nobody")
	if !strings.Contains(out, "no notifications") {
		t.Errorf("find with no match:\n%s", out)
	}
	out = find("--tenant", "acme", "--kind", "reminder", "--json")
	var got struct{ Notifications []ledger.Notification }
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Notifications) != 2 {
		t.Errorf("find --json: err=%v rows=%d\n%s", err, len(got.Notifications), out)
	}
}

// list takes the console's filters (state, channel, recipient prefix, due
// and settled ranges), prints the counts by state, and pages with
// --cursor.
func TestNotificationsListFiltersCountsAndPages(t *testing.T) {
	t.Parallel()
	f := setupLookup(t)
	list := func(args ...string) string {
		t.Helper()
		out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runNotifications(ctx, w, append([]string{"list", "--database-url", f.dbURL, "--tenant", "acme"}, args...))
		})
		if err != nil {
			t.Fatalf("list %v: %v", args, err)
		}
		return out
	}
	out := list("--state", "delivered", "--channel", "email", "--recipient-prefix", "user-")
	if !strings.Contains(out, "user-1") || strings.Contains(out, "user-2") || !strings.Contains(out, "1 match: delivered 1") {
		t.Errorf("list --state delivered:\n%s", out)
	}
	hour := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if out := list("--settled-from", hour); !strings.Contains(out, "user-1") || strings.Contains(out, "user-2") {
		t.Errorf("list --settled-from:\n%s", out)
	}
	if out := list("--due-to", hour); !strings.Contains(out, "no notifications") {
		t.Errorf("list --due-to an hour ago:\n%s", out)
	}
	out = list("--limit", "1")
	if !strings.Contains(out, "2 match: pending 1, delivered 1") || !strings.Contains(out, "next page: --cursor ") {
		t.Fatalf("list --limit 1 lacks the counts or the cursor:\n%s", out)
	}
	cursor := strings.TrimSpace(out[strings.Index(out, "--cursor ")+len("--cursor "):])
	var page struct {
		Notifications []ledger.Notification
		Next          string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(list("--limit", "1", "--cursor", cursor, "--json")), &page); err != nil ||
		len(page.Notifications) != 1 || page.Next != "" {
		t.Errorf("the second page: %+v, %v; want one row and no cursor", page, err)
	}
}

func TestNotificationsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"list"},
		{"show"},
		{"show", "abc", "--database-url", "postgres://x@127.0.0.1:1/none"},
		{"find", "--database-url", "postgres://x@127.0.0.1:1/none"},
		{"find", "--tenant", "acme", "--limit", "0", "--database-url", "postgres://x@127.0.0.1:1/none"},
		{"list", "--tenant", "acme", "--state", "lost", "--database-url", "postgres://x@127.0.0.1:1/none"},
		{"list", "--tenant", "acme", "--due-from", "yesterday", "--database-url", "postgres://x@127.0.0.1:1/none"},
		{"list", "--tenant", "acme", "--cursor", "abc", "--database-url", "postgres://x@127.0.0.1:1/none"},
	} {
		_, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error { return runNotifications(ctx, w, args) })
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("notifications %v: got %v, want a usage error (exit 2)", args, err)
		}
	}
}
