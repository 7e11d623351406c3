package jetstream

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backendtest"
)

// testAckWait is short so the contract's extensions (8 s) outlast AckWait:
// ChangeVisibility must hold a message past it.
const testAckWait = 3 * time.Second

// startServer runs a JetStream-enabled nats-server inside the test, on a
// random loopback port with its store in a temporary folder.
func startServer(t *testing.T) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server did not become ready")
	}
	return srv.ClientURL()
}

var streams atomic.Int64

// freshConfig names streams, subjects and a consumer no other test uses.
func freshConfig(url string) Config {
	n := streams.Add(1)
	return Config{
		URL:               url,
		Stream:            fmt.Sprintf("OWED_T%d", n),
		Subject:           fmt.Sprintf("owed.t%d.deliveries", n),
		Consumer:          fmt.Sprintf("workers-t%d", n),
		DeadLetterStream:  fmt.Sprintf("OWED_T%d_DEAD", n),
		DeadLetterSubject: fmt.Sprintf("owed.t%d.dead", n),
		AckWait:           testAckWait,
		Provision:         true,
	}
}

func TestContract(t *testing.T) {
	url := startServer(t)
	backendtest.Run(t, func(t *testing.T) queue.Queue {
		c, err := New(context.Background(), freshConfig(url))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return c
	})
}

func TestNewRefusesMissingAndWrongStreams(t *testing.T) {
	url := startServer(t)
	ctx := context.Background()

	cfg := freshConfig(url)
	cfg.Provision = false
	if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("New on a server without the stream = %v; want it to say the stream does not exist", err)
	}

	cfg.Provision = true
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New with Provision: %v", err)
	}
	c.Close()

	cfg.Provision = false
	c, err = New(ctx, cfg)
	if err != nil {
		t.Fatalf("New on provisioned streams: %v", err)
	}
	c.Close()

	cfg.AckWait = time.Minute
	if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "ack wait") {
		t.Fatalf("New with an AckWait the consumer does not have = %v; want an ack wait error", err)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "OWED_NATS_URL"},
		{Config{URL: "nats://127.0.0.1:1", Subject: "owed.*"}, "Config.Subject"},
		{Config{URL: "nats://127.0.0.1:1", Stream: "a.b"}, "Config.Stream"},
		{Config{URL: "nats://127.0.0.1:1", Stream: "X", DeadLetterStream: "X"}, "Config.DeadLetterStream"},
		{Config{URL: "nats://127.0.0.1:1", AckWait: time.Millisecond}, "Config.AckWait"},
	} {
		_, err := New(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestReceiptsOfOtherConsumersAreRefused(t *testing.T) {
	url := startServer(t)
	c, err := New(context.Background(), freshConfig(url))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	for _, r := range []string{
		"",
		"owed.deliveries",
		"$JS.ACK.OTHER.workers.1.1.1.1700000000000000000.0",
		"$JS.ACK." + c.cfg.Stream + ".other.1.1.1.1700000000000000000.0",
	} {
		if err := c.Ack(context.Background(), r); err == nil {
			t.Errorf("Ack(%q) succeeded; a receipt must be an ack subject of this consumer", r)
		}
	}
}

func TestConnectErrorsNeverCarryThePassword(t *testing.T) {
	got := redactURLs("nats://owed:s3cr3t@127.0.0.1:1, nats://127.0.0.1:2,%zz")
	if strings.Contains(got, "s3cr3t") || !strings.Contains(got, "127.0.0.1:1") || !strings.Contains(got, "127.0.0.1:2") {
		t.Errorf("redactURLs = %q", got)
	}
}

// Stats reports the consumer's MaxAckPending as the in-flight limit, so the
// sweeper's owed_queue_in_flight_limit gauge and its alert compare the
// in-flight count with the limit the consumer enforces.
func TestStatsReportTheConsumersMaxAckPending(t *testing.T) {
	url := startServer(t)
	cfg := freshConfig(url)
	cfg.MaxAckPending = 7
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	st, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.InFlightLimit != 7 {
		t.Errorf("InFlightLimit = %d, want the consumer's MaxAckPending, 7", st.InFlightLimit)
	}
}
