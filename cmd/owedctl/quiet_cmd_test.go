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

// auditActions reads the operators' audit trail: action and target, oldest
// first.
func auditActions(t *testing.T, db *testdb.DB) []string {
	t.Helper()
	rows, err := db.Owner.Query(`SELECT action || ' ' || target || ' ' || reason FROM owed_operator_audit ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// notifications update changes a pending row by id (whatever its tenant)
// or by its schedule key, in local time too, as on-call's login, and
// writes an audit line; a bad value is a usage error naming the flag.
func TestNotificationsUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	s, err := l.Schedule(ctx, "acme", []ledger.NewNotification{{Recipient: "user-1", Channel: "sms", Kind: "reminder",
		RefID: "INV-1", DueAt: due, Payload: json.RawMessage(`{"text":"old"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(s[0].ID, 10)
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runNotifications(ctx, w, append(append([]string{"update"}, args...), "--database-url", db.OperatorURL,
				"--operator", "alice"))
		})
	}
	if out, err := run(id, "--payload", `{"text":"new"}`, "--reason", "ticket 88"); err != nil ||
		!strings.Contains(out, "notification "+id+" of tenant acme updated: pending") {
		t.Fatalf("update by id: %v\n%s", err, out)
	}
	out, err := run("--tenant", "acme", "--recipient", "user-1", "--kind", "reminder", "--ref", "INV-1",
		"--key-due", due.Format(time.RFC3339), "--due-local", "2027-03-29T09:00", "--time-zone", "Europe/Berlin",
		"--reason", "ticket 89", "--json")
	if err != nil || !strings.Contains(out, `"certain": true`) {
		t.Fatalf("update by key in local time: %v\n%s", err, out)
	}
	d, err := l.Get(ctx, "acme", s[0].ID)
	if err != nil || d.DueAt.Format(time.RFC3339) != "2027-03-29T07:00:00Z" || d.TimeZone != "Europe/Berlin" ||
		!strings.Contains(string(d.Payload), "new") {
		t.Fatalf("the row after both updates: %+v, %v", d.Notification, err)
	}
	if got := auditActions(t, db); len(got) != 2 || got[0] != "update tenant=acme id="+id+" ticket 88" ||
		got[1] != "update tenant=acme id="+id+" ticket 89" {
		t.Errorf("audit trail %q, want both updates", got)
	}
	var ue usageError
	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{id, "--payload", `{"text":"x"}`}, "--reason"},
		{[]string{id, "--due-local", "2027-03-29 09:00", "--time-zone", "Europe/Berlin", "--reason", "r"}, "--due-local"},
		{[]string{id, "--due-local", "2027-03-29T09:00", "--time-zone", "Berlin", "--reason", "r"}, "--time-zone"},
		{[]string{"--tenant", "acme", "--recipient", "user-1", "--reason", "r"}, "--key-due"},
	} {
		if _, err := run(bad.args...); !errors.As(err, &ue) || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("update %q: %v, want a usage error naming %s", bad.args, err, bad.says)
		}
	}
}

// quiet-hours set, get and clear a tenant's windows per scope, moving its
// pending rows at once, each change audited.
func TestQuietHoursSetGetClear(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	// A Saturday 03:00 UTC: outside a weekday window.
	due := time.Date(2030, 3, 2, 3, 0, 0, 0, time.UTC)
	s, err := l.Schedule(ctx, "acme", []ledger.NewNotification{{Recipient: "user-1", Channel: "sms", Kind: "reminder",
		RefID: "INV-1", DueAt: due, Payload: json.RawMessage(`{"text":"hi"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runQuiet(ctx, w, append(args, "--database-url", db.OperatorURL))
		})
	}
	if out, err := run("set", "--tenant", "acme", "--window", "mon-fri 08:00-20:00", "--window", "sat 10:00-12:00",
		"--reason", "ticket 90", "--operator", "alice"); err != nil || !strings.Contains(out, "1 rows held") {
		t.Fatalf("set: %v\n%s", err, out)
	}
	if d, err := l.Get(ctx, "acme", s[0].ID); err != nil || d.DueAt.Format(time.RFC3339) != "2030-03-02T10:00:00Z" {
		t.Fatalf("the held row: %+v, %v; want Saturday 10:00", d.Notification, err)
	}
	show, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runNotifications(ctx, w, []string{"show", strconv.FormatInt(s[0].ID, 10), "--database-url", db.AppURL})
	})
	if err != nil || !strings.Contains(show, "held for quiet hours until 2030-03-02T10:00:00Z (asked for") {
		t.Errorf("notifications show of the held row: %v\n%s", err, show)
	}
	if out, err := run("set", "--tenant", "acme", "--kind", "digest", "--window", "daily 07:00-08:00",
		"--time-zone", "Europe/Berlin", "--reason", "r", "--operator", "alice"); err != nil {
		t.Fatalf("set a kind's: %v\n%s", err, out)
	}
	out, err := run("get", "--tenant", "acme")
	if err != nil || !strings.Contains(out, "kind:digest") || !strings.Contains(out, "daily 07:00-08:00") ||
		!strings.Contains(out, "Europe/Berlin") || !strings.Contains(out, "mon-fri 08:00-20:00, sat 10:00-12:00") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	if out, err := run("clear", "--tenant", "acme", "--reason", "ticket 91", "--operator", "alice"); err != nil ||
		!strings.Contains(out, "1 released") {
		t.Fatalf("clear: %v\n%s", err, out)
	}
	if d, err := l.Get(ctx, "acme", s[0].ID); err != nil || !d.DueAt.Equal(due) || d.HeldFrom != nil {
		t.Fatalf("the released row: %+v, %v; want back at the time asked", d.Notification, err)
	}
	if out, err := run("get", "--tenant", "acme", "--json"); err != nil || !strings.Contains(out, `"scope": "kind:digest"`) ||
		strings.Contains(out, `"scope": "tenant"`) {
		t.Fatalf("get --json after clear: %v\n%s", err, out)
	}
	got := auditActions(t, db)
	if len(got) != 3 || !strings.HasPrefix(got[0], "quiet_hours_set tenant=acme scope=tenant windows=") ||
		got[2] != "quiet_hours_clear tenant=acme scope=tenant ticket 91" {
		t.Errorf("audit trail %q", got)
	}
	var ue usageError
	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"set", "--tenant", "acme", "--reason", "r"}, "--window"},
		{[]string{"set", "--tenant", "acme", "--window", "weekdays 9-5", "--reason", "r"}, "--window[0]"},
		{[]string{"set", "--tenant", "acme", "--kind", "k", "--recipient", "r", "--window", "daily 08:00-20:00", "--reason", "r"}, "not both"},
		{[]string{"set", "--tenant", "acme", "--window", "daily 08:00-20:00"}, "--reason"},
		{[]string{"get"}, "--tenant"},
	} {
		if _, err := run(bad.args...); !errors.As(err, &ue) || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("quiet-hours %q: %v, want a usage error naming %s", bad.args, err, bad.says)
		}
	}
}
