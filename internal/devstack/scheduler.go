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
	"time"
)

// cronTimeout bounds one /cron call. A sweep stops at its own budget
// (OWED_SWEEP_BUDGET, 50s) well before this.
const cronTimeout = 2 * time.Minute

// scheduler stands in for the hosted cron: it calls /cron/sweep every tick
// and /cron/materialise every MaterialiseEveryTicks ticks, one call at a
// time, and logs every answer to its log file.
type scheduler struct {
	api, secret string
	tick        time.Duration
	logPath     string
	hc          *http.Client

	mu       sync.Mutex
	sweeps   int
	lastFail string
}

func newScheduler(api, secret string, tick time.Duration, logPath string) *scheduler {
	return &scheduler{api: api, secret: secret, tick: tick, logPath: logPath, hc: &http.Client{Timeout: cronTimeout}}
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
		if n%MaterialiseEveryTicks == 0 {
			s.call(ctx, log, "/cron/materialise")
		}
		s.call(ctx, log, "/cron/sweep")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scheduler) call(ctx context.Context, log *os.File, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.api+path, nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+s.secret)
	start := time.Now()
	resp, err := s.hc.Do(req)
	line := map[string]any{"time": start.UTC().Format(time.RFC3339Nano), "call": path}
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
		log.Write(append(b, '\n'))
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
