package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/jetstream/jsserver"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/sqs"
)

// The queue servers a benchmark runs, one per backend OWED_QUEUE_BACKEND
// names: rest is owed's emulator in this process, keeping its tables in a
// database of its own; jetstream a NATS server with JetStream embedded in
// this process on loopback, its file store in a temporary folder; sqs the
// local SQS-compatible server scripts/install-sqs.sh installs
// (owed-sqs-server, a Node.js program keeping everything in memory), as a
// child process. Figures through the local SQS server are indicative only:
// Amazon SQS is a remote service with its own latency and limits.
const (
	// sqsServerCommand is what scripts/install-sqs.sh puts on PATH.
	sqsServerCommand = "owed-sqs-server"
	// sqsQueueName names the main queue; sqs.CreateQueues adds the
	// dead-letter queue beside it.
	sqsQueueName = "owed-bench"
	// sqsRegion and sqsCredential are placeholders: the local server checks
	// neither, but the SDK wants both.
	sqsRegion     = "us-east-1"
	sqsCredential = "bench"
	// queueStartTimeout bounds starting a queue server and provisioning its
	// streams or queues.
	queueStartTimeout = time.Minute
)

// ErrNoSQSServer is StartQueue's error when the local SQS server is not
// installed: a benchmark skips the sqs backend on it.
var ErrNoSQSServer = errors.New(sqsServerCommand + " is not on PATH: run scripts/install-sqs.sh to benchmark the sqs backend")

// QueueServer is a queue a benchmark started, and how to reach it.
type QueueServer struct {
	// Config opens the queue in this process (backends.Open).
	Config backends.Config
	// Env is what the sweeper and the workers are given: OWED_QUEUE_BACKEND
	// and the backend's own variables (for sqs, the AWS SDK's too).
	Env  map[string]string
	stop []func()
}

// StartQueue starts the named backend's server on loopback and provisions
// what owed needs on it: the JetStream streams and consumer, or the SQS
// queues. Stop it when done.
func StartQueue(ctx context.Context, backend string) (*QueueServer, error) {
	if err := CheckQueue(backend); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, queueStartTimeout)
	defer cancel()
	q := &QueueServer{Config: backends.Config{Backend: backend}, Env: map[string]string{"OWED_QUEUE_BACKEND": backend}}
	var err error
	switch backend {
	case backends.JetStream:
		err = q.startJetStream(ctx)
	case backends.SQS:
		err = q.startSQS(ctx)
	default:
		err = q.startEmulator(ctx)
	}
	if err != nil {
		q.Stop()
		return nil, fmt.Errorf("start the %s queue: %w", backend, err)
	}
	return q, nil
}

// CheckQueue says whether StartQueue can run backend here: an error naming
// the accepted backends, or ErrNoSQSServer.
func CheckQueue(backend string) error {
	if !slices.Contains(backends.Names, backend) {
		return fmt.Errorf("-queue %q: want one of %s", backend, strings.Join(backends.Names, ", "))
	}
	if backend == backends.SQS {
		if _, err := exec.LookPath(sqsServerCommand); err != nil {
			return ErrNoSQSServer
		}
	}
	return nil
}

// QueueLabel names backend in a result row; the local SQS server's rows say
// that they are indicative only.
func QueueLabel(backend string) string {
	if backend == backends.SQS {
		return "sqs (local server: indicative)"
	}
	return backend
}

// Stop stops the server and removes what it kept. It is safe to call twice.
func (q *QueueServer) Stop() {
	for _, f := range slices.Backward(q.stop) {
		f()
	}
	q.stop = nil
}

func (q *QueueServer) startEmulator(ctx context.Context) error {
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return err
	}
	q.stop = append(q.stop, db.Close)
	ecfg := emulator.DefaultConfig()
	ecfg.Token, ecfg.DatabaseURL, ecfg.MaxConns = queueToken, db.OwnerURL, 32
	em, err := emulator.Open(ctx, ecfg, zerolog.Nop())
	if err != nil {
		return err
	}
	em.Start(context.WithoutCancel(ctx))
	srv := httptest.NewServer(em)
	q.stop = append(q.stop, func() { em.Drain(); srv.Close(); em.Stop() })
	q.Config.Rest = rest.Config{URL: srv.URL, Token: queueToken, Name: "bench"}
	q.Env["OWED_QUEUE_URL"], q.Env["OWED_QUEUE_TOKEN"], q.Env["OWED_QUEUE_NAME"] = srv.URL, queueToken, "bench"
	return nil
}

func (q *QueueServer) startJetStream(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "owed-bench-nats-*")
	if err != nil {
		return err
	}
	q.stop = append(q.stop, func() { os.RemoveAll(dir) })
	srv, err := jsserver.Start(jsserver.Config{Addr: "127.0.0.1:0", StoreDir: dir, Log: zerolog.Nop()})
	if err != nil {
		return err
	}
	q.stop = append(q.stop, srv.Shutdown)
	// Provision creates the streams and the consumer with docs/queues.md's
	// settings, which the services' defaults name too; they open them
	// without provisioning, as in production.
	cfg := jetstream.Config{URL: srv.ClientURL()}
	prov := cfg
	prov.Provision = true
	c, err := jetstream.New(ctx, prov)
	if err != nil {
		return err
	}
	c.Close()
	q.Config.JetStream = cfg
	q.Env["OWED_NATS_URL"] = cfg.URL
	return nil
}

func (q *QueueServer) startSQS(ctx context.Context) error {
	path, err := exec.LookPath(sqsServerCommand)
	if err != nil {
		return ErrNoSQSServer
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	logf, err := os.CreateTemp("", "owed-bench-sqs-*.log")
	if err != nil {
		return err
	}
	logf.Close()
	p, err := launch.Start(ctx, launch.Spec{Name: "sqs", Path: path, Args: []string{"--host", host, "--port", port},
		Env: launch.Environ(), Log: logf.Name(), Ready: tcpReady(addr), ReadyTimeout: queueStartTimeout})
	if err != nil {
		return err
	}
	q.stop = append(q.stop, func() {
		if err := p.Stop(stopTimeout, nil); err != nil {
			fmt.Fprintln(os.Stderr, "bench/stack:", err)
		}
	})
	cfg, err := sqs.CreateQueues(ctx, sqs.Config{Endpoint: "http://" + addr, Region: sqsRegion,
		Credentials: credentials.NewStaticCredentialsProvider(sqsCredential, sqsCredential, "")}, sqsQueueName)
	if err != nil {
		return err
	}
	q.Config.SQS = cfg
	for k, v := range map[string]string{"OWED_SQS_QUEUE_URL": cfg.QueueURL,
		"OWED_SQS_DEAD_LETTER_QUEUE_URL": cfg.DeadLetterQueueURL, "OWED_SQS_ENDPOINT": cfg.Endpoint,
		"OWED_SQS_REGION": sqsRegion,
		// The SDK's default chain finds the placeholder credentials here;
		// an empty session token keeps a real one of the caller's away.
		"AWS_REGION": sqsRegion, "AWS_ACCESS_KEY_ID": sqsCredential, "AWS_SECRET_ACCESS_KEY": sqsCredential,
		"AWS_SESSION_TOKEN": ""} {
		q.Env[k] = v
	}
	return nil
}

// tcpReady is a Ready probe for a server that answers no /healthz: nil
// once addr accepts a connection.
func tcpReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}
