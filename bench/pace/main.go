// Command pace measures how well the shared pace (internal/pace) uses a rate
// limited provider account: several simulated worker processes, each with its
// own connection pool and several workers, reserve slots against one rate and
// send to an in-process provider that enforces the same rate with a GCRA of a
// small burst and answers 429 with Retry-After to anything early. While the
// backlog never runs out, it prints accepted sends per second as a fraction
// of the allowed rate, and 429s as a fraction of attempts.
//
// Run it against a throwaway server:
//
//	scripts/with-postgres.sh go run ./bench/pace
//
// It reserves in a database of its own on the server named by
// OWED_TEST_DATABASE_URL (benchutil.NewDB), as the application role.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/owedhq/owed/bench/internal/benchutil"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
)

// Defaults match the performance issue's target: 40/s, four worker
// processes, a backlog that lasts the whole run.
const (
	defaultRate      = "40/s"
	defaultProcesses = 4
	defaultWorkers   = 8
	defaultDuration  = 20 * time.Second
	defaultWarmup    = time.Second
	// defaultBurst is the sandbox provider's, which explains why a burst of
	// one refuses a client pacing at exactly the rate.
	defaultBurst   = sandbox.DefaultBurst
	defaultMaxWait = 2 * time.Second
	// defaultRetryAfterResolution is how finely the provider's Retry-After
	// is stated. HTTP carries whole seconds; some providers say more in
	// their own headers.
	defaultRetryAfterResolution = time.Second
)

func main() { benchutil.Main("bench/pace", run) }

func run() error {
	var (
		rateText   = flag.String("rate", defaultRate, "the provider's rate")
		paceText   = flag.String("pace-rate", "", "the rate the pace keeps, when not the provider's (headroom)")
		processes  = flag.Int("processes", defaultProcesses, "simulated worker processes, one connection pool each")
		workers    = flag.Int("workers", defaultWorkers, "concurrent workers per process")
		duration   = flag.Duration("duration", defaultDuration, "how long to send")
		warmup     = flag.Duration("warmup", defaultWarmup, "sends in this first stretch are not measured")
		burst      = flag.Int("burst", defaultBurst, "the provider's burst: how many sends it takes at once")
		maxWait    = flag.Duration("max-wait", defaultMaxWait, "the longest a worker holds a message for its slot")
		resolution = flag.Duration("retry-after-resolution", defaultRetryAfterResolution,
			"the provider's Retry-After is rounded up to this")
	)
	flag.Parse()
	rate, err := pace.ParseRate(*rateText)
	if err != nil {
		return err
	}
	paceRate := rate
	if *paceText != "" {
		if paceRate, err = pace.ParseRate(*paceText); err != nil {
			return err
		}
	}
	if rate.IsUnlimited() || paceRate.IsUnlimited() || *processes < 1 || *workers < 1 || *burst < 1 || *duration <= *warmup || *resolution <= 0 {
		return fmt.Errorf("-rate and -pace-rate must be limited, -processes, -workers and -burst at least 1, " +
			"-duration longer than -warmup, -retry-after-resolution positive")
	}
	ctx := context.Background()
	bdb, err := benchutil.NewDB(ctx)
	if err != nil {
		return err
	}
	defer bdb.Close()

	account := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	prov := newProvider(rate, *burst, *resolution)
	st := &stats{}
	runCtx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	start := time.Now()
	measureFrom := start.Add(*warmup)

	var wg sync.WaitGroup
	for range *processes {
		db, err := sql.Open("postgres", bdb.AppURL)
		if err != nil {
			return err
		}
		defer db.Close()
		db.SetMaxIdleConns(*workers)
		l, err := pace.New(db, account, paceRate)
		if err != nil {
			return err
		}
		for range *workers {
			wg.Go(func() { work(runCtx, l, prov, st, *maxWait, measureFrom) })
		}
	}
	wg.Wait()
	// The run ends at the deadline, not when the last worker has noticed:
	// no send leaves after it, so the tail would only dilute the rate.
	end := start.Add(*duration)
	if st.err != nil {
		return st.err
	}
	return report(st, rate, paceRate, *processes, *workers, *burst, *maxWait, *resolution, end.Sub(measureFrom))
}

// work is one worker: take a slot, wait for it, send, and on a 429 pause the
// shared pace. A slot beyond max wait stands for a nack with a delay: the
// message goes back to the queue and a worker picks it up again later.
func work(ctx context.Context, l *pace.Limiter, prov *provider, st *stats, maxWait time.Duration, measureFrom time.Time) {
	for ctx.Err() == nil {
		began := time.Now()
		r, err := l.Reserve(ctx, maxWait)
		st.reserved(time.Since(began), r.Granted)
		if err != nil {
			st.fail(ctx, err)
			return
		}
		if !r.Granted {
			// The nack's delay: the earliest slot's whole distance rather
			// than just the part beyond max wait. While the backlog lasts,
			// the slots within reach keep being taken by the workers that
			// hold them, and retrying sooner would only spin.
			clock.Sleep(ctx, r.Wait)
			continue
		}
		if !clock.Sleep(ctx, r.Wait) {
			return
		}
		sentAt := time.Now()
		ok, retryAfter := prov.send()
		// The database runs on this machine, so its clock is this one's and
		// the slot's start compares directly with the send's wall time.
		st.sent(sentAt.After(measureFrom), ok, sentAt.Round(0).Sub(r.At))
		if !ok {
			if err := l.Pause(ctx, retryAfter); err != nil {
				st.fail(ctx, err)
				return
			}
		}
	}
}

// provider enforces rate with GCRA, the way a provider's token bucket does:
// a send is accepted when it arrives no earlier than tat minus the burst
// tolerance, and a refused send does not move tat.
type provider struct {
	mu         sync.Mutex
	interval   time.Duration
	tolerance  time.Duration
	resolution time.Duration
	tat        time.Time
}

func newProvider(r pace.Rate, burst int, resolution time.Duration) *provider {
	iv := r.Interval()
	return &provider{interval: iv, tolerance: time.Duration(burst-1) * iv, resolution: resolution}
}

// send reports whether the provider accepted a send now, and if not the
// Retry-After it answered, rounded up to its resolution.
func (p *provider) send() (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	tat := p.tat
	if tat.Before(now) {
		tat = now
	}
	if wait := tat.Sub(now) - p.tolerance; wait > 0 {
		return false, (wait + p.resolution - 1) / p.resolution * p.resolution
	}
	p.tat = tat.Add(p.interval)
	return true, 0
}

// stats collects what the workers saw.
type stats struct {
	mu                   sync.Mutex
	accepted, refused429 int // measured sends only
	granted, notGranted  int
	latencies            []time.Duration
	// lateness is how long after its slot's start each measured send left
	// (negative: early): the jitter a provider with a small burst absorbs.
	lateness []time.Duration
	err      error
}

func (s *stats) reserved(latency time.Duration, granted bool) {
	s.record(&s.latencies, latency, granted, &s.granted, &s.notGranted)
}

func (s *stats) sent(measured, ok bool, late time.Duration) {
	if measured {
		s.record(&s.lateness, late, ok, &s.accepted, &s.refused429)
	}
}

// record adds d to samples and counts one into yes or no.
func (s *stats) record(samples *[]time.Duration, d time.Duration, ok bool, yes, no *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*samples = append(*samples, d)
	if ok {
		*yes++
	} else {
		*no++
	}
}

// fail records the first error that was not the run ending.
func (s *stats) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func report(s *stats, rate, paceRate pace.Rate, processes, workers, burst int, maxWait, resolution, measured time.Duration) error {
	allowed := measured.Seconds() / rate.Interval().Seconds()
	attempts := s.accepted + s.refused429
	if attempts == 0 || len(s.latencies) == 0 {
		return fmt.Errorf("no sends were measured")
	}
	slices.Sort(s.latencies)
	slices.Sort(s.lateness)
	pct := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	fmt.Fprintf(os.Stderr, "rate=%s pace_rate=%s processes=%d workers=%d provider_burst=%d max_wait=%s "+
		"retry_after_resolution=%s measured=%.1fs\n",
		rate, paceRate, processes, workers, burst, maxWait, resolution, measured.Seconds())
	fmt.Fprintf(os.Stderr, "accepted=%d (%.2f/s) allowed=%.0f accepted_fraction=%.4f\n",
		s.accepted, float64(s.accepted)/measured.Seconds(), allowed, float64(s.accepted)/allowed)
	fmt.Fprintf(os.Stderr, "attempts=%d 429s=%d 429_fraction=%.4f\n",
		attempts, s.refused429, float64(s.refused429)/float64(attempts))
	fmt.Fprintf(os.Stderr, "reservations granted=%d not_granted=%d reserve_latency p50=%s p99=%s max=%s\n",
		s.granted, s.notGranted, pct(s.latencies, 0.50), pct(s.latencies, 0.99), pct(s.latencies, 1))
	fmt.Fprintf(os.Stderr, "send_lateness min=%s p50=%s p99=%s max=%s\n",
		pct(s.lateness, 0), pct(s.lateness, 0.50), pct(s.lateness, 0.99), pct(s.lateness, 1))
	acc, r429 := float64(s.accepted)/allowed, float64(s.refused429)/float64(attempts)
	label := fmt.Sprintf("%s, %d simulated processes", rate, processes)
	benchutil.Report([]benchutil.Row{
		{Name: "pace alone: accepted ÷ allowed, " + label, Value: benchutil.One(100 * acc), Unit: "%",
			Target: "≥ 97", Pass: benchutil.Check(acc >= 0.97)},
		{Name: "pace alone: 429s ÷ attempts, " + label, Value: benchutil.One(100 * r429), Unit: "%",
			Target: "≤ 1", Pass: benchutil.Check(r429 <= 0.01)},
	})
	return nil
}
