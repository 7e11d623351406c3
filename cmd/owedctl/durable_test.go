package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/testdb"
)

// A command that writes refuses a database whose commits a crash can lose,
// as the services do, unless OWED_ALLOW_ASYNC_COMMIT=true; a read does not
// ask.
func TestWritesRefuseAsyncCommit(t *testing.T) {
	db := testdb.New(t)
	if _, err := db.Owner.Exec("ALTER DATABASE " + pq.QuoteIdentifier(db.Name) + " SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
			return runTenants(ctx, w, append(args, "--database-url", db.OperatorURL))
		})
	}
	if out, err := run("list"); err != nil {
		t.Fatalf("list on synchronous_commit = off: %v\n%s", err, out)
	}
	_, err := run("pause", "--tenant", "acme", "--reason", "incident")
	var refused *service.AsyncCommitError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "synchronous_commit is off") {
		t.Fatalf("pause on synchronous_commit = off: %v, want a refusal naming synchronous_commit", err)
	}
	t.Setenv(service.AsyncCommitVariable, "true")
	if out, err := run("pause", "--tenant", "acme", "--reason", "incident"); err != nil || !strings.Contains(out, "tenant acme paused") {
		t.Fatalf("pause with %s=true: %v\n%s", service.AsyncCommitVariable, err, out)
	}
}
