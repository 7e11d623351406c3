package rest_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backendtest"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/stacktest"
)

var queues atomic.Int64

// TestContract runs the backend suite through the rest backend against the
// emulator, its reference server, on a fresh queue per case. No case is
// skipped: the emulator gives everything the contract asks.
func TestContract(t *testing.T) {
	s := stacktest.New(t, stacktest.Options{})
	backendtest.Run(t, func(t *testing.T) queue.Queue {
		c, err := rest.New(rest.Config{URL: s.QueueURL, Token: stacktest.QueueToken,
			Name: fmt.Sprintf("contract-%d", queues.Add(1))})
		if err != nil {
			t.Fatalf("rest.New: %v", err)
		}
		return c
	})
}
