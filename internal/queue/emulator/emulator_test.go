package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/queuetest"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/wire"
	"github.com/owedhq/owed/internal/testdb"
)

const (
	testToken      = "emulator-test-token-7d2e"
	testFaultToken = "emulator-test-fault-token-41c9"
)

// syncBuffer collects log lines from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// bundle is what a test needs: a running emulator, its URL and a client.
type bundle struct {
	em     *emulator.Emulator
	srv    *httptest.Server
	client *rest.Client
	cfg    emulator.Config
	ctx    context.Context
}

// setup starts an emulator over HTTP on a fresh database. At the end it
// checks that no log line showed the token.
func setup(t *testing.T, dbURL string, change func(*emulator.Config)) *bundle {
	t.Helper()
	if dbURL == "" {
		dbURL = testdb.New(t).OwnerURL
	}
	cfg := emulator.DefaultConfig()
	cfg.Token, cfg.FaultToken = testToken, testFaultToken
	cfg.DatabaseURL = dbURL
	if change != nil {
		change(&cfg)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	t.Cleanup(cancel)
	em, err := emulator.Open(ctx, cfg, zerolog.New(logs).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatalf("emulator.Open: %v", err)
	}
	em.Start(ctx)
	srv := httptest.NewServer(em)
	t.Cleanup(func() {
		em.Drain()
		srv.Close()
		em.Stop()
		if strings.Contains(logs.String(), testToken) {
			t.Error("a log line shows the token")
		}
	})
	b := &bundle{em: em, srv: srv, cfg: cfg, ctx: ctx}
	b.client = b.clientFor(t, "test-"+strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	return b
}

// clientFor returns a client of the emulator working on queue name.
func (b *bundle) clientFor(t *testing.T, name string) *rest.Client {
	t.Helper()
	c, err := rest.New(rest.Config{URL: b.srv.URL, Token: testToken, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// request sends what the client would never send, with the token when
// authorized (the fault token for /admin/), and returns the answer's status
// and error message.
func (b *bundle) request(t *testing.T, method, path, body string, authorized bool) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authorized {
		token := testToken
		if strings.HasPrefix(path, "/admin/") {
			token = testFaultToken
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb wire.ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Error.Message
}

func TestContract(t *testing.T) {
	t.Parallel()
	b := setup(t, "", func(c *emulator.Config) { c.MaxReceives = queuetest.MaxReceives })
	queuetest.Run(t, b.srv.URL, testToken)
}

// TestContractHosted runs the suite against a real endpoint.
func TestContractHosted(t *testing.T) {
	u, tok := os.Getenv("OWED_QUEUE_CONTRACT_URL"), os.Getenv("OWED_QUEUE_CONTRACT_TOKEN")
	if u == "" || tok == "" {
		t.Skip("set OWED_QUEUE_CONTRACT_URL and OWED_QUEUE_CONTRACT_TOKEN to run the contract suite against a hosted queue: " +
			"OWED_QUEUE_CONTRACT_URL=https://queue.example.com OWED_QUEUE_CONTRACT_TOKEN=… go test -run TestContractHosted ./internal/queue/emulator")
	}
	queuetest.Run(t, u, tok)
}

func msg(key string) rest.Entry {
	return rest.Entry{Payload: json.RawMessage(`{"k":"` + key + `"}`), IdempotencyKey: key}
}

// TestDurableAcrossRestart stops an emulator and opens a new one on the same
// database: queued, in-flight, delayed and dead-lettered messages are all
// there, and the keys are still remembered.
func TestDurableAcrossRestart(t *testing.T) {
	t.Parallel()
	dbURL := testdb.New(t).OwnerURL
	first := setup(t, dbURL, nil)
	ctx, c := first.ctx, first.client
	res, err := c.PublishBatch(ctx, []rest.Entry{msg("a"), msg("b"), msg("c"), {Payload: json.RawMessage(`1`), IdempotencyKey: "later", Delay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Consume(ctx, rest.ConsumeOptions{MaxMessages: 2, VisibilityTimeout: time.Hour})
	if err != nil || len(got) != 2 {
		t.Fatalf("consume: %d, %v", len(got), err)
	}
	if _, err := c.Nack(ctx, got[1].MessageID, rest.NackOptions{DeadLetter: true, Reason: "bad"}); err != nil {
		t.Fatal(err)
	}
	// The first emulator goes away as a crashed one would: its in-memory
	// state (waiters, faults) is gone, only the database remains.
	first.srv.Close()
	first.em.Stop()

	second := setup(t, dbURL, nil)
	c2 := second.clientFor(t, c.Name())
	st, err := c2.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Visible != 1 || st.InFlight != 1 || st.Delayed != 1 || st.DeadLetterDepth != 1 {
		t.Fatalf("stats after restart: %+v, want one each of visible, in_flight, delayed, dead", st)
	}
	for i, m := range []rest.Entry{msg("a"), msg("b"), msg("c")} {
		r, err := c2.PublishOne(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Deduplicated || r.MessageID != res[i].MessageID {
			t.Fatalf("republish %s after restart: %+v, want deduplicated with %s", m.IdempotencyKey, r, res[i].MessageID)
		}
	}
	left, err := c2.Consume(ctx, rest.ConsumeOptions{MaxMessages: 10})
	if err != nil || len(left) != 1 || left[0].MessageID != res[2].MessageID {
		t.Fatalf("consume after restart: %+v, %v; want message c", left, err)
	}
}

// TestConcurrentConsumersNeverShare runs consumers in parallel, on two
// emulators over one database, and checks no message is handed out twice
// within its visibility timeout.
func TestConcurrentConsumersNeverShare(t *testing.T) {
	t.Parallel()
	dbURL := testdb.New(t).OwnerURL
	a := setup(t, dbURL, nil)
	b := setup(t, dbURL, nil)
	const n = 600
	msgs := make([]rest.Entry, n)
	for i := range msgs {
		msgs[i] = msg(fmt.Sprintf("m%d", i))
	}
	if _, err := a.client.PublishBatch(a.ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		c := a.client
		if w%2 == 1 {
			c = b.clientFor(t, a.client.Name())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := c.Consume(a.ctx, rest.ConsumeOptions{MaxMessages: 10, VisibilityTimeout: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				ids := make([]string, len(got))
				mu.Lock()
				for i, m := range got {
					seen[m.MessageID]++
					ids[i] = m.MessageID
				}
				mu.Unlock()
				if _, err := c.AckIDs(a.ctx, ids...); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("consumed %d distinct messages, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("message %s was handed out %d times", id, k)
		}
	}
}

func setFaults(t *testing.T, b *bundle, body string) {
	t.Helper()
	if status, _ := b.request(t, http.MethodPost, "/admin/faults", body, true); status != http.StatusOK {
		t.Fatalf("POST /admin/faults %s: HTTP %d", body, status)
	}
}

// TestFaultThrottle checks the injected 429/503 and that the client honours
// their Retry-After: with a deadline shorter than the wait it gives up at
// once with the typed error; with room it waits and succeeds.
func TestFaultThrottle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, faults string
		status       int
	}{
		{"429 seconds", `"throttle_status":429,"throttle_scope":"publish"`, 429},
		{"503 HTTP date", `"throttle_status":503,"throttle_scope":"all","retry_after_http_date":true`, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "", nil)
			throttle := func(retryAfter time.Duration) {
				setFaults(t, b, fmt.Sprintf(`{"throttle_rate":1,%s,"retry_after_seconds":%d}`, tc.faults, int(retryAfter/time.Second)))
			}
			// A Retry-After far beyond the deadline, and a deadline far
			// beyond any round trip: a client that waited, for the
			// Retry-After or until the deadline, returns only once its
			// context has ended.
			const deadline, retryAfter = 30 * time.Second, 2 * time.Minute
			throttle(retryAfter)
			ctx, cancel := context.WithTimeout(b.ctx, deadline)
			defer cancel()
			_, err := b.client.PublishOne(ctx, msg("t"))
			var ae *rest.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || !ae.Retryable || ae.RetryAfter < retryAfter-5*time.Second {
				t.Fatalf("publish under throttle: %v, want a retryable %d with a Retry-After of %s", err, tc.status, retryAfter)
			}
			if ctx.Err() != nil {
				t.Fatalf("publish under throttle returned only when its %s deadline ended (%v); a Retry-After "+
					"beyond the deadline should end the call at once", deadline, err)
			}
			if tc.status == 503 {
				if _, err := b.client.Stats(ctx); !errors.As(err, &ae) || ae.Status != 503 {
					t.Fatalf("stats with scope all: %v, want 503", err)
				}
			}
			// Lift the throttle once the client has been refused and is
			// waiting out its Retry-After: the retry then succeeds.
			throttle(time.Second)
			c, refused := b.watchedClient(t, tc.status)
			done := make(chan error, 1)
			go func() {
				_, err := c.PublishOne(b.ctx, msg("t"))
				done <- err
			}()
			select {
			case <-refused:
			case err := <-done:
				t.Fatalf("publish returned %v before it was refused", err)
			}
			setFaults(t, b, `{}`)
			if err := <-done; err != nil {
				t.Fatalf("publish after the throttle lifted: %v", err)
			}
		})
	}
}

// watchedClient is a client of b's emulator, on b's queue, through a server
// that closes refused the first time the emulator answers status.
func (b *bundle) watchedClient(t *testing.T, status int) (*rest.Client, <-chan struct{}) {
	t.Helper()
	refused := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusWriter{ResponseWriter: w}
		b.em.ServeHTTP(rec, r)
		if rec.status == status {
			once.Do(func() { close(refused) })
		}
	}))
	t.Cleanup(srv.Close)
	c, err := rest.New(rest.Config{URL: srv.URL, Token: testToken, Name: b.client.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return c, refused
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func TestFaultLatency(t *testing.T) {
	t.Parallel()
	b := setup(t, "", func(c *emulator.Config) { c.LatencyMS = 300 })
	start := time.Now()
	if _, err := b.client.Stats(b.ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("stats took %s with 300 ms of injected latency", d)
	}
	if f := b.em.Faults(); f.LatencyMS != 300 {
		t.Fatalf("faults from config: %+v", f)
	}
}

func TestFaultRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, "", nil)
	setFaults(t, b, `{"redelivery_rate":1}`)
	r, err := b.client.PublishOne(b.ctx, msg("twice"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		got, err := b.client.Consume(b.ctx, rest.ConsumeOptions{MaxMessages: 1, Wait: 5 * time.Second, VisibilityTimeout: time.Hour})
		if err != nil || len(got) != 1 || got[0].MessageID != r.MessageID || got[0].ReceiveCount != i {
			t.Fatalf("delivery %d within the visibility timeout: %+v, %v", i, got, err)
		}
	}
}

func TestFaultsRejectBadValues(t *testing.T) {
	t.Parallel()
	b := setup(t, "", nil)
	for body, field := range map[string]string{
		`{"throttle_rate":2}`:                         "throttle_rate",
		`{"throttle_rate":1,"throttle_status":500}`:   "throttle_status",
		`{"redelivery_rate":-1}`:                      "redelivery_rate",
		`{"throttle_rate":0.5,"throttle_scope":"ab"}`: "throttle_scope",
		`{"latency":5}`:                               "latency",
	} {
		status, message := b.request(t, http.MethodPost, "/admin/faults", body, true)
		if status != http.StatusBadRequest || !strings.Contains(message, field) {
			t.Errorf("faults %s: HTTP %d %q, want 400 naming %s", body, status, message, field)
		}
	}
	if status, _ := b.request(t, http.MethodGet, "/admin/faults", "", false); status != http.StatusUnauthorized {
		t.Fatalf("GET /admin/faults without the token: HTTP %d, want 401", status)
	}
}

// TestVisibilityExpiryDeadLetters checks that a message whose consumer
// keeps dying (no nack, the visibility timeout runs out) is dead-lettered
// after max_receives rather than delivered forever.
func TestVisibilityExpiryDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, "", func(c *emulator.Config) { c.MaxReceives = 2 })
	if _, err := b.client.PublishOne(b.ctx, msg("poison")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		got, err := b.client.Consume(b.ctx, rest.ConsumeOptions{MaxMessages: 1, Wait: 5 * time.Second, VisibilityTimeout: time.Second})
		if err != nil || len(got) != 1 {
			t.Fatalf("delivery %d: %d, %v", i+1, len(got), err)
		}
	}
	got, err := b.client.Consume(b.ctx, rest.ConsumeOptions{MaxMessages: 1, Wait: 3 * time.Second})
	if err != nil || len(got) != 0 {
		t.Fatalf("third delivery: %d, %v; want none", len(got), err)
	}
	page, err := b.client.ListDeadLetters(b.ctx, rest.DeadLetterQuery{})
	if err != nil || len(page.DeadLetters) != 1 || !strings.Contains(page.DeadLetters[0].LastError, "visibility timeout") {
		t.Fatalf("dead letters: %+v, %v", page, err)
	}
}

func TestRestrictedQueuesAndHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, "", func(c *emulator.Config) { c.Queues = []string{"only-this"} })
	_, err := b.client.Stats(b.ctx)
	var ae *rest.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("stats of an unlisted queue: %v, want 404", err)
	}
	if _, err := b.clientFor(t, "only-this").Stats(b.ctx); err != nil {
		t.Fatalf("stats of the listed queue: %v", err)
	}
	if status, _ := b.request(t, http.MethodGet, "/healthz", "", false); status != http.StatusOK {
		t.Fatalf("/healthz: HTTP %d", status)
	}
}

func TestConfigValidateNamesTheVariable(t *testing.T) {
	t.Parallel()
	for want, change := range map[string]func(*emulator.Config){
		"OWED_QUEUE_TOKEN":              func(c *emulator.Config) { c.Token = "" },
		"OWED_QUEUE_FAULT_TOKEN":        func(c *emulator.Config) { c.FaultToken = c.Token },
		"OWED_QUEUE_DATABASE_URL":       func(c *emulator.Config) { c.DatabaseURL = "" },
		"OWED_QUEUE_MAX_RECEIVES":       func(c *emulator.Config) { c.MaxReceives = 0 },
		"OWED_QUEUE_VISIBILITY_TIMEOUT": func(c *emulator.Config) { c.VisibilityTimeout = 13 * time.Hour },
		"OWED_QUEUE_QUEUES":             func(c *emulator.Config) { c.Queues = []string{"no spaces"} },
		"OWED_QUEUE_FAULT_THROTTLE_RATE": func(c *emulator.Config) {
			c.ThrottleRate = 3
		},
	} {
		cfg := emulator.DefaultConfig()
		cfg.Token, cfg.DatabaseURL = "t", "postgres://x/y"
		change(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want an error naming %s", err, want)
		}
	}
}

// TestDefaultConfigIsTheTags binds the two places the defaults are written:
// the envconfig tags `owedctl queue serve` reads and DefaultConfig, which
// code that builds a Config uses.
func TestDefaultConfigIsTheTags(t *testing.T) {
	t.Parallel()
	var fromTags emulator.Config
	// A prefix nobody sets, so only the tags' defaults apply.
	if err := envconfig.Process("OWED_DEFAULTS_TEST_UNSET", &fromTags); err != nil {
		t.Fatal(err)
	}
	if want := emulator.DefaultConfig(); !reflect.DeepEqual(fromTags, want) {
		t.Fatalf("envconfig defaults %+v differ from DefaultConfig() %+v", fromTags, want)
	}
}
