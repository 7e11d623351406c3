package rest_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backendtest"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/testdb"
)

const token = "rest-contract-token-0123456789"

var queues atomic.Int64

// TestContract runs the backend suite through the rest backend against the
// emulator, its reference server, on a fresh queue per case.
func TestContract(t *testing.T) {
	cfg := emulator.DefaultConfig()
	cfg.Token, cfg.DatabaseURL = token, testdb.New(t).OwnerURL
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	em, err := emulator.Open(ctx, cfg, zerolog.Nop())
	if err != nil {
		t.Fatalf("emulator: %v", err)
	}
	em.Start(ctx)
	srv := httptest.NewServer(em)
	t.Cleanup(func() {
		em.Drain()
		srv.Close()
		em.Stop()
	})
	backendtest.Run(t, func(t *testing.T) queue.Queue {
		c, err := rest.New(rest.Config{URL: srv.URL, Token: token, Name: fmt.Sprintf("contract-%d", queues.Add(1))})
		if err != nil {
			t.Fatalf("rest.New: %v", err)
		}
		return c
	})
}
