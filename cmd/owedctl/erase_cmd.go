package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

const eraseExample = `owedctl erase --tenant acme --recipient user-42 --reason "GDPR request 2026-118"`

// eraseCmd forgets one recipient of a tenant (ledger.Erase): her name,
// addresses and payloads leave every table that holds them, the delivery
// facts stay as tombstones, and owed_erasures records who asked. It
// connects as the runtime role and works in the tenant's scope.
func eraseCmd(ctx context.Context, args []string) error {
	return runErase(ctx, os.Stdout, args)
}

// runErase is eraseCmd writing to out.
func runErase(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("erase", "erase --tenant T --recipient R [--channel C] --reason TEXT [--actor NAME] [--json] [--queue NAME] [--database-url URL]",
		eraseExample)
	tenantID := fs.String("tenant", "", "the tenant")
	recipient := fs.String("recipient", "", "the recipient, as the tenant schedules for it (not a resolved address)")
	channel := fs.String("channel", "", "only this channel (sms, email, telegram, slack, webhook); every channel when empty")
	reason := fs.String("reason", "", "why (the request's reference), recorded in owed_erasures")
	actor := fs.String("actor", "", "who asks, as owed_erasures records it (default the OS user)")
	qf := addQueueFlags(fs)
	asJSON := qf.json
	dbURL := ledgerDatabaseFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	case *tenantID == "" || *recipient == "":
		return usageError{"give --tenant and --recipient"}
	case *reason == "":
		return usageError{"--reason: say why (the request's reference); owed_erasures records it"}
	}
	who, err := osUserOr(*actor, "--actor")
	if err != nil {
		return err
	}
	if err := checkWrites(ctx, *dbURL); err != nil {
		return err
	}
	l, done, err := openLedger(*dbURL)
	if err != nil {
		return err
	}
	defer done()
	e, err := l.Erase(ctx, ledger.EraseRequest{Tenant: *tenantID, Recipient: *recipient, Channel: *channel,
		RequestedBy: "owedctl:" + who, Reason: *reason})
	if err != nil {
		return err
	}
	// A dead letter's reason is the failure's text, which a provider's
	// message may fill with the address: the erased rows' dead letters go
	// too, when a queue is configured. The ledger's erasure stands either
	// way; a queue that cannot be reached is reported, not fatal to it.
	dead, deadErr := eraseDeadLetters(ctx, qf, l, *tenantID, e.Rows)
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			ledger.Erasure
			DeadLetters int `json:"dead_letters"`
		}{e, dead}); err != nil {
			return err
		}
		return deadErr
	}
	fmt.Fprintf(out, "erasure %d: %d rows are tombstones (%d cancelled), %d attempts' errors, %d contacts, "+
		"%d undeliverable marks, %d items, %d shared payloads erased\n", e.ID, len(e.Rows), e.Cancelled, e.Attempts,
		e.Contacts, e.Undeliverable, e.Items, e.SharedPayloads)
	if dead > 0 {
		fmt.Fprintf(out, "%d dead letters of the erased rows deleted from the queue\n", dead)
	}
	if e.InFlight > 0 {
		fmt.Fprintf(out, "%d rows are being sent right now and were left as they are: run the same erase again "+
			"once they settle (a minute at most)\n", e.InFlight)
	}
	return deadErr
}

// eraseDeadLetters deletes the queue's dead letters whose envelope names
// one of rows of tenant, when a queue is configured (OWED_QUEUE_URL or
// OWED_QUEUE_BACKEND), and returns how many it deleted.
func eraseDeadLetters(ctx context.Context, qf queueFlags, l ledger.HasReads, tenant string, rows []int64) (int, error) {
	if len(rows) == 0 || (os.Getenv("OWED_QUEUE_URL") == "" && os.Getenv("OWED_QUEUE_BACKEND") == "") {
		return 0, nil
	}
	q, _, err := qf.open(ctx)
	if err != nil {
		return 0, fmt.Errorf("the ledger is erased; the queue's dead letters were not: %w", err)
	}
	defer q.Close()
	found, err := ops.FindDeadLetters(ctx, q, l, ops.DeadLetterFilter{Tenant: tenant}, time.Now())
	if err != nil {
		return 0, fmt.Errorf("the ledger is erased; the queue's dead letters were not: %w", err)
	}
	var ids []string
	for _, d := range found {
		if d.Row != nil && slices.Contains(rows, d.Row.ID) {
			ids = append(ids, strings.TrimPrefix(d.ID, ops.DeadLetterIDPrefix))
		}
	}
	// The erasure's own record (owed_erasures) accounts for these deletes:
	// they are part of it, not an operator's dlq delete.
	n, err := q.DeleteDeadLetters(ctx, ids...)
	if err != nil {
		return n, fmt.Errorf("the ledger is erased; deleting its dead letters: %w", err)
	}
	return n, nil
}
