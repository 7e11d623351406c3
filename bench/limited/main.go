// Command limited measures delivery against a rate-limited provider on a
// scaled clock: the design's 40 requests a minute becomes 40 a second, so a
// minute of the real workload takes a second here. Four real bin/worker
// processes share the pace (OWED_PROVIDER_RATE=40/s) in front of a sandbox
// that enforces 40/s with a burst of 3 and answers 429 with Retry-After,
// while a backlog lasts the whole run and the cron (every scaled minute, 1 s)
// keeps the queue fed. It reports accepted sends as a fraction of the
// allowed rate, 429s as a fraction of attempts, and receives per delivery
// over the measured stretch (the workers' owed_worker_messages_total over
// every outcome, divided by its "delivered" series): a message received
// while its turn at the provider is far off is handed back and received
// again, so this is the churn a backend's receive limit sees (SQS's
// maxReceiveCount). -queue picks the backend as in bench/e2e.
//
// At the default 4 × 16 senders the workers hold 1.6 s of sends at 40/s,
// within the pace's 2 s max wait (worker.PaceMaxWaitDefault, which the
// scaled clock does not scale), so no message has to be handed back and a
// worker without pace-gated consumption still shows about 1 receive per
// delivery. -concurrency 64 holds 6.4 s, the way 64 senders at a real
// 40/min hold far more than the max wait: that run is the one that tells
// whether consumption waits for the pace (make bench runs it on every
// backend).
//
// Beside it, the in-cron inline sender the design rejected, under the same
// limit: one invocation that sends a 20-minute backlog sequentially,
// sleeping whatever Retry-After says on a 429, stopped at the runner's
// 900 s cap. It runs against a sandbox limiting 40/minute on a clock 60×
// faster than the wall, so Retry-After is computed, rounded up to whole
// seconds and slept exactly as a real provider and sender would, in 1/60th
// of the time.
//
//	make build && scripts/with-postgres.sh go run ./bench/limited
//	make build && scripts/with-postgres.sh go run ./bench/limited -queue jetstream -inline=false
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/bench/internal/stack"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/provider/webhook"
	"github.com/owedhq/owed/internal/queue/backends"
)

const (
	// scale is how much faster than the wall the scaled clock runs.
	scale = 60
	// rate is the provider's limit on the scaled clock (40 per real minute).
	rate      = 40
	burst     = sandbox.DefaultBurst
	inlineCap = 900 * time.Second
	// receivesTarget is issue #13's bound on receives per delivery behind
	// a provider limit.
	receivesTarget = 1.2
)

func main() { benchutil.Main("bench/limited", run) }

func run() error {
	duration := flag.Duration("duration", 2*time.Minute, "measured stretch (wall time) of the worker run")
	warmup := flag.Duration("warmup", 5*time.Second, "sends before this are not measured")
	workers := flag.Int("workers", 4, "worker processes")
	concurrency := flag.Int("concurrency", 16, "OWED_WORKER_CONCURRENCY")
	bin := flag.String("bin", "bin", "folder holding the sweeper and worker binaries")
	queue := flag.String("queue", backends.Default, "queue backend: "+strings.Join(backends.Names, ", "))
	inline := flag.Bool("inline", true, "also run the inline in-cron sender (it uses no queue)")
	backlogMinutes := flag.Int("inline-backlog", 20, "the inline sender's backlog, in minutes of the provider's rate")
	flag.Parse()
	ctx := context.Background()
	var rows []benchutil.Row
	if err := stack.CheckQueue(*queue); errors.Is(err, stack.ErrNoSQSServer) {
		fmt.Fprintf(os.Stderr, "bench/limited: skipping -queue sqs: %v\n", err)
	} else if err != nil {
		return err
	} else if rows, err = workerRun(ctx, *queue, *duration, *warmup, *workers, *concurrency, *bin); err != nil {
		return err
	}
	if *inline {
		in, err := inlineRun(ctx, *backlogMinutes)
		if err != nil {
			return err
		}
		rows = append(rows, in...)
	}
	benchutil.Report(rows)
	return nil
}

func workerRun(ctx context.Context, queue string, duration, warmup time.Duration, workers, concurrency int, bin string) ([]benchutil.Row, error) {
	db, err := benchutil.NewDB(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	// The backlog outlasts the run by half a minute of sends.
	n := rate * int((warmup + duration + 30*time.Second).Seconds())
	due := time.Now().Add(-time.Second)
	if err := benchutil.Schedule(ctx, ledger.New(db.App, nil), "lim", n, 20, func(int) time.Time { return due }); err != nil {
		return nil, err
	}
	st, err := stack.Start(ctx, stack.Config{DB: db, Bin: bin, Queue: queue, Workers: workers, Concurrency: concurrency,
		ProviderRate: fmt.Sprintf("%d/s", rate), SandboxRate: fmt.Sprintf("%d/s", rate), SandboxBurst: burst,
		MaxSends: n + 1000, SweepBatch: 500, PublishAhead: time.Minute})
	if err != nil {
		return nil, err
	}
	defer st.Stop()
	fmt.Fprintf(os.Stderr, "bench/limited: %d rows owed, %s queue, %d workers × %d, provider %d/s burst %d, measuring %s after %s…\n",
		n, queue, workers, concurrency, rate, burst, duration, warmup)
	cronCtx, stopCron := context.WithCancel(ctx)
	var cron sync.WaitGroup
	cron.Add(1)
	go func() {
		defer cron.Done()
		for t := time.NewTicker(time.Second); ; {
			if _, err := st.Sweep(cronCtx); err != nil && cronCtx.Err() == nil {
				fmt.Fprintln(os.Stderr, "bench/limited: sweep:", err)
			}
			select {
			case <-cronCtx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	// The cron stops before the stack does (deferred calls run last first).
	defer func() { stopCron(); cron.Wait() }()
	time.Sleep(warmup)
	s0, t0 := st.Sandbox.Stats(), time.Now()
	r0, err := st.Receives(ctx)
	if err != nil {
		return nil, err
	}
	time.Sleep(duration)
	s1, t1 := st.Sandbox.Stats(), time.Now()
	r1, err := st.Receives(ctx)
	if err != nil {
		return nil, err
	}
	rss, err := st.PeakRSS()
	if err != nil {
		return nil, err
	}
	rec := r1.Sub(r0)
	fmt.Fprintf(os.Stderr, "bench/limited: %s: %.0f receives for %.0f deliveries in the measured stretch (%.3f per delivery)\n",
		queue, rec.Received, rec.Delivered, rec.PerDelivery())
	accepted, limited := s1.Accepted-s0.Accepted, s1.RateLimited-s0.RateLimited
	allowed := rate * t1.Sub(t0).Seconds()
	acc, r429 := float64(accepted)/allowed, float64(limited)/float64(accepted+limited)
	// tag tells the runs bench/all makes (backends, worker processes ×
	// senders) apart.
	tag := fmt.Sprintf("%s, %d×%d", queue, workers, concurrency)
	label := fmt.Sprintf("%s, %d/s (40/min scaled), %d×%d, %s", stack.QueueLabel(queue), rate, workers, concurrency, duration)
	rows := []benchutil.Row{
		{Name: "limited: accepted ÷ allowed, " + label, Value: benchutil.One(100 * acc), Unit: "%", Target: "≥ 97", Pass: benchutil.Check(acc >= 0.97)},
		{Name: "limited: receives per delivery (workers' messages counter), " + tag, Value: benchutil.One(rec.PerDelivery()), Unit: "recv",
			Target: fmt.Sprintf("≤ %.1f", receivesTarget), Pass: benchutil.Check(rec.Delivered > 0 && rec.PerDelivery() <= receivesTarget)},
		{Name: "limited: 429s ÷ attempts, " + tag, Value: benchutil.One(100 * r429), Unit: "%", Target: "≤ 1", Pass: benchutil.Check(r429 <= 0.01)},
		{Name: "limited: duplicate sends (sandbox), " + tag, Value: benchutil.One(float64(s1.Duplicates)), Unit: "sends", Target: "0", Pass: benchutil.Check(s1.Duplicates == 0)},
	}
	var worker float64
	for k, v := range rss {
		if strings.HasPrefix(k, "worker") {
			worker = max(worker, v)
		}
	}
	return append(rows,
		benchutil.Row{Name: "peak RSS (VmHWM), bin/sweeper, during limited, " + tag, Value: benchutil.One(rss["sweeper"]), Unit: "MiB", Target: "≤ 50", Pass: benchutil.Check(rss["sweeper"] <= 50)},
		benchutil.Row{Name: "peak RSS (VmHWM), largest bin/worker, during limited, " + tag, Value: benchutil.One(worker), Unit: "MiB", Target: "≤ 50", Pass: benchutil.Check(worker <= 50)},
	), nil
}

// scaledClock is a clock.Clock that runs scale times faster than the wall
// from its start.
type scaledClock struct{ start time.Time }

var _ clock.Clock = scaledClock{}

func (c scaledClock) Now() time.Time {
	return c.start.Add(time.Since(c.start) * scale).UTC().Truncate(time.Microsecond)
}

// NowOrNil is the scaled instant: nothing on this clock may read the
// database's.
func (c scaledClock) NowOrNil() *time.Time {
	t := c.Now()
	return &t
}

// inlineRun is the rejected design: the cron invocation itself sends, one
// request after another, and sleeps Retry-After on a 429.
func inlineRun(ctx context.Context, backlogMinutes int) ([]benchutil.Row, error) {
	r, err := pace.ParseRate(fmt.Sprintf("%d/m", rate))
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.New(sandbox.Config{Rate: r, Burst: burst, Clock: scaledClock{start: time.Now()}})
	if err != nil {
		return nil, err
	}
	srv := httptest.NewServer(sb)
	defer srv.Close()
	sender, err := webhook.New(webhook.Config{URL: srv.URL + "/send", Name: "sandbox"})
	if err != nil {
		return nil, err
	}
	msg, err := payload.Parse("sms", []byte(`{"text":"hello"}`))
	if err != nil {
		return nil, err
	}
	backlog := backlogMinutes * rate
	fmt.Fprintf(os.Stderr, "bench/inline: %d sends (a %d-minute backlog at %d/min), cap %s scaled (%s wall)…\n",
		backlog, backlogMinutes, rate, inlineCap, inlineCap/scale)
	deadline := time.Now().Add(inlineCap / scale)
	sent, refused := 0, 0
	for sent < backlog && time.Now().Before(deadline) {
		_, err := sender.Send(ctx, provider.Delivery{Tenant: "t", NotificationID: int64(sent + 1), Recipient: "r", Channel: "sms",
			Kind: "reminder", Content: msg, IdempotencyKey: fmt.Sprintf("inline-%d", sent)})
		if err == nil {
			sent++
			continue
		}
		pe := provider.Classify(err)
		if pe.Class != provider.RateLimited {
			return nil, fmt.Errorf("inline send: %w", err)
		}
		refused++
		// Sleep as the sender would, cut short by the cap like the runner
		// cuts the invocation.
		wait := max(pe.RetryAfter, time.Second) / scale
		time.Sleep(min(wait, time.Until(deadline)))
	}
	got := float64(sent) / float64(backlog)
	allowed := float64(rate) * inlineCap.Minutes()
	return []benchutil.Row{
		{Name: fmt.Sprintf("inline in-cron sender: %d-min backlog sent within the 900 s cap", backlogMinutes), Value: benchutil.One(100 * got), Unit: "%"},
		{Name: "inline sender: accepted ÷ allowed during the cap", Value: benchutil.One(100 * float64(sent) / allowed), Unit: "%"},
		{Name: "inline sender: 429s ÷ attempts", Value: benchutil.One(100 * float64(refused) / float64(sent+refused)), Unit: "%"},
	}, nil
}
