package emulator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/wire"
)

// Request body limits. A publish_batch may carry MaxBatch full payloads; the
// slack covers keys, field names and escaping.
const (
	publishBodyLimit = wire.MaxPayloadBytes + 16<<10
	batchBodyLimit   = wire.MaxBatch * (wire.MaxPayloadBytes + 1<<10)
	smallBodyLimit   = 1 << 20
)

// Error codes, as in docs/queue-api.md.
const (
	codeInvalid     = wire.CodeInvalidRequest
	codeTooLarge    = wire.CodePayloadTooLarge
	codeUnauth      = wire.CodeUnauthorized
	codeNotFound    = wire.CodeNotFound
	codeMethod      = wire.CodeMethodNotAllow
	codeThrottled   = wire.CodeThrottled
	codeUnavailable = wire.CodeUnavailable
	codeInternal    = wire.CodeInternal
)

// apiError is an error answered to the client as {"error": {…}}.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

// invalid is a 400 whose message starts with the offending field.
func invalid(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeInvalid, msg: field + ": " + fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{status: http.StatusNotFound, code: codeNotFound, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	retryable := e.status == http.StatusTooManyRequests || e.status >= 500
	writeJSON(w, e.status, wire.ErrorBody{Error: wire.ErrorDetail{Code: e.code, Message: e.msg, Retryable: retryable}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encode response","retryable":true}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// handlerFunc serves one endpoint and returns the value for {"data": …}. An
// *apiError is answered as is; any other error is a logged 500.
type handlerFunc func(r *http.Request) (any, error)

func (e *Emulator) routes() {
	m := http.NewServeMux()
	m.HandleFunc("/healthz", e.healthz)
	m.Handle("/queue/publish", e.endpoint(http.MethodPost, true, e.publish))
	m.Handle("/queue/publish_batch", e.endpoint(http.MethodPost, true, e.publishBatch))
	m.Handle("/queue/consume", e.endpoint(http.MethodPost, false, e.consume))
	m.Handle("/queue/ack", e.endpoint(http.MethodPost, false, e.ack))
	m.Handle("/queue/nack", e.endpoint(http.MethodPost, false, e.nack))
	m.Handle("/queue/extend", e.endpoint(http.MethodPost, false, e.extend))
	m.Handle("/queue/dead_letters", e.endpoint(http.MethodGet, false, e.deadLetters))
	m.Handle("/queue/dead_letters/{id}", e.endpoint(http.MethodGet, false, e.deadLetter))
	m.Handle("/queue/dead_letters/redrive", e.endpoint(http.MethodPost, false, e.redrive))
	m.Handle("/queue/dead_letters/delete", e.endpoint(http.MethodPost, false, e.deleteDeadLetters))
	m.Handle("/queue/stats", e.endpoint(http.MethodGet, false, e.stats))
	m.Handle("/admin/faults", e.authorized(http.HandlerFunc(e.adminFaults)))
	m.Handle("/", e.authorized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("no endpoint %s %s; see docs/queue-api.md", r.Method, r.URL.Path))
	})))
	e.mux = m
}

// ServeHTTP serves the contract.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.mux.ServeHTTP(w, r) }

// authorized lets through requests carrying the bearer token. Both sides are
// hashed first so the comparison takes the same time whatever the length.
func (e *Emulator) authorized(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(token))
		if !ok || subtle.ConstantTimeCompare(sum[:], e.tokenHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="owed-queue"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, code: codeUnauth, msg: "missing or wrong bearer token in the Authorization header"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// endpoint wraps h with the method check, authentication, fault injection
// and one debug log line per request.
func (e *Emulator) endpoint(method string, publish bool, h handlerFunc) http.Handler {
	return e.authorized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: codeMethod, msg: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method)})
			return
		}
		f := e.faults.Load()
		f.delay(r.Context())
		if f.throttle(w, publish) {
			e.log.Debug().Str("path", r.URL.Path).Int("status", f.ThrottleStatus).Msg("queue emulator: injected throttle")
			return
		}
		data, err := h(r)
		status := http.StatusOK
		var ae *apiError
		switch {
		case err == nil:
			writeJSON(w, status, wire.Data[any]{Data: data})
		case errors.As(err, &ae):
			status = ae.status
			writeError(w, ae)
		case r.Context().Err() != nil:
			// The client went away; nobody reads an answer.
			status = 499
		default:
			status = http.StatusInternalServerError
			e.log.Error().Err(err).Str("path", r.URL.Path).Msg("queue emulator: request failed")
			writeError(w, &apiError{status: status, code: codeInternal, msg: "internal error; try again"})
		}
		e.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", status).
			Int64("duration_ms", time.Since(start).Milliseconds()).Msg("queue emulator: request")
	}))
}

func (e *Emulator) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := e.db.PingContext(ctx); err != nil {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, msg: "database unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, wire.Data[map[string]string]{Data: map[string]string{"status": "ok"}})
}

// decodeJSON reads exactly one JSON object into v, rejecting unknown fields
// and trailing data. Errors name the field where the decoder can tell.
func decodeJSON(body io.Reader, v any) *apiError {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return invalid("request body", "has data after the JSON object; send exactly one object")
		}
		return nil
	}
	var maxErr *http.MaxBytesError
	var synErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return &apiError{status: http.StatusRequestEntityTooLarge, code: codeTooLarge,
			msg: fmt.Sprintf("request body exceeds %d bytes", maxErr.Limit)}
	case errors.Is(err, io.EOF):
		return invalid("request body", "is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("request body", "ends in the middle of the JSON")
	case errors.As(err, &synErr):
		return invalid("request body", "is not valid JSON at byte %d: %s", synErr.Offset, synErr.Error())
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "request body"
		}
		return invalid(field, "want a JSON %s, got %s", typeErr.Type.Kind(), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalid(strings.TrimPrefix(err.Error(), "json: unknown field "), "is not a field of this request")
	}
	return invalid("request body", "%s", err.Error())
}

func (e *Emulator) decode(r *http.Request, limit int64, v any) *apiError {
	return decodeJSON(http.MaxBytesReader(nil, r.Body, limit), v)
}

// checkQueue accepts a valid name, and only a listed one when the emulator
// was started with a queue list.
func (e *Emulator) checkQueue(name string) *apiError {
	if name == "" {
		return invalid("queue", "is required")
	}
	if !queue.ValidQueueName(name) {
		return invalid("queue", "%q is not a queue name; want 1-80 letters, digits, '-' or '_'", name)
	}
	if e.queues != nil && !e.queues[name] {
		return notFound("queue %q does not exist on this emulator (started with OWED_QUEUE_QUEUES)", name)
	}
	return nil
}

func checkRange(field string, v, lo, hi int) *apiError {
	if v < lo || v > hi {
		return invalid(field, "%d is out of range; want %d..%d", v, lo, hi)
	}
	return nil
}

// checkEntry validates one message to publish. A failure is returned with
// the status a single publish answers (400 or 413).
func checkEntry(payload json.RawMessage, key string, delay int, keyField string) (publishEntry, *apiError) {
	switch {
	case len(payload) == 0 || string(payload) == "null":
		return publishEntry{}, invalid("payload", "is required; any JSON value but null")
	case len(payload) > wire.MaxPayloadBytes:
		return publishEntry{}, &apiError{status: http.StatusRequestEntityTooLarge, code: codeTooLarge,
			msg: fmt.Sprintf("payload: is %d bytes; the limit is %d bytes", len(payload), wire.MaxPayloadBytes)}
	case key == "":
		return publishEntry{}, invalid(keyField, "is required")
	case len(key) > wire.MaxIdempotencyKeyBytes:
		return publishEntry{}, invalid(keyField, "is %d bytes; the limit is %d", len(key), wire.MaxIdempotencyKeyBytes)
	case !utf8.ValidString(key) || strings.ContainsRune(key, 0):
		return publishEntry{}, invalid(keyField, "must be UTF-8 text without NUL characters")
	}
	if err := checkRange("delay_seconds", delay, 0, wire.MaxDelaySeconds); err != nil {
		return publishEntry{}, err
	}
	return publishEntry{payload: payload, key: key, delay: delay}, nil
}

func (e *Emulator) publish(r *http.Request) (any, error) {
	var req wire.PublishRequest
	if err := e.decode(r, publishBodyLimit, &req); err != nil {
		return nil, err
	}
	if err := e.checkQueue(req.Queue); err != nil {
		return nil, err
	}
	entry, aerr := checkEntry(req.Payload, r.Header.Get(wire.IdempotencyKeyHeader), req.DelaySeconds, wire.IdempotencyKeyHeader+" header")
	if aerr != nil {
		return nil, aerr
	}
	out, err := e.store.publish(r.Context(), req.Queue, []publishEntry{entry})
	if err != nil {
		return nil, err
	}
	if out[0].created && entry.delay == 0 {
		e.waiters.notify(req.Queue)
	}
	return wire.PublishResponse{MessageID: out[0].id, Deduplicated: !out[0].created}, nil
}

// parsePublishBatch decodes and checks a publish_batch body: errors that
// reject the whole request come back as the error, an entry's own problem
// as a failed result. entries[i] is the index into results of each entry to
// store (a key repeated within the batch is stored once); dups maps a later
// repeat to the entry that carries its key.
func parsePublishBatch(body io.Reader) (req wire.PublishBatchRequest, results []wire.BatchResult, entries []publishEntry, index []int, dups map[int]int, aerr *apiError) {
	if aerr = decodeJSON(body, &req); aerr != nil {
		return
	}
	if req.Messages == nil {
		aerr = invalid("messages", "is required; want 1..%d messages", wire.MaxBatch)
		return
	}
	if n := len(req.Messages); n < 1 || n > wire.MaxBatch {
		aerr = invalid("messages", "has %d entries; want 1..%d", n, wire.MaxBatch)
		return
	}
	results = make([]wire.BatchResult, len(req.Messages))
	seen := make(map[string]int, len(req.Messages))
	for i, m := range req.Messages {
		entry, err := checkEntry(m.Payload, m.IdempotencyKey, m.DelaySeconds, "idempotency_key")
		if err != nil {
			results[i] = wire.BatchResult{Status: wire.StatusFailed, Reason: err.code + ": messages[" + strconv.Itoa(i) + "]." + err.msg}
			continue
		}
		if first, ok := seen[entry.key]; ok {
			if dups == nil {
				dups = make(map[int]int)
			}
			dups[i] = first
			continue
		}
		seen[entry.key] = i
		entries = append(entries, entry)
		index = append(index, i)
	}
	return
}

func (e *Emulator) publishBatch(r *http.Request) (any, error) {
	req, results, entries, index, dups, aerr := parsePublishBatch(http.MaxBytesReader(nil, r.Body, batchBodyLimit))
	if aerr != nil {
		return nil, aerr
	}
	if aerr := e.checkQueue(req.Queue); aerr != nil {
		return nil, aerr
	}
	if len(entries) > 0 {
		out, err := e.store.publish(r.Context(), req.Queue, entries)
		if err != nil {
			return nil, err
		}
		wake := false
		for j, o := range out {
			i := index[j]
			results[i] = wire.BatchResult{Status: wire.StatusDeduplicated, MessageID: o.id}
			if o.created {
				results[i].Status = wire.StatusCreated
				wake = wake || entries[j].delay == 0
			}
		}
		if wake {
			e.waiters.notify(req.Queue)
		}
	}
	for i, first := range dups {
		results[i] = wire.BatchResult{Status: wire.StatusDeduplicated, MessageID: results[first].MessageID}
	}
	return wire.PublishBatchResponse{Results: results}, nil
}

// returnMessages makes consumed messages visible again at once, without
// counting a failure.
func (e *Emulator) returnMessages(queue string, msgs []wire.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range msgs {
		if id, ok := parseID(m.MessageID); ok {
			if _, _, err := e.store.nack(ctx, queue, id, 0, false, false, "consumer went away"); err != nil {
				e.log.Warn().Err(err).Str("message_id", m.MessageID).Msg("could not return a message; it reappears after its visibility timeout")
			}
		}
	}
	e.waiters.notify(queue)
}

func (e *Emulator) consume(r *http.Request) (any, error) {
	var req wire.ConsumeRequest
	if err := e.decode(r, smallBodyLimit, &req); err != nil {
		return nil, err
	}
	if err := e.checkQueue(req.Queue); err != nil {
		return nil, err
	}
	if req.MaxMessages == 0 {
		req.MaxMessages = 1
	}
	if req.VisibilityTimeoutSeconds == 0 {
		req.VisibilityTimeoutSeconds = int(e.cfg.VisibilityTimeout / time.Second)
	}
	for _, err := range []*apiError{
		checkRange("max_messages", req.MaxMessages, 1, wire.MaxConsumeMessages),
		checkRange("wait_seconds", req.WaitSeconds, 0, wire.MaxWaitSeconds),
		checkRange("visibility_timeout_seconds", req.VisibilityTimeoutSeconds, 1, wire.MaxVisibilitySeconds),
	} {
		if err != nil {
			return nil, err
		}
	}
	ctx := r.Context()
	deadline := time.Now().Add(time.Duration(req.WaitSeconds) * time.Second)
	for {
		// Take the wake-up channel before looking, so a publish landing
		// between the look and the wait is not missed.
		wake := e.waiters.wait(req.Queue)
		msgs, err := e.store.consume(ctx, req.Queue, req.MaxMessages, req.VisibilityTimeoutSeconds)
		if err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if len(msgs) > 0 && ctx.Err() != nil {
			// The consumer went away (it is shutting down) while its
			// messages were being taken: hand them straight back rather
			// than leave them invisible until their visibility times out.
			e.returnMessages(req.Queue, msgs)
			return nil, ctx.Err()
		}
		if len(msgs) > 0 {
			if err := e.injectRedelivery(ctx, req.Queue, msgs); err != nil {
				return nil, err
			}
			return wire.ConsumeResponse{Messages: msgs}, nil
		}
		if left <= 0 {
			return wire.ConsumeResponse{Messages: msgs}, nil
		}
		t := time.NewTimer(min(left, recheckInterval))
		select {
		case <-wake:
		case <-t.C:
		case <-e.closing:
			t.Stop()
			return wire.ConsumeResponse{Messages: msgs}, nil
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// injectRedelivery applies the redelivery fault to messages just consumed.
func (e *Emulator) injectRedelivery(ctx context.Context, q string, msgs []wire.Message) error {
	f := e.faults.Load()
	if f.RedeliveryRate <= 0 {
		return nil
	}
	ids := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		id, _ := strconv.ParseInt(m.MessageID, 10, 64)
		ids = append(ids, id)
	}
	again := f.redelivered(ids)
	if len(again) == 0 {
		return nil
	}
	if err := e.store.redeliver(ctx, q, again); err != nil {
		return err
	}
	e.waiters.notify(q)
	return nil
}

// parseIDs turns message ids into database ids. An id this emulator could
// not have issued cannot name a message, so it is dropped: acking or
// redriving it is then the no-op the contract asks for.
func parseIDs(field string, ids []string) ([]int64, *apiError) {
	if len(ids) > maxIDs {
		return nil, invalid(field, "has %d ids; the limit is %d", len(ids), maxIDs)
	}
	out := make([]int64, 0, len(ids))
	for _, s := range ids {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil && id > 0 {
			out = append(out, id)
		}
	}
	return out, nil
}

// parseID reads one message id; ok is false when no message can have it.
func parseID(s string) (id int64, ok bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

func (e *Emulator) ack(r *http.Request) (any, error) {
	var req wire.AckRequest
	if err := e.decode(r, smallBodyLimit, &req); err != nil {
		return nil, err
	}
	if err := e.checkQueue(req.Queue); err != nil {
		return nil, err
	}
	if req.MessageIDs == nil {
		return nil, invalid("message_ids", "is required; want a list of message ids")
	}
	ids, aerr := parseIDs("message_ids", req.MessageIDs)
	if aerr != nil {
		return nil, aerr
	}
	n, err := e.store.ack(r.Context(), req.Queue, ids)
	if err != nil {
		return nil, err
	}
	return wire.AckResponse{Acked: n}, nil
}

func (e *Emulator) nack(r *http.Request) (any, error) {
	var req wire.NackRequest
	if err := e.decode(r, smallBodyLimit, &req); err != nil {
		return nil, err
	}
	if err := e.checkQueue(req.Queue); err != nil {
		return nil, err
	}
	if req.MessageID == "" {
		return nil, invalid("message_id", "is required")
	}
	if err := checkRange("delay_seconds", req.DelaySeconds, 0, wire.MaxDelaySeconds); err != nil {
		return nil, err
	}
	switch {
	case req.DeadLetter && req.Reason == "":
		return nil, invalid("reason", "is required with dead_letter: true; say why the message cannot be delivered")
	case !req.DeadLetter && req.CountAsFailure == nil:
		return nil, invalid("count_as_failure", "is required; true counts this delivery toward dead-lettering, false (a provider 429) does not")
	case len(req.Reason) > 4096:
		return nil, invalid("reason", "is %d bytes; the limit is 4096", len(req.Reason))
	case !utf8.ValidString(req.Reason) || strings.ContainsRune(req.Reason, 0):
		return nil, invalid("reason", "must be UTF-8 text without NUL characters")
	}
	id, ok := parseID(req.MessageID)
	if !ok {
		return nil, notFound("message %q is not in queue %q", req.MessageID, req.Queue)
	}
	counted := req.CountAsFailure != nil && *req.CountAsFailure
	dead, visible, err := e.store.nack(r.Context(), req.Queue, id, req.DelaySeconds, counted, req.DeadLetter, req.Reason)
	if errors.Is(err, errNotFound) {
		return nil, notFound("message %q is not in queue %q (acked, dead-lettered or never published)", req.MessageID, req.Queue)
	}
	if err != nil {
		return nil, err
	}
	if visible && !dead {
		e.waiters.notify(req.Queue)
	}
	return wire.NackResponse{DeadLettered: dead}, nil
}

func (e *Emulator) extend(r *http.Request) (any, error) {
	var req wire.ExtendRequest
	if err := e.decode(r, smallBodyLimit, &req); err != nil {
		return nil, err
	}
	if err := e.checkQueue(req.Queue); err != nil {
		return nil, err
	}
	if req.MessageID == "" {
		return nil, invalid("message_id", "is required")
	}
	if err := checkRange("visibility_timeout_seconds", req.VisibilityTimeoutSeconds, 1, wire.MaxVisibilitySeconds); err != nil {
		return nil, err
	}
	id, ok := parseID(req.MessageID)
	if !ok {
		return nil, notFound("message %q is not in flight in queue %q", req.MessageID, req.Queue)
	}
	until, err := e.store.extend(r.Context(), req.Queue, id, req.VisibilityTimeoutSeconds)
	if errors.Is(err, errNotFound) {
		return nil, notFound("message %q is not in flight in queue %q (acked, nacked, dead-lettered or never consumed)", req.MessageID, req.Queue)
	}
	if err != nil {
		return nil, err
	}
	return wire.ExtendResponse{VisibleAt: until}, nil
}

func (e *Emulator) deadLetters(r *http.Request) (any, error) {
	q := r.URL.Query()
	name := q.Get("queue")
	if err := e.checkQueue(name); err != nil {
		return nil, err
	}
	limit := defaultDeadLetterPage
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, invalid("limit", "%q is not a number; want 1..%d", s, wire.MaxDeadLetterPage)
		}
		if aerr := checkRange("limit", n, 1, wire.MaxDeadLetterPage); aerr != nil {
			return nil, aerr
		}
		limit = n
	}
	var after int64
	if s := q.Get("cursor"); s != "" {
		c, ok := parseID(s)
		if !ok {
			return nil, invalid("cursor", "%q is not a cursor this queue issued; pass next_cursor from the previous page", s)
		}
		after = c
	}
	var ids []int64
	if s := q.Get("ids"); s != "" {
		var aerr *apiError
		if ids, aerr = parseIDs("ids", strings.Split(s, ",")); aerr != nil {
			return nil, aerr
		}
	}
	list, next, err := e.store.deadLetters(r.Context(), name, after, limit, ids)
	if err != nil {
		return nil, err
	}
	return wire.DeadLettersResponse{DeadLetters: list, NextCursor: next}, nil
}

func (e *Emulator) deadLetter(r *http.Request) (any, error) {
	name := r.URL.Query().Get("queue")
	if err := e.checkQueue(name); err != nil {
		return nil, err
	}
	raw := r.PathValue("id")
	id, ok := parseID(raw)
	if ok {
		list, _, err := e.store.deadLetters(r.Context(), name, 0, 1, []int64{id})
		if err != nil {
			return nil, err
		}
		if len(list) == 1 {
			return list[0], nil
		}
	}
	return nil, notFound("message %q is not a dead letter of queue %q", raw, name)
}

func (e *Emulator) redrive(r *http.Request) (any, error) {
	var req wire.RedriveRequest
	if err := e.decode(r, smallBodyLimit, &req); err != nil {
		return nil, err
	}
	if err := e.checkQueue(req.Queue); err != nil {
		return nil, err
	}
	if req.All == (len(req.MessageIDs) > 0) {
		return nil, invalid("message_ids", "give either message_ids or all: true, not both or neither")
	}
	ids, aerr := parseIDs("message_ids", req.MessageIDs)
	if aerr != nil {
		return nil, aerr
	}
	n, err := e.store.redrive(r.Context(), req.Queue, ids, req.All)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		e.waiters.notify(req.Queue)
	}
	return wire.RedriveResponse{Redriven: n}, nil
}

func (e *Emulator) deleteDeadLetters(r *http.Request) (any, error) {
	var req wire.DeleteDeadLettersRequest
	if err := e.decode(r, smallBodyLimit, &req); err != nil {
		return nil, err
	}
	if err := e.checkQueue(req.Queue); err != nil {
		return nil, err
	}
	if len(req.MessageIDs) == 0 {
		return nil, invalid("message_ids", "is required; want the ids of the dead letters to delete")
	}
	ids, aerr := parseIDs("message_ids", req.MessageIDs)
	if aerr != nil {
		return nil, aerr
	}
	n, err := e.store.deleteDeadLetters(r.Context(), req.Queue, ids)
	if err != nil {
		return nil, err
	}
	return wire.DeleteDeadLettersResponse{Deleted: n}, nil
}

func (e *Emulator) stats(r *http.Request) (any, error) {
	name := r.URL.Query().Get("queue")
	if err := e.checkQueue(name); err != nil {
		return nil, err
	}
	return e.store.stats(r.Context(), name)
}

// adminFaults reads (GET) or replaces (POST) the injected failures.
func (e *Emulator) adminFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		// Knobs the body leaves out take their defaults, so {} clears
		// every fault and a throttle needs only its rate.
		f := DefaultConfig().Faults
		if aerr := e.decode(r, smallBodyLimit, &f); aerr != nil {
			writeError(w, aerr)
			return
		}
		if err := e.SetFaults(f); err != nil {
			writeError(w, &apiError{status: http.StatusBadRequest, code: codeInvalid, msg: err.Error()})
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: codeMethod, msg: "/admin/faults takes GET or POST"})
		return
	}
	writeJSON(w, http.StatusOK, wire.Data[Faults]{Data: e.Faults()})
}
