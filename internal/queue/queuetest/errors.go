package queuetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/wire"
)

// The contract on errors: unknown messages, limits, bad requests and
// authentication.

func testUnknownMessages(t *testing.T, s *suite) {
	_, err := s.c.Nack(s.ctx, "999999999999", rest.NackOptions{CountAsFailure: true})
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
	if _, err := s.c.PublishOne(s.ctx, rest.Entry{Payload: exact, IdempotencyKey: "exact"}); err != nil {
		t.Fatalf("a payload of exactly %d bytes: %v", wire.MaxPayloadBytes, err)
	}
	over := json.RawMessage(`"` + strings.Repeat("a", wire.MaxPayloadBytes-1) + `"`)
	_, err := s.c.PublishOne(s.ctx, rest.Entry{Payload: over, IdempotencyKey: "over"})
	if ae := apiError(t, err, http.StatusRequestEntityTooLarge); ae.Retryable {
		t.Fatal("a 413 is marked retryable")
	}
	res, err := s.c.PublishBatch(s.ctx, []rest.Entry{{Payload: over, IdempotencyKey: "over"}, {Payload: payload(1), IdempotencyKey: "small"}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != rest.StatusFailed || !strings.Contains(res[0].Reason, "payload") || res[1].Status != rest.StatusCreated {
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
	_, err := s.c.Consume(s.ctx, rest.ConsumeOptions{MaxMessages: wire.MaxConsumeMessages + 1})
	if ae := apiError(t, err, http.StatusBadRequest); !strings.Contains(ae.Message, "max_messages") {
		t.Fatalf("client error %q does not name max_messages", ae.Message)
	}
}

func testUnauthorized(t *testing.T, s *suite) {
	const wrong = "not-the-token-4f1c9a"
	bad, err := rest.New(rest.Config{URL: s.base, Token: wrong, Name: s.queue})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.PublishOne(s.ctx, rest.Entry{Payload: payload(1), IdempotencyKey: "k"})
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
