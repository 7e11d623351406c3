package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/sqs"
)

// The local SQS server and the queues the stack creates on it.
const (
	// sqsServerCommand is what scripts/install-sqs.sh puts on PATH.
	sqsServerCommand = "owed-sqs-server"
	// sqsQueueName names the main queue; sqs.CreateQueues adds the
	// dead-letter queue beside it.
	sqsQueueName = "owed"
	// sqsRegion and sqsCredential are placeholders: the local server checks
	// neither, but the SDK's default chain wants both.
	sqsRegion     = "us-east-1"
	sqsCredential = "test"
	// queueProvisionTimeout bounds creating the streams or the queues.
	queueProvisionTimeout = 30 * time.Second
)

// QueueInMemory reports whether backend q's local server keeps its messages
// only in memory, so a kill -9 loses every message and dead letter it held:
// the local SQS server does (real SQS does not).
func QueueInMemory(q string) bool { return q == backends.SQS }

// CheckQueue names the accepted backends when q is not one. The stack runs
// every backend OWED_QUEUE_BACKEND names (backends.Names): rest is owed's
// REST queue, served by the emulator (owedctl queue serve) on the stack's
// PostgreSQL; jetstream a NATS server with JetStream (owedctl queue
// serve-jetstream), its file store in Dir/nats; sqs the local
// SQS-compatible server scripts/install-sqs.sh installs (owed-sqs-server),
// which keeps its messages in memory. `make run` runs backends.Default.
func CheckQueue(q string) error {
	if !slices.Contains(backends.Names, q) {
		return fmt.Errorf("--queue %q: want one of %s", q, strings.Join(backends.Names, ", "))
	}
	return nil
}

// FindSQSServer finds the local SQS server, or says how to install it.
func FindSQSServer() (string, error) {
	path, err := exec.LookPath(sqsServerCommand)
	if err != nil {
		return "", fmt.Errorf("--queue sqs: %s is not on PATH: run scripts/install-sqs.sh (it installs local-aws-sqs, a local SQS-compatible server, from the npm registry)", sqsServerCommand)
	}
	return path, nil
}

func (s *Stack) natsURL() string   { return "nats://" + addr(s.cfg.QueuePort) }
func (s *Stack) natsStore() string { return filepath.Join(s.cfg.Dir, "nats") }

// queueSpec is how the queue server is started: the emulator, the JetStream
// server or the local SQS server, always as the child named "queue" on
// --queue-port, so a drill kills -9 whichever runs.
func (s *Stack) queueSpec(b binaries, dbURL string) (launch.Spec, error) {
	port := s.cfg.QueuePort
	switch s.cfg.Queue {
	case backends.JetStream:
		spec := s.childSpec("queue", b.owedctl, []string{"queue", "serve-jetstream", "--addr", addr(port), "--store", s.natsStore()}, port)
		spec.Ready = natsReady(s.natsURL())
		return spec, nil
	case backends.SQS:
		path, err := FindSQSServer()
		if err != nil {
			return launch.Spec{}, err
		}
		spec := s.childSpec("queue", path, []string{"--host", "127.0.0.1", "--port", fmt.Sprint(port)}, port)
		spec.Ready = tcpReady(addr(port))
		return spec, nil
	}
	return s.childSpec("queue", b.owedctl, []string{"queue", "serve"}, port, s.roleVars(), s.cfg.Tuning.QueueEnv, map[string]string{
		"OWED_QUEUE_ADDR": addr(port), "OWED_QUEUE_TOKEN": s.ep.QueueToken, "OWED_QUEUE_FAULT_TOKEN": s.ep.QueueFaultToken,
		"OWED_QUEUE_DATABASE_URL": dbURL}), nil
}

// openQueue provisions the started queue server (the JetStream streams and
// consumer, or the SQS queues), opens the stack's own client of it, and
// returns the settings every sweeper and worker gets: the variables
// backends.LoadConfig reads into what the stack opened.
func (s *Stack) openQueue(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, queueProvisionTimeout)
	defer cancel()
	cfg := backends.Config{Backend: s.cfg.Queue}
	vars := map[string]string{"OWED_QUEUE_BACKEND": s.cfg.Queue}
	switch s.cfg.Queue {
	case backends.JetStream:
		// Provision creates the streams and the consumer with
		// docs/queues.md's settings (stream OWED, consumer owed-workers,
		// ack wait 30 s), which the services' defaults name too.
		cfg.JetStream = jetstream.Config{URL: s.natsURL(), Provision: true}
		vars["OWED_NATS_URL"] = s.natsURL()
	case backends.SQS:
		var err error
		if cfg.SQS, err = s.createSQSQueues(ctx); err != nil {
			return nil, err
		}
		maps.Copy(vars, map[string]string{"OWED_SQS_QUEUE_URL": cfg.SQS.QueueURL,
			"OWED_SQS_DEAD_LETTER_QUEUE_URL": cfg.SQS.DeadLetterQueueURL, "OWED_SQS_ENDPOINT": cfg.SQS.Endpoint,
			"OWED_SQS_REGION": sqsRegion,
			// The SDK's own variables: its default chain finds the
			// placeholder credentials there. An empty session token keeps
			// a real one of the user's away from the local server.
			"AWS_REGION": sqsRegion, "AWS_ACCESS_KEY_ID": sqsCredential, "AWS_SECRET_ACCESS_KEY": sqsCredential,
			"AWS_SESSION_TOKEN": ""})
	default:
		cfg.Rest = rest.Config{URL: s.ep.QueueURL, Token: s.ep.QueueToken, Name: rest.DefaultQueueName}
		maps.Copy(vars, map[string]string{"OWED_QUEUE_URL": s.ep.QueueURL, "OWED_QUEUE_TOKEN": s.ep.QueueToken})
	}
	q, err := backends.Open(ctx, cfg, zerolog.Nop())
	if err != nil {
		return nil, fmt.Errorf("open the %s queue: %w", s.cfg.Queue, err)
	}
	s.queue = q
	return vars, nil
}

// createSQSQueues creates the main and dead-letter queues with
// docs/queues.md's settings, or finds them. The local server keeps nothing
// across a restart, so a restarted one needs them again.
func (s *Stack) createSQSQueues(ctx context.Context) (sqs.Config, error) {
	cfg, err := sqs.CreateQueues(ctx, sqs.Config{Endpoint: s.ep.QueueURL, Region: sqsRegion,
		Credentials: credentials.NewStaticCredentialsProvider(sqsCredential, sqsCredential, "")}, sqsQueueName)
	if err != nil {
		return cfg, fmt.Errorf("create the SQS queues: %w", err)
	}
	return cfg, nil
}

// queueRestarted brings a queue server that was just started again back to
// what the running services expect: the emulator gets the drill's faults
// back (it starts with none) and the local SQS server its queues (it starts
// empty: every message it held is lost, and the ledger republishes those
// rows once their leases run out). JetStream recovers its streams from its
// file store by itself.
func (s *Stack) queueRestarted(ctx context.Context) error {
	switch s.cfg.Queue {
	case backends.SQS:
		ctx, cancel := context.WithTimeout(ctx, queueProvisionTimeout)
		defer cancel()
		_, err := s.createSQSQueues(ctx)
		return err
	case backends.REST:
		s.queueFaultsMu.Lock()
		f := s.queueFaults
		s.queueFaultsMu.Unlock()
		if f != nil {
			return s.SetQueueFaults(ctx, *f)
		}
	}
	return nil
}

// DeadLetteredRows returns the ledger ids of every dead letter in the
// queue, read from the envelopes the sweeper published.
func (s *Stack) DeadLetteredRows(ctx context.Context) (map[int64]bool, error) {
	ids := map[int64]bool{}
	cursor := ""
	for {
		// The most a backend lists at once: SQS has no cursor, so its one
		// page is the whole listing (a page of 100 hid every dead letter
		// past the 100th).
		page, next, err := s.queue.DeadLetters(ctx, 1000, cursor)
		if err != nil {
			return nil, fmt.Errorf("list the dead letters: %w", err)
		}
		for _, d := range page {
			var e envelope.Envelope
			if err := json.Unmarshal(d.Body, &e); err == nil {
				ids[e.ID] = true
			}
		}
		if next == "" {
			return ids, nil
		}
		cursor = next
	}
}

// queueLine is the first screen's line about the queue.
func (s *Stack) queueLine() string {
	switch s.cfg.Queue {
	case backends.JetStream:
		return fmt.Sprintf("  queue           JetStream %s, store %s/ (stream %s, consumer %s)\n",
			s.natsURL(), relPath(s.natsStore()), jetstream.DefaultStream, jetstream.DefaultConsumer)
	case backends.SQS:
		return fmt.Sprintf("  queue           local SQS %s (%s; in memory: a restart loses its messages, the ledger republishes them)\n",
			s.ep.QueueURL, sqsServerCommand)
	}
	return fmt.Sprintf("  queue emulator  %s\n", s.ep.QueueURL)
}

// natsReady is a Ready probe for the JetStream server: nil once a client
// connects and JetStream answers.
func natsReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := natsjs.New(nc)
		if err != nil {
			return err
		}
		_, err = js.AccountInfo(ctx)
		return err
	}
}

// tcpReady is a Ready probe for a server without a health endpoint: nil
// once it accepts a connection on address.
func tcpReady(address string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", address)
		if err != nil {
			return err
		}
		return c.Close()
	}
}
