package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// recipients list prints a tenant's marks as the runtime role and clear
// makes an address sendable again; another tenant's marks stay apart.
func TestRecipientsListAndClear(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	for _, tn := range []string{"acme", "globex"} {
		if err := l.MarkUndeliverable(context.Background(), ledger.Undeliverable{Tenant: tn, Channel: "sms",
			Address: "+15550100", Provider: "twilio", Code: "21610", Reason: "unsubscribed"}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runRecipients(ctx, w, append(args, "--database-url", db.AppURL))
		})
	}
	out, err := run("list", "--tenant", "acme")
	if err != nil || !strings.Contains(out, "+15550100") || !strings.Contains(out, "21610") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, err = run("clear", "--tenant", "acme", "--channel", "sms", "--address", "+15550100")
	if err != nil || !strings.Contains(out, "sendable again") {
		t.Fatalf("clear: %v\n%s", err, out)
	}
	if _, ok, err := l.LookupUndeliverable(context.Background(), "acme", "sms", "+15550100"); err != nil || ok {
		t.Errorf("acme's mark after the clear: %v, %v", ok, err)
	}
	if _, ok, _ := l.LookupUndeliverable(context.Background(), "globex", "sms", "+15550100"); !ok {
		t.Error("clearing acme's mark cleared globex's")
	}
	out, err = run("list", "--tenant", "acme", "--channel", "sms")
	if err != nil || !strings.Contains(out, "no undeliverable recipients") {
		t.Errorf("list after the clear: %v\n%s", err, out)
	}
	out, err = run("clear", "--tenant", "acme", "--channel", "sms", "--address", "+15550100")
	if err != nil || !strings.Contains(out, "nothing changed") {
		t.Errorf("second clear: %v\n%s", err, out)
	}
	var usage usageError
	if _, err := run("clear", "--tenant", "acme"); !errors.As(err, &usage) {
		t.Errorf("clear without --channel and --address: %v, want a usage error", err)
	}
}
