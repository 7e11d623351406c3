package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/wire"
)

// Request body limits. A publish_batch may carry MaxBatch full payloads; the
// slack covers keys, field names and escaping.
const (
	publishBodyLimit = wire.MaxPayloadBytes + 16<<10
	batchBodyLimit   = wire.MaxBatch * (wire.MaxPayloadBytes + 1<<10)
	smallBodyLimit   = 1 << 20
)

// maxReasonBytes bounds a nack's reason, kept as the message's last error.
const maxReasonBytes = 4096

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
		return &apiError{status: http.StatusRequestEntityTooLarge, code: wire.CodePayloadTooLarge,
			msg: fmt.Sprintf("request body exceeds %d bytes", maxErr.Limit)}
	case errors.Is(err, io.EOF):
		return invalid("request body", "is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("request body", "ends in the middle of the JSON")
	case errors.As(err, &synErr):
		return invalid("request body", "is not valid JSON at byte %d: %s", synErr.Offset, synErr.Error())
	case errors.As(err, &typeErr):
		field := jsonPath(typeErr.Field)
		if field == "" {
			field = "request body"
		}
		return invalid(field, "want a JSON %s, got %s", typeErr.Type.Kind(), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalid(strings.TrimPrefix(err.Error(), "json: unknown field "), "is not a field of this request")
	}
	return invalid("request body", "%s", err.Error())
}

// jsonPath is the decoder's path to a field as the contract names it. The
// decoder puts the Go name of an embedded struct (wire.QueueRef) in the
// path; the contract's names are the JSON ones, which are all lower case.
func jsonPath(field string) string {
	var kept []string
	for _, part := range strings.Split(field, ".") {
		if part != "" && !unicode.IsUpper(rune(part[0])) {
			kept = append(kept, part)
		}
	}
	return strings.Join(kept, ".")
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
	if !rest.ValidQueueName(name) {
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

// checkText accepts UTF-8 text of at most limit bytes without NUL
// characters, which Postgres text cannot hold.
func checkText(field, v string, limit int) *apiError {
	switch {
	case len(v) > limit:
		return invalid(field, "is %d bytes; the limit is %d", len(v), limit)
	case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
		return invalid(field, "must be UTF-8 text without NUL characters")
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
		return publishEntry{}, &apiError{status: http.StatusRequestEntityTooLarge, code: wire.CodePayloadTooLarge,
			msg: fmt.Sprintf("payload: is %d bytes; the limit is %d bytes", len(payload), wire.MaxPayloadBytes)}
	case key == "":
		return publishEntry{}, invalid(keyField, "is required")
	}
	if err := checkText(keyField, key, wire.MaxIdempotencyKeyBytes); err != nil {
		return publishEntry{}, err
	}
	if err := checkRange("delay_seconds", delay, 0, wire.MaxDelaySeconds); err != nil {
		return publishEntry{}, err
	}
	return publishEntry{payload: payload, key: key, delay: delay}, nil
}

// parseIDs turns message ids into database ids. An id this emulator could
// not have issued cannot name a message, so it is dropped: acking or
// redriving it is then the no-op the contract asks for.
func parseIDs(field string, ids []string) ([]int64, *apiError) {
	if len(ids) > wire.MaxIDs {
		return nil, invalid(field, "has %d ids; the limit is %d", len(ids), wire.MaxIDs)
	}
	out := make([]int64, 0, len(ids))
	for _, s := range ids {
		if id, ok := parseID(s); ok {
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
