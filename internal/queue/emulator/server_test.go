package emulator

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/testdb"
)

// TestServeEndsWaitingConsumes checks the graceful shutdown: when Serve's
// context ends, a consume that is long-polling answers at once with no
// messages (Drain runs before the server waits for requests in flight), so
// the shutdown does not wait out the poll and Serve returns nil.
func TestServeEndsWaitingConsumes(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Token, cfg.DatabaseURL = "serve-test-token", testdb.New(t).OwnerURL
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := Open(ctx, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.Serve(ctx, ln) }()
	c, err := rest.New(rest.Config{URL: "http://" + ln.Addr().String(), Token: cfg.Token, Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		msgs, err := c.Consume(context.Background(), rest.ConsumeOptions{Wait: 20 * time.Second})
		if err == nil && len(msgs) != 0 {
			err = fmt.Errorf("got %d messages from an empty queue", len(msgs))
		}
		polled <- err
	}()
	// A waiting consume holds its queue's wake-up channel.
	for deadline := time.Now().Add(30 * time.Second); !e.waiting("serve"); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-polled:
			t.Fatalf("the consume ended before it waited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no consume waited on the queue within 30 s")
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve after its context ended: %v, want a clean shutdown", err)
	}
	if err := <-polled; err != nil {
		t.Fatalf("the waiting consume: %v, want an empty answer", err)
	}
}

// waiting reports whether a consume waits on queue.
func (e *Emulator) waiting(queue string) bool {
	e.waiters.mu.Lock()
	defer e.waiters.mu.Unlock()
	_, ok := e.waiters.chans[queue]
	return ok
}
