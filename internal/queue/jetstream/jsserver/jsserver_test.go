package jsserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/jetstream"
)

// TestStoreSurvivesARestart publishes to a provisioned stream, stops the
// server, starts another on the same store and port, and receives the
// message there: what the dev stack relies on when it restarts the server.
func TestStoreSurvivesARestart(t *testing.T) {
	store := t.TempDir()
	srv, err := Start(Config{Addr: "127.0.0.1:0", StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	ctx := context.Background()
	q, err := jetstream.New(ctx, jetstream.Config{URL: url, Provision: true})
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	res, err := q.Publish(ctx, []queue.Message{{Key: "k1", Body: []byte("owed")}})
	q.Close()
	srv.Shutdown()
	if err != nil || res[0].Err != nil {
		t.Fatalf("publish: %v %v", err, res)
	}

	srv, err = Start(Config{Addr: strings.TrimPrefix(url, "nats://"), StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	q, err = jetstream.New(ctx, jetstream.Config{URL: url})
	if err != nil {
		t.Fatalf("the provisioned stream after a restart: %v", err)
	}
	defer q.Close()
	got, err := q.Receive(ctx, 10, 5*time.Second, 0)
	if err != nil || len(got) != 1 || string(got[0].Body) != "owed" {
		t.Fatalf("receive after a restart = %+v, %v; want the message published before it", got, err)
	}
}

func TestStartRefusesWhatItMustNotServe(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Addr: "0.0.0.0:4222", StoreDir: t.TempDir()}, "not a loopback address"},
		{Config{Addr: "localhost", StoreDir: t.TempDir()}, "host:port"},
		{Config{Addr: "127.0.0.1:http", StoreDir: t.TempDir()}, "not a port"},
		{Config{Addr: "127.0.0.1:0"}, "--store"},
	} {
		if srv, err := Start(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			if srv != nil {
				srv.Shutdown()
			}
			t.Errorf("Start(%+v) = %v; want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}
