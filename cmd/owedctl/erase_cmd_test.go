package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// erase tombstones the recipient's rows as the runtime role, records who
// asked, and refuses a request without a reason.
func TestErase(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	due := time.Now().Add(time.Hour)
	got, err := l.Schedule(context.Background(), "acme", []ledger.NewNotification{{Recipient: "user-42", Channel: "sms",
		Kind: "k", RefID: "R-1", DueAt: due, Payload: []byte(`{"text": "secret"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runErase(ctx, w, append(args, "--database-url", db.AppURL))
		})
	}
	var usage usageError
	if _, err := run("--tenant", "acme", "--recipient", "user-42"); !errors.As(err, &usage) ||
		!strings.Contains(err.Error(), "--reason") {
		t.Errorf("without --reason: %v, want a usage error naming --reason", err)
	}
	out, err := run("--tenant", "acme", "--recipient", "user-42", "--reason", "ticket 7", "--actor", "dana")
	if err != nil || !strings.Contains(out, "1 rows are tombstones (1 cancelled)") {
		t.Fatalf("erase: %v\n%s", err, out)
	}
	d, err := l.Get(context.Background(), "acme", got[0].ID)
	if err != nil || !strings.HasPrefix(d.Recipient, ledger.ErasePrefix) ||
		d.State != ledger.StateCancelled || string(d.Payload) != "{}" {
		t.Errorf("the row after erase: %+v (%v)", d.Notification, err)
	}
	var by string
	if err := db.Owner.QueryRow(`SELECT requested_by FROM owed_erasures WHERE tenant_id = 'acme'`).Scan(&by); err != nil ||
		by != "owedctl:dana" {
		t.Errorf("owed_erasures.requested_by %q (%v), want owedctl:dana", by, err)
	}
}
