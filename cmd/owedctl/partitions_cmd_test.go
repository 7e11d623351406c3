package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/testdb"
)

// partitions ensure creates the months ahead that are missing, once, and
// list shows them beside the legacy partition; neither runs as the app.
func TestPartitionsEnsureAndList(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	now := time.Now().UTC()
	run := func(url string, args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runPartitions(ctx, w, append(args, "--database-url", url), now)
		})
	}
	in3 := "owed_notifications_" + time.Date(now.Year(), now.Month()+3, 1, 0, 0, 0, 0, time.UTC).Format("y2006m01")
	out, err := run(db.OwnerURL, "ensure", "--ahead", "3")
	if err != nil || !strings.Contains(out, in3+" ") || !strings.Contains(out, "created") ||
		!strings.Contains(out, "there already") {
		t.Fatalf("ensure --ahead 3: %v\n%s", err, out)
	}
	if out, err := run(db.OwnerURL, "ensure", "--ahead", "3"); err != nil || strings.Contains(out, "created") {
		t.Fatalf("ensure again: %v\n%s, want nothing created", err, out)
	}
	out, err = run(db.OwnerURL, "list")
	if err != nil || !strings.Contains(out, "owed_notifications_legacy") || !strings.Contains(out, in3) {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if _, err := run(db.AppURL, "ensure"); err == nil {
		t.Errorf("ensure as the app role succeeded, want refused")
	}
	var usage usageError
	if _, err := run(db.OwnerURL, "ensure", "--ahead", "25"); !errors.As(err, &usage) ||
		!strings.Contains(err.Error(), "--ahead 25") {
		t.Errorf("ensure --ahead 25: %v, want a usage error naming it", err)
	}
}
