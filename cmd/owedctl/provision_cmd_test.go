package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/jetstream/jsserver"
)

// queue provision on a single JetStream server (the issue's: the services
// refused to start until the streams existed, and deploy/nats asked for 3
// replicas, which a single server refuses): --dry-run prints the settings
// and creates nothing, provision creates the streams and the consumer a
// service then opens without provisioning, and a second run changes
// nothing. --replicas 3 is refused by the single server, with its reason.
func TestQueueProvisionOnASingleJetStreamServer(t *testing.T) {
	srv, err := jsserver.Start(jsserver.Config{Addr: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	t.Setenv("OWED_QUEUE_BACKEND", "jetstream")
	t.Setenv("OWED_NATS_URL", srv.ClientURL())
	provision := func(args ...string) (string, error) {
		return runCmd(t, func(ctx context.Context, w *bytes.Buffer) error { return runQueueProvision(ctx, w, args) })
	}
	ctx := context.Background()
	open := func() error {
		q, err := jetstream.New(ctx, jetstream.Config{URL: srv.ClientURL()})
		if err == nil {
			q.Close()
		}
		return err
	}

	out, err := provision("--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	var plan struct {
		Streams  []map[string]any `json:"streams"`
		Consumer map[string]any   `json:"consumer"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Streams) != 2 || plan.Streams[0]["num_replicas"] != 1.0 ||
		plan.Streams[0]["name"] != jetstream.DefaultStream || plan.Consumer["durable_name"] != jetstream.DefaultConsumer {
		t.Fatalf("--dry-run printed %s (%v), want both streams with 1 replica and the consumer", out, err)
	}
	if err := open(); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("after --dry-run a service opens the queue: %v, want the streams still missing", err)
	}

	for run := 1; run <= 2; run++ {
		if out, err := provision(); err != nil || !strings.Contains(out, "replicas 1") {
			t.Fatalf("provision, run %d: %q, %v", run, out, err)
		}
		if err := open(); err != nil {
			t.Fatalf("after provision run %d a service cannot open the queue: %v", run, err)
		}
	}
	if _, err := provision("--replicas", "3"); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("provision --replicas 3 on one server: %v, want the server's refusal", err)
	}
	var ue usageError
	if _, err := provision("--replicas", "0"); err == nil || !strings.Contains(err.Error(), "--replicas") {
		t.Errorf("provision --replicas 0: %v, want a usage error", err)
	} else if !errors.As(err, &ue) {
		t.Errorf("provision --replicas 0: %T, want a usage error", err)
	}
}

// On SQS, --dry-run prints the attributes of both queues without dialling
// the server (sqs.Provision's own test runs against the local SQS server).
func TestQueueProvisionDryRunOnSQS(t *testing.T) {
	t.Setenv("OWED_QUEUE_BACKEND", "sqs")
	t.Setenv("OWED_SQS_QUEUE_URL", "http://127.0.0.1:1/000000000000/owed")
	t.Setenv("OWED_SQS_DEAD_LETTER_QUEUE_URL", "http://127.0.0.1:1/000000000000/owed-dead-letters")
	out, err := runCmd(t, func(ctx context.Context, w *bytes.Buffer) error {
		return runQueueProvision(ctx, w, []string{"--dry-run"})
	})
	if err != nil || !strings.Contains(out, `"VisibilityTimeout": "30"`) || !strings.Contains(out, "maxReceiveCount") ||
		!strings.Contains(out, `"MessageRetentionPeriod": "1209600"`) {
		t.Fatalf("queue provision --dry-run on sqs = %s, %v", out, err)
	}
}
