package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/testdb"
)

// archive write refuses a range with an owed row and writes a settled one;
// restore reads it back (nothing new, the rows being there).
func TestArchiveWriteAndRestore(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	l := ledger.New(db.App, nil)
	s, err := l.Schedule(context.Background(), "acme", []ledger.NewNotification{{Recipient: "r", Channel: "sms",
		Kind: "k", RefID: "R-1", DueAt: time.Now().Add(time.Hour), Payload: []byte(`{"text": "hi"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runArchive(ctx, w, append(args, "--database-url", db.OwnerURL))
		})
	}
	dir := filepath.Join(t.TempDir(), "a")
	// The row's id is of this month's range (owed_ledger_partitions_ensure).
	from, to := strconv.FormatInt(s[0].ID, 10), strconv.FormatInt(s[0].ID+1000, 10)
	if _, err := run("write", "--from-id", from, "--to-id", to, "--out", dir); err == nil ||
		!strings.Contains(err.Error(), "not settled") {
		t.Fatalf("write over an owed row: %v", err)
	}
	if _, err := l.Cancel(context.Background(), "acme", "k", "R-1"); err != nil {
		t.Fatal(err)
	}
	out, err := run("write", "--from-id", from, "--to-id", to, "--out", filepath.Join(t.TempDir(), "b"))
	if err != nil || !strings.Contains(out, "owed_notifications.jsonl.gz") || !strings.Contains(out, ": 1 rows") {
		t.Fatalf("write: %v\n%s", err, out)
	}
	var usage usageError
	if _, err := run("write", "--from-id", "5", "--to-id", "5", "--out", dir); !errors.As(err, &usage) {
		t.Errorf("an empty range: %v, want a usage error", err)
	}
}
