// Package queuetest is the contract suite of owed's REST queue
// (docs/queue-api.md). Run checks every rule of the contract through the
// real client against any endpoint: the emulator in its own tests, a hosted
// queue when OWED_QUEUE_CONTRACT_URL is set. Each subtest works on a queue
// of its own, named with a random suffix, so the suite can share a hosted
// endpoint with other users; it never touches other queues.
//
// This file holds Run and the helpers; the checks are grouped by what they
// cover: publish.go, delivery.go, deadletters.go and errors.go.
package queuetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/wire"
)

// MaxReceives is the server's max_receives the suite expects: the
// contract's default. The emulator's own default is far higher (owed's
// ledger decides dead letters), so its contract test sets this.
const MaxReceives = 5

// testTimeout bounds each subtest; the slowest waits out a visibility
// timeout or a nack delay of one second a few times.
const testTimeout = 45 * time.Second

// timerSlack is how early the server may end a wait, a visibility timeout
// or a delay: it measures them with its own timers, which may run a little
// short of the instant the suite took before the call.
const timerSlack = 100 * time.Millisecond

// suite is what every subtest needs: the endpoint and a client on a fresh
// queue.
type suite struct {
	base  string
	token string
	queue string
	c     *rest.Client
	ctx   context.Context
}

// Run checks the contract at baseURL with token, whose server dead-letters
// after MaxReceives counted failures. Subtests run in parallel.
func Run(t *testing.T, baseURL, token string) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"PublishConsumeAck", testPublishConsumeAck},
		{"DedupWithinWindow", testDedupWithinWindow},
		{"DedupAfterAck", testDedupAfterAck},
		{"DedupAfterDeadLetter", testDedupAfterDeadLetter},
		{"BatchPerMessageKeys", testBatchPerMessageKeys},
		{"BatchSplitByClient", testBatchSplit},
		{"BatchEntryFailure", testBatchEntryFailure},
		{"VisibilityTimeoutRedelivers", testVisibilityRedelivery},
		{"ExtendKeepsInvisible", testExtend},
		{"NackWithDelay", testNackDelay},
		{"UncountedNackNeverDeadLetters", testUncountedNack},
		{"DeadLetterAfterMaxReceives", testDeadLetterAfterMaxReceives},
		{"Redrive", testRedrive},
		{"DeleteDeadLetter", testDeleteDeadLetter},
		{"DeadLetterPaging", testDeadLetterPaging},
		{"LongPollReturnsEarly", testLongPoll},
		{"Stats", testStats},
		{"UnknownMessages", testUnknownMessages},
		{"PayloadLimit", testPayloadLimit},
		{"BadRequestsNameTheField", testBadRequests},
		{"Unauthorized", testUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newSuite(t, baseURL, token))
		})
	}
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9]+`)

func newSuite(t *testing.T, base, token string) *suite {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := strings.ToLower(nonName.ReplaceAllString(t.Name(), "-"))
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	q := "qt-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	c, err := rest.New(rest.Config{URL: base, Token: token, Name: q})
	if err != nil {
		t.Fatalf("rest.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return &suite{base: base, token: token, queue: q, c: c, ctx: ctx}
}

func payload(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func (s *suite) publish(t *testing.T, key string, body any) rest.PublishResponse {
	t.Helper()
	r, err := s.c.PublishOne(s.ctx, rest.Entry{Payload: payload(body), IdempotencyKey: key})
	if err != nil {
		t.Fatalf("publish %q: %v", key, err)
	}
	return r
}

// consume receives up to max messages, waiting up to wait.
func (s *suite) consume(t *testing.T, max int, wait, visibility time.Duration) []rest.Delivery {
	t.Helper()
	msgs, err := s.c.Consume(s.ctx, rest.ConsumeOptions{MaxMessages: max, Wait: wait, VisibilityTimeout: visibility})
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	return msgs
}

// consumeOne waits up to 10 s for exactly one message.
func (s *suite) consumeOne(t *testing.T, visibility time.Duration) rest.Delivery {
	t.Helper()
	msgs := s.consume(t, 1, 10*time.Second, visibility)
	if len(msgs) != 1 {
		t.Fatalf("consume: got %d messages, want 1", len(msgs))
	}
	return msgs[0]
}

func (s *suite) expectEmpty(t *testing.T, wait time.Duration) {
	t.Helper()
	if msgs := s.consume(t, 10, wait, time.Minute); len(msgs) != 0 {
		t.Fatalf("consume: got %d messages (first %s), want none", len(msgs), msgs[0].MessageID)
	}
}

func (s *suite) nack(t *testing.T, id string, o rest.NackOptions) bool {
	t.Helper()
	dead, err := s.c.Nack(s.ctx, id, o)
	if err != nil {
		t.Fatalf("nack %s: %v", id, err)
	}
	return dead
}

func (s *suite) stats(t *testing.T) queue.Stats {
	t.Helper()
	st, err := s.c.Stats(s.ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}

// apiError asserts err is an *rest.APIError with the given status.
func apiError(t *testing.T, err error, status int) *rest.APIError {
	t.Helper()
	var ae *rest.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got error %v, want *rest.APIError with status %d", err, status)
	}
	if ae.Status != status {
		t.Fatalf("got HTTP %d (%s: %s), want %d", ae.Status, ae.Code, ae.Message, status)
	}
	if ae.Code == "" || ae.Message == "" {
		t.Fatalf("error body lacks code or message: %+v", ae)
	}
	return ae
}

// raw sends a request the client would never build and returns the status
// and error body.
func (s *suite) raw(t *testing.T, method, path, token string, header http.Header, body string) (int, wire.ErrorDetail) {
	t.Helper()
	req, err := http.NewRequestWithContext(s.ctx, method, strings.TrimRight(s.base, "/")+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var eb wire.ErrorBody
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(buf.Bytes(), &eb); err != nil {
			t.Fatalf("%s %s: HTTP %d body is not {\"error\":…}: %q", method, path, resp.StatusCode, buf.String())
		}
	}
	return resp.StatusCode, eb.Error
}

// expect400 sends body to path and asserts a 400 whose message names field.
func (s *suite) expect400(t *testing.T, path, body, field string, header http.Header) {
	t.Helper()
	status, e := s.raw(t, http.MethodPost, path, s.token, header, body)
	if status != http.StatusBadRequest {
		t.Fatalf("POST %s %s: HTTP %d (%s), want 400", path, body, status, e.Message)
	}
	if !strings.Contains(e.Message, field) {
		t.Fatalf("POST %s %s: message %q does not name %q", path, body, e.Message, field)
	}
	if e.Retryable {
		t.Fatalf("POST %s: a 400 is marked retryable", path)
	}
}
