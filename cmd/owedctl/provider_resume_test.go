package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/testdb"
)

// provider resume closes a paused account's circuit as on-call's login,
// says what it resumed, and says so when there was nothing to resume.
func TestProviderResumeClosesTheCircuit(t *testing.T) {
	db := testdb.New(t)
	accounts := pace.NewAccounts(db.App, nil)
	if err := accounts.Trip(context.Background(), "twilio", time.Hour, "20003", "Authenticate"); err != nil {
		t.Fatal(err)
	}
	args := []string{"--account", "twilio", "--database-url", db.OperatorURL}
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error { return runProviderResume(ctx, w, args) })
	if err != nil || !strings.Contains(out, "provider account twilio resumed") || !strings.Contains(out, "20003") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	if st, err := accounts.State(context.Background(), "twilio"); err != nil || st.Open() || st.Wait != 0 {
		t.Fatalf("after the resume: %+v, %v; want closed and unpaused", st, err)
	}
	out, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error { return runProviderResume(ctx, w, args) })
	if err != nil || !strings.Contains(out, "was not paused") {
		t.Fatalf("second resume: %v\n%s", err, out)
	}
	_, err = runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runProviderResume(ctx, w, []string{"--database-url", db.AppURL})
	})
	var usage usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "--account") {
		t.Fatalf("resume without --account: %v, want a usage error naming --account", err)
	}
}
