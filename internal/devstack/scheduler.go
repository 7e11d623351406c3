package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// cronTimeout bounds one /cron call. A sweep stops at its own budget
// (OWED_SWEEP_BUDGET, 50s) well before this.
const cronTimeout = 2 * time.Minute

// scheduler stands in for the hosted cron: it calls /cron/sweep on every
// sweeper every tick (at once, so two sweepers' runs overlap) and
// /cron/materialise on the first every MaterialiseEveryTicks ticks, and logs
// every answer to its log file. While paused it calls nothing, as a hosted
// cron that stopped firing, and does not backfill the missed ticks.
type scheduler struct {
	apis    []string
	secret  string
	tick    time.Duration
	logPath string
	hc      *http.Client
	paused  atomic.Bool

	mu       sync.Mutex
	logMu    sync.Mutex
	sweeps   int
	lastFail string
}

func newScheduler(apis []string, secret string, tick time.Duration, logPath string) *scheduler {
	return &scheduler{apis: apis, secret: secret, tick: tick, logPath: logPath, hc: &http.Client{Timeout: cronTimeout}}
}

// run materialises and sweeps at once, so a new stack shows work in its
// first seconds rather than after the first tick, then keeps the schedule
// until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		s.fail(fmt.Sprintf("open %s: %v", s.logPath, err))
		log = nil
	}
	defer log.Close()
	t := time.NewTicker(s.tick)
	defer t.Stop()
	for n := 0; ; n++ {
		if !s.paused.Load() {
			if n%MaterialiseEveryTicks == 0 {
				s.call(ctx, log, s.apis[0], "/cron/materialise")
			}
			var wg sync.WaitGroup
			for _, api := range s.apis {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.call(ctx, log, api, "/cron/sweep")
				}()
			}
			wg.Wait()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scheduler) call(ctx context.Context, log *os.File, api, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+path, nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+s.secret)
	start := time.Now()
	resp, err := s.hc.Do(req)
	line := map[string]any{"time": start.UTC().Format(time.RFC3339Nano), "call": api + path}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		line["error"] = err.Error()
		s.fail(fmt.Sprintf("POST %s: %v", path, err))
	} else {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		line["status"] = resp.StatusCode
		line["duration_ms"] = time.Since(start).Milliseconds()
		line["body"] = json.RawMessage(strings.TrimSpace(string(body)))
		if !json.Valid(body) {
			line["body"] = string(body)
		}
		if resp.StatusCode/100 != 2 {
			s.fail(fmt.Sprintf("POST %s: HTTP %d", path, resp.StatusCode))
		} else if path == "/cron/sweep" {
			s.mu.Lock()
			s.sweeps++
			s.lastFail = ""
			s.mu.Unlock()
		}
	}
	if log != nil {
		b, _ := json.Marshal(line)
		s.logMu.Lock()
		log.Write(append(b, '\n'))
		s.logMu.Unlock()
	}
}

func (s *scheduler) fail(msg string) {
	s.mu.Lock()
	s.lastFail = msg
	s.mu.Unlock()
}

// state returns the number of successful sweeps and the last failure, empty
// once a later sweep succeeded.
func (s *scheduler) state() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweeps, s.lastFail
}
