package rest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/owedhq/owed/internal/queue/wire"
)

const secret = "s3cret-token-do-not-print"

// fakeQueue answers with the given handlers in turn, the last one repeating.
func fakeQueue(t *testing.T, steps ...http.HandlerFunc) (*Client, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			t.Errorf("request without the bearer token")
		}
		n := int(calls.Add(1)) - 1
		steps[min(n, len(steps)-1)](w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{URL: srv.URL, Token: secret, Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	return c, &calls
}

func reply(status int, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}
}

const okStats = `{"data":{"visible":3,"in_flight":1,"delayed":0,"dead_letter_depth":2,"oldest_age_seconds":1.5}}`

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	c, calls := fakeQueue(t,
		reply(429, `{"error":{"code":"throttled","message":"slow down","retryable":true}}`, "Retry-After", "1"),
		reply(200, okStats))
	start := time.Now()
	st, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Visible != 3 || st.DeadLetterDepth != 2 {
		t.Fatalf("stats: %+v", st)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("retried after %s, before the 1 s Retry-After", d)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2", calls.Load())
	}
}

func TestRetryAfterBeyondDeadlineReturnsAtOnce(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	c, calls := fakeQueue(t, reply(503, `{"error":{"code":"unavailable","message":"maintenance","retryable":true}}`, "Retry-After", date))
	// The deadline never ends the call by itself: had the client started
	// waiting out the Retry-After, it would have called again after it.
	err := stopsForDeadline(t, 20*time.Second, func(ctx context.Context) error {
		_, err := c.Stats(ctx)
		return err
	})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Code != "unavailable" || !ae.Retryable || ae.RetryAfter < 25*time.Second {
		t.Fatalf("got %v, want the 503 with its Retry-After", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls; a wait past the deadline should return at once, without waiting", calls.Load())
	}
}

// stopsForDeadline runs call with a context whose deadline is d from
// now but which never ends, and returns what call returned. call can only
// stop because the client read the deadline and chose not to wait past it,
// never because the context fired, however slowly the machine runs. A
// client that kept waiting would never return: the test fails once call has
// run for the client's whole retry budget.
func stopsForDeadline(t *testing.T, d time.Duration, call func(context.Context) error) error {
	t.Helper()
	ctx := deadlineCtx{Context: context.Background(), deadline: time.Now().Add(d)}
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(retryBudget):
		t.Fatalf("still calling %s after a %s deadline", retryBudget, d)
		return nil
	}
}

type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func TestServerErrorsBackOff(t *testing.T) {
	t.Parallel()
	c, calls := fakeQueue(t,
		reply(500, `{"error":{"code":"internal","message":"oops","retryable":true}}`),
		reply(502, `<html>bad gateway</html>`),
		reply(200, okStats))
	if _, err := c.Stats(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d calls, want 3", calls.Load())
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	c, calls := fakeQueue(t, reply(400, `{"error":{"code":"invalid_request","message":"max_messages: 11 is out of range","retryable":false}}`))
	_, err := c.Consume(context.Background(), ConsumeOptions{MaxMessages: 11})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_request" || !strings.Contains(ae.Message, "max_messages") {
		t.Fatalf("got %v, want the typed 400", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d calls, want 1", calls.Load())
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatal("the error shows the token")
	}
}

func TestNetworkErrorsRetryWithinDeadline(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // Nothing listens any more: every attempt is refused.
	c, err := New(Config{URL: url, Token: secret, Name: "q"})
	if err != nil {
		t.Fatal(err)
	}
	// The call returns only if the client stops retrying when its next
	// wait would pass the deadline.
	err = stopsForDeadline(t, 700*time.Millisecond, func(ctx context.Context) error { return c.Ack(ctx, "1#1") })
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("got %v, want a network error without the token", err)
	}
}

func TestPublishBatchSplits(t *testing.T) {
	t.Parallel()
	var sizes []int
	c, _ := fakeQueue(t, func(w http.ResponseWriter, r *http.Request) {
		var req wire.PublishBatchRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Error(err)
		}
		sizes = append(sizes, len(req.Messages))
		out := wire.PublishBatchResponse{Results: make([]wire.BatchResult, len(req.Messages))}
		for i := range out.Results {
			out.Results[i] = wire.BatchResult{Status: StatusCreated, MessageID: req.Messages[i].IdempotencyKey}
		}
		json.NewEncoder(w).Encode(wire.Data[wire.PublishBatchResponse]{Data: out})
	})
	msgs := make([]Entry, 250)
	for i := range msgs {
		msgs[i] = Entry{Payload: json.RawMessage(`1`), IdempotencyKey: string(rune('a'+i%26)) + "-" + time.Duration(i).String(), Delay: 1500 * time.Millisecond}
	}
	res, err := c.PublishBatch(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 250 || res[249].MessageID != msgs[249].IdempotencyKey {
		t.Fatalf("got %d results, the last %+v", len(res), res[len(res)-1])
	}
	if len(sizes) != 3 || sizes[0] != 100 || sizes[1] != 100 || sizes[2] != 50 {
		t.Fatalf("request sizes %v, want 100 100 50", sizes)
	}
}

func TestNackAlwaysSaysWhetherItCounts(t *testing.T) {
	t.Parallel()
	var bodies []string
	c, _ := fakeQueue(t, func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		json.NewDecoder(r.Body).Decode(&m)
		b, _ := json.Marshal(m)
		bodies = append(bodies, string(b))
		w.Write([]byte(`{"data":{"dead_lettered":false}}`))
	})
	ctx := context.Background()
	c.Nack(ctx, "7", NackOptions{Delay: 1500 * time.Millisecond})
	c.Nack(ctx, "7", NackOptions{DeadLetter: true, Reason: "gone"})
	want := []string{
		`{"count_as_failure":false,"delay_seconds":2,"message_id":"7","queue":"q"}`,
		`{"dead_letter":true,"delay_seconds":0,"message_id":"7","queue":"q","reason":"gone"}`,
	}
	for i := range want {
		if bodies[i] != want[i] {
			t.Errorf("nack %d body %s, want %s", i, bodies[i], want[i])
		}
	}
}

func TestConfig(t *testing.T) {
	var cfg struct {
		Config
		Other string `envconfig:"OTHER"`
	}
	t.Setenv("OWED_QUEUE_URL", "http://127.0.0.1:8181")
	t.Setenv("OWED_QUEUE_TOKEN", secret)
	if err := envconfig.Process("OWED", &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.URL != "http://127.0.0.1:8181" || cfg.Token != secret || cfg.Name != DefaultQueueName {
		t.Fatalf("envconfig: %+v", cfg.Config)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for want, bad := range map[string]Config{
		"OWED_QUEUE_URL":   {URL: "queue.example.com", Token: "t", Name: "q"},
		"OWED_QUEUE_TOKEN": {URL: "http://x", Name: "q"},
		"OWED_QUEUE_NAME":  {URL: "http://x", Token: "t", Name: "with space"},
	} {
		err := bad.Validate()
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), secret) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", bad, err, want)
		}
	}
}
