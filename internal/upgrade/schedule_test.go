package upgrade_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// scheduler schedules rows due now through the scheduling API of whichever
// sweepers are live, a small batch every tick, and calls their /cron/sweep
// now and then as the hosted cron would. A batch is retried, unchanged (the
// API is idempotent), until a sweeper answers it, so count is exactly the
// rows the ledger must end up delivering.
type scheduler struct {
	mu    sync.Mutex
	apis  []string
	next  int
	rows  int
	seq   int
	err   error
	quit  chan struct{}
	done  chan struct{}
	crons sync.WaitGroup
}

const (
	batchRows = 5
	tick      = 100 * time.Millisecond
	cronEvery = 10 // ticks
)

var client = &http.Client{Timeout: 2 * time.Minute}

// setAPIs names the live sweepers' base URLs (none: wait).
func (s *scheduler) setAPIs(urls ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apis = urls
}

func (s *scheduler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows
}

func (s *scheduler) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *scheduler) start() {
	s.quit, s.done = make(chan struct{}), make(chan struct{})
	go s.loop(s.quit, s.done)
}

// stop ends the loop after the batch under way is answered; t (nil in a
// cleanup) fails on a scheduling error.
func (s *scheduler) stop(t *testing.T) {
	if s.quit == nil {
		return
	}
	close(s.quit)
	<-s.done
	s.crons.Wait()
	s.quit = nil
	if err := s.failed(); t != nil && err != nil {
		t.Fatalf("scheduling: %v", err)
	}
}

func (s *scheduler) loop(quit, done chan struct{}) {
	defer close(done)
	for i := 1; ; i++ {
		if err := s.schedule(); err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
		if i%cronEvery == 0 {
			s.cron()
		}
		select {
		case <-quit:
			return
		case <-time.After(tick):
		}
	}
}

// api picks the next live sweeper, round robin.
func (s *scheduler) api() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.apis) == 0 {
		return ""
	}
	s.next++
	return s.apis[s.next%len(s.apis)]
}

type row struct {
	Recipient string            `json:"recipient"`
	Channel   string            `json:"channel"`
	Kind      string            `json:"kind"`
	RefID     string            `json:"ref_id"`
	DueAt     time.Time         `json:"due_at"`
	Payload   map[string]string `json:"payload"`
}

// schedule posts one batch until a sweeper takes it.
func (s *scheduler) schedule() error {
	due := time.Now().UTC()
	var batch []row
	for range batchRows {
		s.seq++
		batch = append(batch, row{Recipient: fmt.Sprintf("+1555%07d", s.seq), Channel: "sms", Kind: "upgrade",
			RefID: fmt.Sprintf("ref-%d", s.seq), DueAt: due, Payload: map[string]string{"text": "hello"}})
	}
	body, _ := json.Marshal(map[string]any{"tenant_id": tenantID, "notifications": batch})
	var last string
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); time.Sleep(tick) {
		api := s.api()
		if api == "" {
			last = "no sweeper is live"
			continue
		}
		req, _ := http.NewRequest(http.MethodPost, api+"/v1/notifications", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			// A sweeper stopping, or not yet listening.
			last = err.Error()
			continue
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			Data struct{ Created, Existing int }
		}
		if resp.StatusCode/100 != 2 || json.Unmarshal(answer, &got) != nil {
			last = fmt.Sprintf("HTTP %d %s", resp.StatusCode, answer)
			if resp.StatusCode/100 == 4 {
				return fmt.Errorf("POST %s/v1/notifications: %s", api, last)
			}
			continue
		}
		if got.Data.Created+got.Data.Existing != batchRows {
			return fmt.Errorf("POST %s/v1/notifications: %s, want %d rows", api, answer, batchRows)
		}
		s.mu.Lock()
		s.rows += batchRows
		s.mu.Unlock()
		return nil
	}
	return fmt.Errorf("no sweeper took a batch within %s: last %s", settle, last)
}

// cron calls /cron/sweep on every live sweeper, in the background; a failed
// call is the next one's work, as with the hosted cron.
func (s *scheduler) cron() {
	s.mu.Lock()
	apis := append([]string(nil), s.apis...)
	s.mu.Unlock()
	for _, api := range apis {
		s.crons.Add(1)
		go func() {
			defer s.crons.Done()
			req, _ := http.NewRequest(http.MethodPost, api+"/cron/sweep", nil)
			req.Header.Set("Authorization", "Bearer "+cronSecret)
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
}
