package drill

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/provider/webhook"
	"github.com/owedhq/owed/internal/tenant"
	"github.com/owedhq/owed/internal/testdb"
)

// TestDuplicateRule is the per-row duplicate invariant on hand-built rows:
// a row received twice whose ledger shows no possible-duplicate attempt, or
// two accepts recorded as first sends, breaks it; a row whose first send
// left no attempt (its worker was killed after the accept) and whose
// resend is flagged does not.
func TestDuplicateRule(t *testing.T) {
	acc := func(n int, dup bool) ledger.Attempt {
		return ledger.Attempt{Attempt: n, Outcome: ledger.AttemptAccepted, PossibleDuplicate: dup}
	}
	transient := func(n int, dup bool) ledger.Attempt {
		return ledger.Attempt{Attempt: n, Outcome: ledger.AttemptTransient, HTTPStatus: 503, PossibleDuplicate: dup}
	}
	for _, tc := range []struct {
		name     string
		receipts int
		attempts []ledger.Attempt
		want     string // a substring of breaks(), "" when the row holds
	}{
		{"one unflagged accept, received twice (the issue's invisible duplicate)", 2, []ledger.Attempt{acc(1, false)}, "no attempt recorded"},
		{"nothing recorded, received twice", 2, nil, "no attempt recorded"},
		{"first send unrecorded, the resend flagged", 2, []ledger.Attempt{acc(1, true)}, ""},
		{"a first send and a flagged resend, both recorded", 2, []ledger.Attempt{acc(1, false), acc(2, true)}, ""},
		{"a flagged 503, then a resend whose mark was dropped", 3, []ledger.Attempt{acc(1, false), transient(2, true), acc(3, false)}, "2 accepted attempts recorded as first sends"},
		{"two kills after the accept, one flagged resend recorded", 3, []ledger.Attempt{acc(1, true)}, ""},
		{"a flagged failure only, received twice", 2, []ledger.Attempt{transient(1, true)}, ""},
	} {
		got := dupRow{id: 1, state: "delivered", receipts: tc.receipts, attempts: tc.attempts}.breaks()
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: breaks() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDuplicateCheckOverALedgerAndTheSandboxLog runs the drill's duplicate
// check over a real ledger and a real sandbox's log: a row the sandbox
// accepted twice whose only attempt is an unflagged accept fails it and is
// listed with its attempts; a row whose resend was flagged, and a row sent
// once, pass.
func TestDuplicateCheckOverALedgerAndTheSandboxLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	due := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	var in []ledger.NewNotification
	for i := range 3 {
		in = append(in, ledger.NewNotification{Recipient: fmt.Sprintf("d-%d@example.com", i), Channel: "email", Kind: workloadKind,
			RefID: fmt.Sprintf("D-%d", i), DueAt: due, Payload: json.RawMessage(`{"subject":"s","text":"t"}`)})
	}
	sched, err := l.Schedule(ctx, devstack.Tenant, in)
	if err != nil {
		t.Fatal(err)
	}
	unrecorded, flagged, once := sched[0].ID, sched[1].ID, sched[2].ID
	// The attempts as a worker records them: unrecorded's one accept is a
	// first send (its other send's record was lost); flagged's first send
	// left no attempt and its resend is flagged.
	addAttempts(t, db.App, unrecorded, false)
	addAttempts(t, db.App, flagged, true)
	addAttempts(t, db.App, once, false)

	logPath := filepath.Join(t.TempDir(), "sandbox.log")
	sendThroughSandbox(t, logPath, map[int64]int{unrecorded: 2, flagged: 2, once: 1})

	receipts, err := readReceipts(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(receipts[unrecorded]) != 2 || len(receipts[flagged]) != 2 || len(receipts[once]) != 1 {
		t.Fatalf("receipts per row = %d, %d, %d; want 2, 2, 1", len(receipts[unrecorded]), len(receipts[flagged]), len(receipts[once]))
	}
	dups, err := checkDuplicates(ctx, l.Reads, receipts)
	if err != nil {
		t.Fatal(err)
	}
	if dups.sends != 2 || len(dups.rows) != 2 {
		t.Errorf("duplicate sends %d over %d rows, want 2 over 2", dups.sends, len(dups.rows))
	}
	if got := dupIDs(dups.unrecorded); len(got) != 1 || got[0] != unrecorded {
		t.Fatalf("rows breaking the invariant = %v, want [%d]", got, unrecorded)
	}
	v := dups.violation()
	for _, want := range []string{fmt.Sprintf("row %d (pending, received 2×; no attempt recorded as a possible duplicate): #1 accepted", unrecorded), "first send"} {
		if !strings.Contains(v, want) {
			t.Errorf("violation %q does not contain %q", v, want)
		}
	}
	if strings.Contains(v, fmt.Sprintf("row %d ", flagged)) {
		t.Errorf("violation %q lists row %d, whose resend was flagged", v, flagged)
	}
}

// addAttempts records one accepted attempt of row id, flagged or not, as
// the worker's settle does.
func addAttempts(t *testing.T, db *sql.DB, id int64, possibleDup bool) {
	t.Helper()
	err := tenant.InTx(context.Background(), db, devstack.Tenant, func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO owed_notification_attempts (notification_id, tenant_id, attempt, provider, started_at, finished_at,
                                                 outcome, possible_duplicate)
VALUES ($1, $2, 1, 'sandbox', now(), now(), 'accepted', $3)`, id, devstack.Tenant, possibleDup)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sendThroughSandbox sends each row the given number of times, with one
// idempotency key per row, through a sandbox logging to logPath.
func sendThroughSandbox(t *testing.T, logPath string, sends map[int64]int) {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const secret = "whsec_c2lnbmluZy1rZXktb2YtdGhlLWRyaWxsLXRlc3Qh" // 30 bytes: the webhook adapter wants ≥ 24
	srv, err := sandbox.New(sandbox.Config{Secret: secret, Burst: 100, Log: zerolog.New(f).With().Timestamp().Logger()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	sender, err := webhook.New(webhook.Config{URL: hs.URL, Secret: secret, Name: "sandbox", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range sends {
		for range n {
			_, err := sender.Send(context.Background(), provider.Delivery{Tenant: devstack.Tenant, NotificationID: id,
				Recipient: "d@example.com", Channel: payload.ChannelEmail, Kind: workloadKind,
				IdempotencyKey: fmt.Sprintf("drill-%d", id), Content: payload.Content{Subject: "s", Text: "t"}})
			if err != nil {
				t.Fatalf("send row %d: %v", id, err)
			}
		}
	}
}
