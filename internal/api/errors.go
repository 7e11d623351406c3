package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/owedhq/owed/internal/ledger"
)

// Error codes in the JSON error body. A client branches on the code and shows
// the message; the field says which input to fix.
const (
	codeInvalidField     = "invalid_field"
	codeUnknownField     = "unknown_field"
	codeMalformedJSON    = "malformed_json"
	codeUnauthorized     = "unauthorized"
	codeForbidden        = "forbidden"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeConflict         = "conflict"
	codeTooLarge         = "body_too_large"
	codeExpandedTooLarge = "expanded_too_large"
	codeUnsupportedMedia = "unsupported_media_type"
	codeRateLimited      = "rate_limited"
	codeInternal         = "internal"
)

// apiError is an error response: {"error": {"code", "message", "field",
// "details"}}. Details lists every bad field when there is more than one;
// Field and Message repeat the first so a simple client can ignore Details.
type apiError struct {
	Status  int           `json:"-"`
	Code    string        `json:"code"`
	Message string        `json:"message"`
	Field   string        `json:"field,omitempty"`
	Details []fieldDetail `json:"details,omitempty"`
	// retryAfter is the Retry-After of a 429, in whole seconds.
	retryAfter int64
}

type fieldDetail struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Message }

// badField is a 400 naming one field.
func badField(field, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	return &apiError{Status: http.StatusBadRequest, Code: codeInvalidField, Field: field, Message: field + ": " + msg}
}

// unknownField is a 400 naming a field or query parameter the route does
// not take. An empty name ({"": 1}, "?=") is named as "" so the error still
// says which input to fix.
func unknownField(name, msg string) *apiError {
	if name == "" {
		name = `""`
	}
	return &apiError{Status: http.StatusBadRequest, Code: codeUnknownField, Field: name, Message: name + ": " + msg}
}

// fieldErrors is a 400 naming every field in details, in order, without
// repeats. It returns nil for an empty list.
func fieldErrors(details []fieldDetail) *apiError {
	var uniq []fieldDetail
	seen := map[fieldDetail]bool{}
	for _, d := range details {
		if !seen[d] {
			seen[d] = true
			uniq = append(uniq, d)
		}
	}
	if len(uniq) == 0 {
		return nil
	}
	e := &apiError{Status: http.StatusBadRequest, Code: codeInvalidField, Field: uniq[0].Field,
		Message: uniq[0].Field + ": " + uniq[0].Message}
	if len(uniq) > 1 {
		e.Details = uniq
		e.Message = fmt.Sprintf("%s (and %d more invalid fields)", e.Message, len(uniq)-1)
	}
	return e
}

// fieldNamer turns a ledger FieldError into the request's own field name.
type fieldNamer func(ledger.FieldError) string

// batchNamer names row fields as list[i].field, the shape of a request whose
// rows map one to one onto the ledger's input.
func batchNamer(list string) fieldNamer {
	return func(f ledger.FieldError) string {
		switch {
		case f.Index >= 0:
			return fmt.Sprintf("%s[%d].%s", list, f.Index, f.Field)
		case f.Field == "notifications":
			return list
		}
		return f.Field
	}
}

// fromValidation maps the ledger's validation error onto request fields.
func fromValidation(v *ledger.ValidationError, name fieldNamer) *apiError {
	details := make([]fieldDetail, len(v.Fields))
	for i, f := range v.Fields {
		details[i] = fieldDetail{Field: name(f), Message: f.Msg}
	}
	return fieldErrors(details)
}

// fromLedger maps a ledger error onto a response; nil means it is not one
// the client caused, so it is a 500.
func fromLedger(err error, name fieldNamer) *apiError {
	var v *ledger.ValidationError
	switch {
	case errors.As(err, &v):
		return fromValidation(v, name)
	case errors.Is(err, ledger.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: "notification not found"}
	case errors.Is(err, ledger.ErrConflict):
		return &apiError{Status: http.StatusConflict, Code: codeConflict, Field: "due_at", Message: err.Error()}
	}
	return nil
}

// writeError writes e as the response.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="owed"`)
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(e.retryAfter, 10))
	}
	writeBody(w, e.Status, map[string]*apiError{"error": e})
}

// writeData writes a success response, {"data": v}.
func writeData(w http.ResponseWriter, status int, v any) {
	writeBody(w, status, map[string]any{"data": v})
}

func writeBody(w http.ResponseWriter, status int, body any) {
	// Encoded before the status is written: a value JSON cannot hold (a
	// time past the year 9999) is a 500, not a 200 with no body.
	b, err := json.Marshal(body)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]*apiError{"error": {Code: codeInternal,
			Message: "internal error: the answer could not be encoded"}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	// Responses carry recipients and payloads: no cache may keep them.
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// unknownFieldName extracts the name from encoding/json's unknown-field
// error, which has no typed form.
func unknownFieldName(err error) (string, bool) {
	name, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	return strings.Trim(name, `"`), true
}
