package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/ops"
)

// The stats tests set OWED_QUEUE_URL with t.Setenv, so they do not run in
// parallel with each other.

func TestStatsWithoutAQueueReportsTheLedgerAndSaysWhyDeadLettersAreUnknown(t *testing.T) {
	t.Setenv("OWED_QUEUE_URL", "")
	f := setupLookup(t)
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runStats(ctx, w, []string{"--since", "1h", "--database-url", f.dbURL})
	})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	for _, want := range []string{"delivered 1", "p95", "0 rows accepted more than once", "dead letters:",
		"unknown (the queue is not configured", "provider-limited minutes:  0 of 60",
		"owed backlog:", "pending 2", "oldest owed age:"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out)
		}
	}
}

func TestStatsJSON(t *testing.T) {
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:1")
	t.Setenv("OWED_QUEUE_TOKEN", "test-token-not-printed")
	f := setupLookup(t)
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runStats(ctx, w, []string{"--json", "--database-url", f.dbURL})
	})
	if err != nil {
		t.Fatalf("stats --json: %v", err)
	}
	var h ops.Health
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("stats --json is not JSON: %v\n%s", err, out)
	}
	if h.Delivery.Delivered != 1 || h.Backlog.Owed != 2 || h.DeadLetterDepth != nil || h.DeadLetterUnknown == "" {
		t.Errorf("stats --json: %+v", h)
	}
	if strings.Contains(out, "test-token-not-printed") {
		t.Errorf("stats printed the queue token:\n%s", out)
	}
}
