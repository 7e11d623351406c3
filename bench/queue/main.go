// Command queue measures the queue emulator's throughput over HTTP on
// loopback with the real client: publishing in batches of 100, then
// consuming and acking with 8 consumers. It prints messages per second, the
// median of a few runs with the minimum and maximum.
//
//	scripts/with-postgres.sh go run ./bench/queue
//	OWED_TEST_PG_FSYNC=on scripts/with-postgres.sh go run ./bench/queue
//
// The database is OWED_QUEUE_DATABASE_URL, or OWED_TEST_DATABASE_URL when
// that is unset; each run uses a queue of its own in the owed_queue schema.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
)

func main() { benchutil.Main("bench/queue", run) }

func run() error {
	runs := flag.Int("runs", 3, "how many times to measure each phase")
	n := flag.Int("messages", 20000, "messages per run")
	batch := flag.Int("batch", 100, "messages per publish_batch request")
	publishers := flag.Int("publishers", 4, "concurrent publishers")
	consumers := flag.Int("consumers", 8, "concurrent consumers")
	maxMessages := flag.Int("max-messages", 10, "max_messages per consume")
	syncCommit := flag.Bool("synchronous-commit", false, "keep synchronous_commit on for the emulator's sessions")
	flag.Parse()

	dbURL := os.Getenv("OWED_QUEUE_DATABASE_URL")
	if dbURL == "" {
		dbURL = os.Getenv("OWED_TEST_DATABASE_URL")
	}
	if dbURL == "" {
		return errors.New("set OWED_QUEUE_DATABASE_URL, or run under scripts/with-postgres.sh")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	cfg := emulator.DefaultConfig()
	cfg.Token = randomHex(16)
	cfg.DatabaseURL = dbURL
	cfg.SynchronousCommit = *syncCommit
	cfg.MaxConns = 2 * (*consumers + *publishers)
	em, err := emulator.Open(ctx, cfg, zerolog.New(os.Stderr).Level(zerolog.WarnLevel))
	if err != nil {
		return err
	}
	em.Start(ctx)
	defer em.Stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- em.Serve(srvCtx, ln) }()
	defer func() { stopSrv(); <-served }()

	payload, _ := json.Marshal(map[string]any{
		"ledger_id": "0b6e4c1e-8d4f-4c57-a0f7-3f1de7d6a6b1", "tenant_id": "7f1c2d9a-5b3e-4a61-9e0f-2c4b8a7d1e35",
		"due_at": "2026-03-01T12:00:00Z", "channel": "sms", "attempt": 1,
	})
	fmt.Fprintf(os.Stderr, "queue emulator benchmark: %d messages/run, %d runs, GOMAXPROCS=%d, synchronous_commit=%v, payload=%d bytes\n",
		*n, *runs, runtime.GOMAXPROCS(0), onOff(*syncCommit), len(payload))

	var pubRates, conRates []float64
	for r := 0; r < *runs; r++ {
		c, err := rest.New(rest.Config{URL: "http://" + ln.Addr().String(), Token: cfg.Token, Name: "bench-" + randomHex(6)})
		if err != nil {
			return err
		}
		pub, err := publish(ctx, c, payload, *n, *batch, *publishers)
		if err != nil {
			return err
		}
		con, err := consume(ctx, c, *n, *consumers, *maxMessages)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "run %d: publish %.0f msg/s, consume+ack %.0f msg/s\n", r+1, pub, con)
		pubRates, conRates = append(pubRates, pub), append(conRates, con)
	}
	pubS, conS := benchutil.Summarise(pubRates), benchutil.Summarise(conRates)
	benchutil.Report([]benchutil.Row{
		{Name: fmt.Sprintf("queue publish (batches of %d, %d publishers)", *batch, *publishers), Value: pubS,
			Unit: "msg/s", Target: "≥ 10000", Pass: benchutil.Check(pubS.Median >= 10000)},
		{Name: fmt.Sprintf("queue consume+ack (%d consumers, max_messages %d)", *consumers, *maxMessages), Value: conS,
			Unit: "msg/s", Target: "≥ 5000", Pass: benchutil.Check(conS.Median >= 5000)},
	})
	return nil
}

// publish sends n messages in batches from several goroutines and returns
// messages per second.
func publish(ctx context.Context, c *rest.Client, payload json.RawMessage, n, batch, workers int) (float64, error) {
	var next atomic.Int64
	start := time.Now()
	err := parallel(workers, func() error {
		msgs := make([]rest.Entry, 0, batch)
		for {
			first := int(next.Add(int64(batch))) - batch
			if first >= n {
				return nil
			}
			msgs = msgs[:0]
			for i := first; i < min(first+batch, n); i++ {
				msgs = append(msgs, rest.Entry{Payload: payload, IdempotencyKey: fmt.Sprintf("bench-%d", i)})
			}
			res, err := c.PublishBatch(ctx, msgs)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Status != rest.StatusCreated {
					return fmt.Errorf("publish: entry %+v", r)
				}
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// consume receives and acks n messages with several consumers and returns
// messages per second.
func consume(ctx context.Context, c *rest.Client, n, workers, max int) (float64, error) {
	var done atomic.Int64
	start := time.Now()
	err := parallel(workers, func() error {
		ids := make([]string, 0, max)
		for done.Load() < int64(n) {
			msgs, err := c.Consume(ctx, rest.ConsumeOptions{MaxMessages: max, Wait: time.Second, VisibilityTimeout: time.Minute})
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				continue
			}
			ids = ids[:0]
			for _, m := range msgs {
				ids = append(ids, m.MessageID)
			}
			if _, err := c.AckIDs(ctx, ids...); err != nil {
				return err
			}
			done.Add(int64(len(msgs)))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if got := done.Load(); got != int64(n) {
		return 0, fmt.Errorf("consumed %d messages, published %d", got, n)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// parallel runs fn on workers goroutines at once and returns the first
// error any of them returned.
func parallel(workers int, fn func() error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			if err := fn(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
