package worker_test

import (
	"testing"
	"time"

	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// BenchmarkDeliver times one delivery through the worker's hot path —
// consume, claim, send to the sandbox over HTTP, settle, batched ack — with
// a real database, emulator and sandbox in this process; -benchmem then
// gives allocations per delivery. Rows are scheduled and swept outside the
// timer, so only the worker's drain is measured: from its start until the
// sandbox has every row and the worker has stopped, which it does only once
// every accepted send is recorded and acked. The allocation figures include
// the in-process emulator and sandbox answering the worker's requests, so
// they overstate the worker's own share.
//
//	scripts/with-postgres.sh go test -run '^$' -bench BenchmarkDeliver -benchmem ./internal/worker
func BenchmarkDeliver(b *testing.B) {
	// Each call of the benchmark function gets a stack of its own.
	s := newBundle(b, stacktest.Options{
		Emulator: func(c *emulator.Config) { c.MaxConns = 16 },
		Sandbox: func(c *sandbox.Config) {
			c.Rate, _ = pace.ParseRate("1000000/s")
			c.Burst = 1000000
		},
	})
	s.Schedule(b, "bench", b.N, time.Now().Add(-time.Second), nil)
	s.sweepAll(b)
	b.ReportAllocs()
	b.ResetTimer()
	stop := s.start(b, func(o *worker.Options) {
		// The production settings, not the tests' short timeouts.
		o.Concurrency, o.VisibilityTimeout, o.SendTimeout, o.ShutdownTimeout = 16, 0, 0, 0
	})
	for s.Sandbox.Stats().DistinctKeys < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	stop()
	b.StopTimer()
	if bl := read(b, s.Ledger.Backlog); bl.Owed != 0 {
		b.Fatalf("%d rows still owed after the worker stopped", bl.Owed)
	}
	if st := s.Sandbox.Stats(); st.Duplicates != 0 {
		b.Fatalf("%d duplicate sends", st.Duplicates)
	}
}
