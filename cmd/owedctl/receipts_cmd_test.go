package main

import (
	"bytes"
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/ledger"
)

// bounceDelivered records a provider's bounce of the fixture's delivered
// row, as the sweeper's receipt endpoints do.
func bounceDelivered(t *testing.T, f lookupFixture) {
	t.Helper()
	db, err := sql.Open("postgres", f.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := ledger.New(db, nil).RecordReceipt(context.Background(), ledger.Receipt{Provider: "sandbox",
		ProviderMessageID: "sbx-msg-77", Status: ledger.ReceiptBounced, Code: "550 5.1.1"})
	if err != nil || !res.Recorded {
		t.Fatalf("record the bounce: %+v %v", res, err)
	}
}

// A bounce after "accepted" shows in show (the row stays delivered) and in
// stats, which separates accepted from confirmed delivered.
func TestShowAndStatsShowABounceAfterAccepted(t *testing.T) {
	t.Setenv("OWED_QUEUE_URL", "")
	f := setupLookup(t)
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runNotifications(ctx, w, []string{"show", strconv.FormatInt(f.delivered, 10), "--database-url", f.dbURL})
	})
	if err != nil || !strings.Contains(out, "no receipts from the provider") {
		t.Errorf("show before any receipt: %v\n%s", err, out)
	}
	bounceDelivered(t, f)
	out, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runNotifications(ctx, w, []string{"show", strconv.FormatInt(f.delivered, 10), "--database-url", f.dbURL})
	})
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	for _, want := range []string{"state:", "delivered", "receipt:", "bounced (550 5.1.1) at ", "RECEIPT", "sbx-msg-77"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runStats(ctx, w, []string{"--since", "1h", "--database-url", f.dbURL})
	})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if want := "accepted 1: confirmed delivered 0, bounced 1, failed 0, unconfirmed 0"; !strings.Contains(out, want) {
		t.Errorf("stats output lacks %q:\n%s", want, out)
	}
}
