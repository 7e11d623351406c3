package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/sqs"
)

const provisionExample = "OWED_QUEUE_BACKEND=jetstream OWED_NATS_URL=nats://127.0.0.1:4222 owedctl queue provision --replicas 1"

// queueProvision is `owedctl queue provision`: it creates what the
// configured backend needs, or updates it to the settings docs/queues.md
// lists, through the backend's own provisioning (jetstream.Config's
// Provision, sqs.Provision), so the settings have one owner. Idempotent:
// run it at every install and upgrade. The REST queue needs nothing.
func queueProvision(ctx context.Context, args []string) error {
	return runQueueProvision(ctx, os.Stdout, args)
}

// runQueueProvision is queueProvision writing to out.
func runQueueProvision(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("queue provision", "queue provision [--replicas N] [--dry-run]", provisionExample)
	replicas := fs.Int("replicas", 1, "jetstream: the streams' replicas; 1 on a single server, 3 on a cluster (deploy/nats)")
	dryRun := fs.Bool("dry-run", false, "print the settings, change nothing")
	if err := parseOnlyFlags(fs, args, ""); err != nil {
		return err
	}
	if *replicas < 1 || *replicas > 5 {
		return usageError{fmt.Sprintf("--replicas=%d: JetStream takes 1 to 5", *replicas)}
	}
	cfg, err := backends.LoadConfig()
	if err != nil {
		return usageError{err.Error()}
	}
	if cfg.Backend == backends.SQS && *dryRun {
		// The URLs name the queues; nothing is dialled.
		if err := cfg.SQS.Validate(); err != nil {
			return usageError{err.Error()}
		}
	} else if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	switch cfg.Backend {
	case backends.JetStream:
		js := cfg.JetStream
		js.Replicas, js.Provision = *replicas, true
		if *dryRun {
			return printJSON(out, map[string]any{"streams": []any{js.StreamConfig(), js.DeadLetterStreamConfig()},
				"consumer": js.ConsumerConfig()})
		}
		q, err := jetstream.New(ctx, js)
		if err != nil {
			return err
		}
		defer q.Close()
		fmt.Fprintf(out, "jetstream: streams %s and %s and consumer %s are as docs/queues.md lists (replicas %d)\n",
			js.Stream, js.DeadLetterStream, js.Consumer, js.Replicas)
	case backends.SQS:
		if *dryRun {
			main, dead := sqs.Settings("<the ARN of " + cfg.SQS.DeadLetterQueueURL + ">")
			return printJSON(out, map[string]any{cfg.SQS.QueueURL: main, cfg.SQS.DeadLetterQueueURL: dead})
		}
		got, err := sqs.Provision(ctx, cfg.SQS)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "sqs: queues %s and %s are as docs/queues.md lists\n", got.QueueURL, got.DeadLetterQueueURL)
		if got.QueueURL != cfg.SQS.QueueURL || got.DeadLetterQueueURL != cfg.SQS.DeadLetterQueueURL {
			fmt.Fprintf(out, "note: the server names them by these URLs; set OWED_SQS_QUEUE_URL and OWED_SQS_DEAD_LETTER_QUEUE_URL to them\n")
		}
	default:
		fmt.Fprintf(out, "%s: nothing to provision: the queue service creates a queue when it is first used\n", cfg.Backend)
	}
	return nil
}
