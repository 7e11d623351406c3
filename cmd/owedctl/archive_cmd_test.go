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
// restore reads it back (nothing new, the rows being there) and is a line
// on the operators' audit trail, naming who, the range and the rows.
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
	b := filepath.Join(t.TempDir(), "b")
	out, err := run("write", "--from-id", from, "--to-id", to, "--out", b)
	if err != nil || !strings.Contains(out, "owed_notifications.jsonl.gz") || !strings.Contains(out, ": 1 rows") {
		t.Fatalf("write: %v\n%s", err, out)
	}
	var usage usageError
	if _, err := run("restore", "--dir", b); !errors.As(err, &usage) || !strings.Contains(err.Error(), "--reason") {
		t.Errorf("a restore without --reason: %v, want a usage error naming it", err)
	}
	out, err = run("restore", "--dir", b, "--operator", "bob", "--reason", "INC-9")
	if err != nil || !strings.Contains(out, "0 rows restored") {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	var line string
	if err := db.Owner.QueryRow(`SELECT operator || ' ' || target || ' ' || count || ' ' || reason
	    FROM owed_operator_audit WHERE action = 'archive_restore'`).Scan(&line); err != nil ||
		!strings.HasPrefix(line, "bob ids ["+from+", "+to+") from "+b) || !strings.HasSuffix(line, " 0 INC-9") {
		t.Errorf("the restore's audit line: %q (%v)", line, err)
	}
	if _, err := run("write", "--from-id", "5", "--to-id", "5", "--out", dir); !errors.As(err, &usage) {
		t.Errorf("an empty range: %v, want a usage error", err)
	}
}
