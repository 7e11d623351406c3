// Package queuetest is the contract suite of owed's REST queue
// (docs/queue-api.md). Run checks every rule of the contract through the
// real client against any endpoint: the emulator in its own tests, a hosted
// queue when OWED_QUEUE_CONTRACT_URL is set. Each subtest works on a queue
// of its own, named with a random suffix, so the suite can share a hosted
// endpoint with other users; it never touches other queues.
package queuetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/wire"
)

// testTimeout bounds each subtest; the slowest waits out a visibility
// timeout or a nack delay of one second a few times.
const testTimeout = 45 * time.Second

// suite is what every subtest needs: the endpoint and a client on a fresh
// queue.
type suite struct {
	base  string
	token string
	queue string
	c     *queue.Client
	ctx   context.Context
}

// Run checks the contract at baseURL with token. Subtests run in parallel.
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
	c, err := queue.New(queue.Config{URL: base, Token: token, Name: q})
	if err != nil {
		t.Fatalf("queue.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return &suite{base: base, token: token, queue: q, c: c, ctx: ctx}
}

func payload(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func (s *suite) publish(t *testing.T, key string, body any) queue.PublishResult {
	t.Helper()
	r, err := s.c.Publish(s.ctx, queue.Message{Payload: payload(body), IdempotencyKey: key})
	if err != nil {
		t.Fatalf("publish %q: %v", key, err)
	}
	return r
}

// consume receives up to max messages, waiting up to wait.
func (s *suite) consume(t *testing.T, max int, wait, visibility time.Duration) []queue.Delivery {
	t.Helper()
	msgs, err := s.c.Consume(s.ctx, queue.ConsumeOptions{MaxMessages: max, Wait: wait, VisibilityTimeout: visibility})
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	return msgs
}

// consumeOne waits up to 10 s for exactly one message.
func (s *suite) consumeOne(t *testing.T, visibility time.Duration) queue.Delivery {
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

func (s *suite) nack(t *testing.T, id string, o queue.NackOptions) bool {
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

// apiError asserts err is an *queue.APIError with the given status.
func apiError(t *testing.T, err error, status int) *queue.APIError {
	t.Helper()
	var ae *queue.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got error %v, want *queue.APIError with status %d", err, status)
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

func testPublishConsumeAck(t *testing.T, s *suite) {
	before := time.Now().Add(-time.Minute)
	r := s.publish(t, "k1", map[string]any{"hello": "world", "n": 1})
	if r.MessageID == "" || r.Deduplicated {
		t.Fatalf("publish: got %+v, want a new message id", r)
	}
	m := s.consumeOne(t, time.Minute)
	if m.MessageID != r.MessageID || m.ReceiveCount != 1 || m.IdempotencyKey != "k1" {
		t.Fatalf("consume: got id=%s receive_count=%d key=%q, want id=%s 1 k1", m.MessageID, m.ReceiveCount, m.IdempotencyKey, r.MessageID)
	}
	if string(m.Payload) != `{"hello":"world","n":1}` {
		t.Fatalf("payload changed: %s", m.Payload)
	}
	if m.PublishedAt.Before(before) || m.PublishedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("published_at %s is not about now", m.PublishedAt)
	}
	if n, err := s.c.Ack(s.ctx, m.MessageID); err != nil || n != 1 {
		t.Fatalf("ack: got %d, %v; want 1, nil", n, err)
	}
	// Acking again, or an id that never existed, is not an error.
	if n, err := s.c.Ack(s.ctx, m.MessageID, "no-such-message", "999999999999"); err != nil || n != 0 {
		t.Fatalf("second ack: got %d, %v; want 0, nil", n, err)
	}
	if st := s.stats(t); st.Visible+st.InFlight+st.Delayed+st.DeadLetterDepth != 0 {
		t.Fatalf("stats after ack: %+v, want all zero", st)
	}
}

func testDedupWithinWindow(t *testing.T, s *suite) {
	first := s.publish(t, "same", "one")
	second := s.publish(t, "same", "two")
	if !second.Deduplicated || second.MessageID != first.MessageID {
		t.Fatalf("second publish: got %+v, want deduplicated with id %s", second, first.MessageID)
	}
	msgs := s.consume(t, 10, time.Second, time.Minute)
	if len(msgs) != 1 || string(msgs[0].Payload) != `"one"` {
		t.Fatalf("consume: got %d messages, want only the first one", len(msgs))
	}
}

func testDedupAfterAck(t *testing.T, s *suite) {
	first := s.publish(t, "acked", "one")
	m := s.consumeOne(t, time.Minute)
	if _, err := s.c.Ack(s.ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	again := s.publish(t, "acked", "one")
	if !again.Deduplicated || again.MessageID != first.MessageID {
		t.Fatalf("publish after ack: got %+v, want deduplicated with id %s", again, first.MessageID)
	}
	s.expectEmpty(t, time.Second)
}

func testDedupAfterDeadLetter(t *testing.T, s *suite) {
	first := s.publish(t, "dead", "one")
	m := s.consumeOne(t, time.Minute)
	if !s.nack(t, m.MessageID, queue.NackOptions{DeadLetter: true, Reason: "permanent: bad address"}) {
		t.Fatal("nack dead_letter:true did not dead-letter")
	}
	again := s.publish(t, "dead", "one")
	if !again.Deduplicated || again.MessageID != first.MessageID {
		t.Fatalf("publish after dead-letter: got %+v, want deduplicated with id %s", again, first.MessageID)
	}
	// Deleting the dead letter does not forget the key either.
	if n, err := s.c.DeleteDeadLetters(s.ctx, m.MessageID); err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	if again := s.publish(t, "dead", "one"); !again.Deduplicated {
		t.Fatalf("publish after delete: got %+v, want deduplicated", again)
	}
	s.expectEmpty(t, 0)
}

func testBatchPerMessageKeys(t *testing.T, s *suite) {
	res, err := s.c.PublishBatch(s.ctx, []queue.Message{
		{Payload: payload("a"), IdempotencyKey: "a"},
		{Payload: payload("b"), IdempotencyKey: "b"},
		{Payload: payload("a again"), IdempotencyKey: "a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != queue.StatusCreated || res[1].Status != queue.StatusCreated {
		t.Fatalf("first batch: %+v, want a and b created", res)
	}
	if res[2].Status != queue.StatusDeduplicated || res[2].MessageID != res[0].MessageID {
		t.Fatalf("a key repeated within a batch: %+v, want deduplicated with %s", res[2], res[0].MessageID)
	}
	res2, err := s.c.PublishBatch(s.ctx, []queue.Message{
		{Payload: payload("b"), IdempotencyKey: "b"},
		{Payload: payload("c"), IdempotencyKey: "c"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res2[0].Status != queue.StatusDeduplicated || res2[0].MessageID != res[1].MessageID {
		t.Fatalf("b in the second batch: %+v, want deduplicated with %s", res2[0], res[1].MessageID)
	}
	if res2[1].Status != queue.StatusCreated {
		t.Fatalf("c in the second batch: %+v, want created", res2[1])
	}
	msgs := s.consume(t, 10, time.Second, time.Minute)
	if len(msgs) != 3 {
		t.Fatalf("consume: got %d messages, want 3 (a, b, c)", len(msgs))
	}
}

func testBatchSplit(t *testing.T, s *suite) {
	const n = wire.MaxBatch + 50
	msgs := make([]queue.Message, n)
	for i := range msgs {
		msgs[i] = queue.Message{Payload: payload(i), IdempotencyKey: fmt.Sprintf("k%d", i)}
	}
	res, err := s.c.PublishBatch(s.ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != n {
		t.Fatalf("got %d results, want %d", len(res), n)
	}
	for i, r := range res {
		if r.Status != queue.StatusCreated {
			t.Fatalf("result %d: %+v, want created", i, r)
		}
	}
	if st := s.stats(t); st.Visible != n {
		t.Fatalf("stats: visible=%d, want %d", st.Visible, n)
	}
}

func testBatchEntryFailure(t *testing.T, s *suite) {
	res, err := s.c.PublishBatch(s.ctx, []queue.Message{
		{Payload: payload("ok"), IdempotencyKey: "ok"},
		{Payload: payload("no key")},
		{Payload: payload("late"), IdempotencyKey: "late", Delay: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != queue.StatusCreated || res[2].Status != queue.StatusCreated {
		t.Fatalf("valid entries: %+v, want created", res)
	}
	if res[1].Status != queue.StatusFailed || !strings.Contains(res[1].Reason, "idempotency_key") {
		t.Fatalf("entry without a key: %+v, want failed naming idempotency_key", res[1])
	}
	if st := s.stats(t); st.Visible != 1 || st.Delayed != 1 {
		t.Fatalf("stats: %+v, want visible=1 delayed=1", st)
	}
}

func testVisibilityRedelivery(t *testing.T, s *suite) {
	id := s.publish(t, "v", "v").MessageID
	m := s.consumeOne(t, time.Second)
	leased := time.Now()
	s.expectEmpty(t, 0)
	again := s.consumeOne(t, time.Minute)
	if again.MessageID != id || again.ReceiveCount != 2 {
		t.Fatalf("redelivery: got id=%s receive_count=%d, want %s and 2", again.MessageID, again.ReceiveCount, m.MessageID)
	}
	if d := time.Since(leased); d < 900*time.Millisecond {
		t.Fatalf("redelivered after %s, before the 1 s visibility timeout ran out", d)
	}
}

func testExtend(t *testing.T, s *suite) {
	s.publish(t, "x", "x")
	m := s.consumeOne(t, time.Second)
	until, err := s.c.Extend(s.ctx, m.MessageID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if until.Before(time.Now().Add(30 * time.Second)) {
		t.Fatalf("extend: visible_at %s, want about a minute from now", until)
	}
	// Without the extension the message would be back after one second.
	s.expectEmpty(t, 2*time.Second)
	if st := s.stats(t); st.InFlight != 1 {
		t.Fatalf("stats: %+v, want in_flight=1", st)
	}
}

func testNackDelay(t *testing.T, s *suite) {
	s.publish(t, "n", "n")
	m := s.consumeOne(t, time.Minute)
	if s.nack(t, m.MessageID, queue.NackOptions{Delay: time.Second, CountAsFailure: true, Reason: "provider 500"}) {
		t.Fatal("first counted nack dead-lettered")
	}
	nacked := time.Now()
	if st := s.stats(t); st.Delayed != 1 || st.InFlight != 0 {
		t.Fatalf("stats after nack: %+v, want delayed=1", st)
	}
	s.expectEmpty(t, 0)
	again := s.consumeOne(t, time.Minute)
	if again.MessageID != m.MessageID || again.ReceiveCount != 2 {
		t.Fatalf("after nack: got %s receive_count=%d, want %s and 2", again.MessageID, again.ReceiveCount, m.MessageID)
	}
	if d := time.Since(nacked); d < 900*time.Millisecond {
		t.Fatalf("returned after %s, before its 1 s delay", d)
	}
}

func testUncountedNack(t *testing.T, s *suite) {
	s.publish(t, "u", "u")
	const throttled = 8 // more than the default max_receives of 5
	for i := 0; i < throttled; i++ {
		m := s.consumeOne(t, time.Minute)
		if s.nack(t, m.MessageID, queue.NackOptions{CountAsFailure: false, Reason: "provider 429"}) {
			t.Fatalf("uncounted nack %d dead-lettered the message", i+1)
		}
	}
	if st := s.stats(t); st.DeadLetterDepth != 0 || st.Visible != 1 {
		t.Fatalf("stats after %d uncounted nacks: %+v, want visible=1 dead=0", throttled, st)
	}
	// Counted failures still dead-letter it, after max_receives of them.
	for i := 1; ; i++ {
		m := s.consumeOne(t, time.Minute)
		if s.nack(t, m.MessageID, queue.NackOptions{CountAsFailure: true, Reason: "provider 500"}) {
			if i != 5 {
				t.Fatalf("dead-lettered after %d counted failures, want 5", i)
			}
			return
		}
		if i > 10 {
			t.Fatal("never dead-lettered")
		}
	}
}

func testDeadLetterAfterMaxReceives(t *testing.T, s *suite) {
	id := s.publish(t, "d", map[string]string{"to": "x"}).MessageID
	for i := 1; i <= 5; i++ {
		m := s.consumeOne(t, time.Minute)
		if m.ReceiveCount != i {
			t.Fatalf("delivery %d: receive_count=%d", i, m.ReceiveCount)
		}
		dead := s.nack(t, m.MessageID, queue.NackOptions{CountAsFailure: true, Reason: fmt.Sprintf("boom %d", i)})
		if dead != (i == 5) {
			t.Fatalf("counted nack %d: dead_lettered=%v, want %v", i, dead, i == 5)
		}
	}
	s.expectEmpty(t, 0)
	page, err := s.c.DeadLetters(s.ctx, queue.DeadLetterQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.DeadLetters) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(page.DeadLetters))
	}
	d := page.DeadLetters[0]
	if d.MessageID != id || d.ReceiveCount != 5 || d.LastError != "boom 5" || d.IdempotencyKey != "d" ||
		string(d.Payload) != `{"to":"x"}` || d.DeadLetteredAt.IsZero() {
		t.Fatalf("dead letter: %+v", d)
	}
	if st := s.stats(t); st.DeadLetterDepth != 1 || st.Visible+st.InFlight+st.Delayed != 0 {
		t.Fatalf("stats: %+v, want only dead_letter_depth=1", st)
	}
}

// deadLetter publishes a message and dead-letters it at once.
func (s *suite) deadLetter(t *testing.T, key string) string {
	t.Helper()
	s.publish(t, key, key)
	m := s.consumeOne(t, time.Minute)
	if !s.nack(t, m.MessageID, queue.NackOptions{DeadLetter: true, Reason: "test " + key}) {
		t.Fatalf("dead_letter nack of %s did not dead-letter", key)
	}
	return m.MessageID
}

func testRedrive(t *testing.T, s *suite) {
	id1 := s.deadLetter(t, "r1")
	id2 := s.deadLetter(t, "r2")
	if n, err := s.c.Redrive(s.ctx, id1); err != nil || n != 1 {
		t.Fatalf("redrive %s: %d, %v", id1, n, err)
	}
	m := s.consumeOne(t, time.Minute)
	if m.MessageID != id1 || m.ReceiveCount != 1 {
		t.Fatalf("after redrive: got %s receive_count=%d, want %s with the count reset to 1", m.MessageID, m.ReceiveCount, id1)
	}
	if n, err := s.c.RedriveAll(s.ctx); err != nil || n != 1 {
		t.Fatalf("redrive all: %d, %v; want 1", n, err)
	}
	if m := s.consumeOne(t, time.Minute); m.MessageID != id2 || m.ReceiveCount != 1 {
		t.Fatalf("after redrive all: got %s receive_count=%d, want %s and 1", m.MessageID, m.ReceiveCount, id2)
	}
	if st := s.stats(t); st.DeadLetterDepth != 0 {
		t.Fatalf("stats: %+v, want no dead letters", st)
	}
}

func testDeleteDeadLetter(t *testing.T, s *suite) {
	id := s.deadLetter(t, "del")
	d, err := s.c.DeadLetter(s.ctx, id)
	if err != nil || d.MessageID != id || d.LastError != "test del" {
		t.Fatalf("dead letter %s: %+v, %v", id, d, err)
	}
	if n, err := s.c.DeleteDeadLetters(s.ctx, id); err != nil || n != 1 {
		t.Fatalf("delete: %d, %v", n, err)
	}
	_, err = s.c.DeadLetter(s.ctx, id)
	apiError(t, err, http.StatusNotFound)
	if n, err := s.c.DeleteDeadLetters(s.ctx, id); err != nil || n != 0 {
		t.Fatalf("second delete: %d, %v; want 0, nil", n, err)
	}
}

func testDeadLetterPaging(t *testing.T, s *suite) {
	ids := []string{s.deadLetter(t, "p1"), s.deadLetter(t, "p2"), s.deadLetter(t, "p3")}
	page, err := s.c.DeadLetters(s.ctx, queue.DeadLetterQuery{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.DeadLetters) != 2 || page.NextCursor == "" {
		t.Fatalf("first page: %d letters, cursor %q; want 2 and a cursor", len(page.DeadLetters), page.NextCursor)
	}
	next, err := s.c.DeadLetters(s.ctx, queue.DeadLetterQuery{Limit: 2, Cursor: page.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.DeadLetters) != 1 || next.NextCursor != "" {
		t.Fatalf("second page: %d letters, cursor %q; want 1 and none", len(next.DeadLetters), next.NextCursor)
	}
	seen := map[string]bool{}
	for _, d := range append(page.DeadLetters, next.DeadLetters...) {
		seen[d.MessageID] = true
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("paging lost %s", id)
		}
	}
	only, err := s.c.DeadLetters(s.ctx, queue.DeadLetterQuery{IDs: []string{ids[1]}})
	if err != nil || len(only.DeadLetters) != 1 || only.DeadLetters[0].MessageID != ids[1] {
		t.Fatalf("ids filter: %+v, %v", only, err)
	}
}

func testLongPoll(t *testing.T, s *suite) {
	start := time.Now()
	s.expectEmpty(t, time.Second)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("an empty 1 s long poll returned after %s", d)
	}
	type result struct {
		msgs []queue.Delivery
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		t0 := time.Now()
		msgs, err := s.c.Consume(s.ctx, queue.ConsumeOptions{MaxMessages: 1, Wait: 15 * time.Second, VisibilityTimeout: time.Minute})
		done <- result{msgs, err, time.Since(t0)}
	}()
	<-started
	// The publish may land before or during the wait; either way the
	// consume must answer well before its 15 s are up.
	time.Sleep(300 * time.Millisecond)
	s.publish(t, "lp", "lp")
	r := <-done
	if r.err != nil || len(r.msgs) != 1 {
		t.Fatalf("long poll: %d messages, %v", len(r.msgs), r.err)
	}
	if r.took > 5*time.Second {
		t.Fatalf("long poll answered after %s, want soon after the publish", r.took)
	}
}

func testStats(t *testing.T, s *suite) {
	s.publish(t, "now", "now")
	if _, err := s.c.Publish(s.ctx, queue.Message{Payload: payload("later"), IdempotencyKey: "later", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	s.publish(t, "third", "third")
	s.consumeOne(t, time.Minute)
	st := s.stats(t)
	if st.Visible != 1 || st.InFlight != 1 || st.Delayed != 1 || st.DeadLetterDepth != 0 {
		t.Fatalf("stats: %+v, want visible=1 in_flight=1 delayed=1", st)
	}
	if st.OldestAgeSeconds < 0 || st.OldestAgeSeconds > 60 {
		t.Fatalf("oldest_age_seconds=%v, want a few seconds at most", st.OldestAgeSeconds)
	}
}

func testUnknownMessages(t *testing.T, s *suite) {
	_, err := s.c.Nack(s.ctx, "999999999999", queue.NackOptions{CountAsFailure: true})
	apiError(t, err, http.StatusNotFound)
	_, err = s.c.Extend(s.ctx, "999999999999", time.Minute)
	apiError(t, err, http.StatusNotFound)
	if n, err := s.c.Redrive(s.ctx, "999999999999"); err != nil || n != 0 {
		t.Fatalf("redrive of an unknown id: %d, %v; want 0, nil", n, err)
	}
}

func testPayloadLimit(t *testing.T, s *suite) {
	// A JSON string of exactly the limit: two quotes and the rest letters.
	exact := json.RawMessage(`"` + strings.Repeat("a", wire.MaxPayloadBytes-2) + `"`)
	if _, err := s.c.Publish(s.ctx, queue.Message{Payload: exact, IdempotencyKey: "exact"}); err != nil {
		t.Fatalf("a payload of exactly %d bytes: %v", wire.MaxPayloadBytes, err)
	}
	over := json.RawMessage(`"` + strings.Repeat("a", wire.MaxPayloadBytes-1) + `"`)
	_, err := s.c.Publish(s.ctx, queue.Message{Payload: over, IdempotencyKey: "over"})
	if ae := apiError(t, err, http.StatusRequestEntityTooLarge); ae.Retryable {
		t.Fatal("a 413 is marked retryable")
	}
	res, err := s.c.PublishBatch(s.ctx, []queue.Message{{Payload: over, IdempotencyKey: "over"}, {Payload: payload(1), IdempotencyKey: "small"}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != queue.StatusFailed || !strings.Contains(res[0].Reason, "payload") || res[1].Status != queue.StatusCreated {
		t.Fatalf("batch with an oversize entry: %+v, want it failed naming payload and the other created", res)
	}
}

func testBadRequests(t *testing.T, s *suite) {
	q := fmt.Sprintf("%q", s.queue)
	key := http.Header{wire.IdempotencyKeyHeader: {"k"}}
	s.expect400(t, "/queue/publish", `{"payload":1}`, "queue", key)
	s.expect400(t, "/queue/publish", `{"queue":"bad name!","payload":1}`, "queue", key)
	s.expect400(t, "/queue/publish", `{"queue":`+q+`,"payload":1}`, wire.IdempotencyKeyHeader, nil)
	s.expect400(t, "/queue/publish", `{"queue":`+q+`}`, "payload", key)
	s.expect400(t, "/queue/publish", `{"queue":`+q+`,"payload":1,"colour":"red"}`, "colour", key)
	s.expect400(t, "/queue/publish", `{"queue":`+q+`,"payload":1,"delay_seconds":"soon"}`, "delay_seconds", key)
	s.expect400(t, "/queue/publish", `{"queue":`+q+`,"payload":1,"delay_seconds":-1}`, "delay_seconds", key)
	s.expect400(t, "/queue/publish", `{"queue":`+q+`,"payload":`, "request body", key)

	entries := make([]string, wire.MaxBatch+1)
	for i := range entries {
		entries[i] = fmt.Sprintf(`{"payload":%d,"idempotency_key":"k%d"}`, i, i)
	}
	s.expect400(t, "/queue/publish_batch", `{"queue":`+q+`,"messages":[`+strings.Join(entries, ",")+`]}`, "messages", nil)
	s.expect400(t, "/queue/publish_batch", `{"queue":`+q+`,"messages":[]}`, "messages", nil)
	s.expect400(t, "/queue/publish_batch", `{"queue":`+q+`,"messages":[{"payload":1,"idempotency_key":"a","priority":9}]}`, "priority", nil)

	s.expect400(t, "/queue/consume", `{"queue":`+q+`,"max_messages":11}`, "max_messages", nil)
	s.expect400(t, "/queue/consume", `{"queue":`+q+`,"wait_seconds":21}`, "wait_seconds", nil)
	s.expect400(t, "/queue/consume", fmt.Sprintf(`{"queue":%s,"visibility_timeout_seconds":%d}`, q, wire.MaxVisibilitySeconds+1), "visibility_timeout_seconds", nil)
	s.expect400(t, "/queue/ack", `{"queue":`+q+`}`, "message_ids", nil)
	s.expect400(t, "/queue/nack", `{"queue":`+q+`,"message_id":"1","delay_seconds":0}`, "count_as_failure", nil)
	s.expect400(t, "/queue/nack", `{"queue":`+q+`,"message_id":"1","dead_letter":true}`, "reason", nil)
	s.expect400(t, "/queue/extend", `{"queue":`+q+`,"message_id":"1","visibility_timeout_seconds":0}`, "visibility_timeout_seconds", nil)
	s.expect400(t, "/queue/dead_letters/redrive", `{"queue":`+q+`}`, "message_ids", nil)

	// The client's own checks come from the server too: a 400 is an
	// *APIError carrying the server's message.
	_, err := s.c.Consume(s.ctx, queue.ConsumeOptions{MaxMessages: wire.MaxConsumeMessages + 1})
	if ae := apiError(t, err, http.StatusBadRequest); !strings.Contains(ae.Message, "max_messages") {
		t.Fatalf("client error %q does not name max_messages", ae.Message)
	}
}

func testUnauthorized(t *testing.T, s *suite) {
	const wrong = "not-the-token-4f1c9a"
	bad, err := queue.New(queue.Config{URL: s.base, Token: wrong, Name: s.queue})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Publish(s.ctx, queue.Message{Payload: payload(1), IdempotencyKey: "k"})
	apiError(t, err, http.StatusUnauthorized)
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), s.token) {
		t.Fatalf("error %q shows a token", err)
	}
	_, err = bad.Stats(s.ctx)
	apiError(t, err, http.StatusUnauthorized)
	if status, _ := s.raw(t, http.MethodPost, "/queue/consume", "", nil, `{"queue":"q"}`); status != http.StatusUnauthorized {
		t.Fatalf("consume without a token: HTTP %d, want 401", status)
	}
	// Nothing was published by the rejected request.
	if st := s.stats(t); st.Visible != 0 {
		t.Fatalf("stats: %+v, want an empty queue", st)
	}
}
