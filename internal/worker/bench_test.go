package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/provider/webhook"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/testdb"
	"github.com/owedhq/owed/internal/worker"
)

// BenchmarkDeliver times one delivery through the worker's hot path —
// consume, claim, send to the sandbox over HTTP, settle, batched ack — with
// a real database, emulator and sandbox in this process; -benchmem then
// gives allocations per delivery. Rows are scheduled and swept outside the
// timer, so only the worker's drain is measured. The allocation figures
// include the in-process emulator and sandbox answering the worker's
// requests, so they overstate the worker's own share.
//
// It assembles the stack itself: stacktest.New takes a *testing.T, which a
// benchmark does not have.
//
//	scripts/with-postgres.sh go test -run '^$' -bench BenchmarkDeliver -benchmem ./internal/worker
func BenchmarkDeliver(b *testing.B) {
	ctx := context.Background()
	db := testdb.New(b)
	l := ledger.New(db.App, nil)
	ecfg := emulator.DefaultConfig()
	ecfg.Token, ecfg.DatabaseURL, ecfg.MaxConns = stacktest.QueueToken, db.OwnerURL, 16
	em, err := emulator.Open(ctx, ecfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	em.Start(ctx)
	esrv := httptest.NewServer(em)
	defer func() { em.Drain(); esrv.Close(); em.Stop() }()
	rate, _ := sandbox.ParseRate("1000000/s")
	sb, err := sandbox.New(sandbox.Config{Rate: rate, Burst: 1000000})
	if err != nil {
		b.Fatal(err)
	}
	ssrv := httptest.NewServer(sb)
	defer ssrv.Close()
	q, err := queue.New(queue.Config{URL: esrv.URL, Token: stacktest.QueueToken, Name: "bench-deliver"})
	if err != nil {
		b.Fatal(err)
	}
	sender, err := webhook.New(webhook.Config{URL: ssrv.URL + "/send", Name: "sandbox"})
	if err != nil {
		b.Fatal(err)
	}
	sw, err := sweep.New(l, q, sweep.Config{Batch: 500, Budget: 30 * time.Second, PublishAhead: time.Minute,
		RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}

	// Each call of the benchmark function gets rows of its own.
	due := time.Now().Add(-time.Second)
	var rows []ledger.NewNotification
	for i := 0; i < b.N; i++ {
		rows = append(rows, ledger.NewNotification{Recipient: fmt.Sprintf("r%d", i), Channel: "sms", Kind: "reminder",
			RefID: fmt.Sprintf("n%d-%d", b.N, i), DueAt: due, Payload: json.RawMessage(`{"text":"hello"}`)})
		if len(rows) == ledger.MaxScheduleBatch || i == b.N-1 {
			if _, err := l.Schedule(ctx, "bench", rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	for {
		res, err := sw.Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Leased == 0 {
			break
		}
	}
	w, err := worker.New(worker.Options{Ledger: l, Queue: q, Log: zerolog.Nop(),
		Route: func(string) (provider.Sender, error) { return sender, nil },
		Pace:  func(string) worker.Pacer { return stacktest.Unpaced{} }, Concurrency: 16})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { w.Run(wctx); close(done) }()
	for sb.Stats().DistinctKeys < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	for {
		bl, err := l.Backlog(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if bl.Owed == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cancel()
	<-done
	if st := sb.Stats(); st.Duplicates != 0 {
		b.Fatalf("%d duplicate sends", st.Duplicates)
	}
}
