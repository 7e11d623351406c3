package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// Limits on requests. The batch limit is the ledger's: one request is one
// ledger.Schedule call, so a request is written whole or not at all.
const (
	// MaxBodyBytes bounds a request body; a larger one gets 413.
	MaxBodyBytes = 1 << 20
	// MaxDelay bounds delay_seconds and expires_in_seconds: a year is
	// further ahead than any notification owed should be scheduled.
	MaxDelay = 366 * 24 * time.Hour
	// MaxExpandedBytesDefault is Options.MaxExpandedBytes' default
	// (OWED_API_MAX_EXPANDED_BYTES): the bytes of rows one request may
	// stand for, each row counted with its recipient, channel, kind, ref_id
	// and payload. An event names its payload once and is one row per
	// recipient, so a small body can stand for far more: 1,000 recipients
	// of a 62 KB payload are 62 MB. The ledger stores an event's payload
	// once, but every row is a send a worker renders and a provider
	// carries. 16 MiB is 1,000 recipients of a 16 KB payload.
	MaxExpandedBytesDefault = 16 << 20
)

// The JSON bodies of the write routes. Times are strings so that a bad one is
// reported with its row and field ("notifications[3].due_at") rather than as
// encoding/json's anonymous parse error.

type scheduleRequest struct {
	TenantID      string              `json:"tenant_id"`
	Notifications []notificationInput `json:"notifications"`
}

type notificationInput struct {
	Recipient string          `json:"recipient"`
	Channel   string          `json:"channel"`
	Kind      string          `json:"kind"`
	RefID     string          `json:"ref_id"`
	DueAt     string          `json:"due_at"`
	ExpiresAt string          `json:"expires_at"`
	Payload   json.RawMessage `json:"payload"`
	// The local-time form of the times (docs/api.md, "Local time"): wall
	// clock times in time_zone, or in the recipient's contact's zone.
	DueLocal       string `json:"due_local"`
	ExpiresLocal   string `json:"expires_local"`
	TimeZone       string `json:"time_zone"`
	Disambiguation string `json:"disambiguation"`
	// Urgent rows are never held for quiet hours.
	Urgent bool `json:"urgent"`
}

type subjectRequest struct {
	TenantID string `json:"tenant_id"`
	Kind     string `json:"kind"`
	RefID    string `json:"ref_id"`
}

// eraseRequest is POST /v1/recipients/erase's body.
type eraseRequest struct {
	TenantID  string `json:"tenant_id"`
	Recipient string `json:"recipient"`
	Channel   string `json:"channel"`
	Reason    string `json:"reason"`
}

type rescheduleRequest struct {
	subjectRequest
	DueAt        string `json:"due_at"`
	DelaySeconds *int64 `json:"delay_seconds"`
}

type eventRequest struct {
	TenantID         string           `json:"tenant_id"`
	Kind             string           `json:"kind"`
	RefID            string           `json:"ref_id"`
	Channel          string           `json:"channel"`
	Payload          json.RawMessage  `json:"payload"`
	OccurredAt       string           `json:"occurred_at"`
	DelaySeconds     *int64           `json:"delay_seconds"`
	ExpiresAt        string           `json:"expires_at"`
	ExpiresInSeconds *int64           `json:"expires_in_seconds"`
	Recipients       []eventRecipient `json:"recipients"`
	// The local-time form, as a schedule's (docs/api.md, "Local time"):
	// due_local instead of occurred_at and delay_seconds, on each
	// recipient's wall clock in time_zone, in the recipient's own
	// time_zone, or in its contact's zone.
	DueLocal       string `json:"due_local"`
	ExpiresLocal   string `json:"expires_local"`
	TimeZone       string `json:"time_zone"`
	Disambiguation string `json:"disambiguation"`
	// Urgent rows are never held for quiet hours.
	Urgent bool `json:"urgent"`
}

type eventRecipient struct {
	Recipient string          `json:"recipient"`
	Channel   string          `json:"channel"`
	Payload   json.RawMessage `json:"payload"`
	// TimeZone replaces the event's zone for this recipient.
	TimeZone string `json:"time_zone"`
}

// scoped is a request body that names the tenant it acts for.
type scoped interface{ tenantID() string }

func (r scheduleRequest) tenantID() string { return r.TenantID }
func (r subjectRequest) tenantID() string  { return r.TenantID }
func (r eventRequest) tenantID() string    { return r.TenantID }
func (r eraseRequest) tenantID() string    { return r.TenantID }

// decodeScoped decodes body into req (a pointer to a request struct) and
// resolves the tenant the request acts in.
func decodeScoped(body []byte, p principal, req scoped) (string, *apiError) {
	if e := decodeJSON(body, req); e != nil {
		return "", e
	}
	return p.scope(req.tenantID(), "tenant_id")
}

// principal is who a request authenticated as: the service token (which may
// act for any tenant it names) or one tenant's token.
type principal struct {
	service bool
	tenant  string
}

// scope resolves the tenant a request acts in. named is what the request
// said (JSON tenant_id or query tenant), field its name for errors.
func (p principal) scope(named, field string) (string, *apiError) {
	if p.service {
		if strings.TrimSpace(named) == "" {
			return "", badField(field, "required with the service token: name the tenant the request acts for")
		}
		if err := ledger.ValidateTenant(named); err != nil {
			var v *ledger.ValidationError
			errors.As(err, &v)
			return "", badField(field, "%s", v.Fields[0].Msg)
		}
		return named, nil
	}
	if named != "" && named != p.tenant {
		return "", &apiError{Status: http.StatusForbidden, Code: codeForbidden, Field: field,
			Message: "this token is bound to another tenant than the one named in " + field}
	}
	return p.tenant, nil
}

// decodeJSON decodes one JSON object into dst, rejecting unknown fields and
// trailing data.
func decodeJSON(body []byte, dst any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON, Message: "request body is empty: send a JSON object"}
	}
	if e := checkText(body); e != nil {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, err := dec.Token(); err != io.EOF {
			return &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON,
				Message: "trailing data after the JSON object: send exactly one object"}
		}
		return nil
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON,
			Message: fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, syntax)}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON,
				Message: fmt.Sprintf("the body must be a JSON object, not %s", typ.Value)}
		}
		return badField(field, "got a JSON %s, want %s", typ.Value, jsonKind(typ.Type.String()))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON, Message: "malformed JSON: the body ends early"}
	}
	if name, ok := unknownFieldName(err); ok {
		return unknownField(name, "unknown field; see docs/api.md for the accepted fields")
	}
	return &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON, Message: "malformed JSON: " + err.Error()}
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "[]api."):
		return "an array of objects"
	case strings.HasPrefix(goType, "api."), strings.HasPrefix(goType, "struct"):
		return "an object"
	case strings.Contains(goType, "int"):
		return "an integer"
	}
	return goType
}

// parseTime reads an RFC 3339 time. An empty value is the zero time; the
// caller decides whether that is allowed.
func parseTime(field, value string) (time.Time, *fieldDetail) {
	if value == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	switch {
	case err != nil:
		return time.Time{}, &fieldDetail{Field: field,
			Message: fmt.Sprintf("%q is not an RFC 3339 time (like 2026-03-01T12:00:00Z)", value)}
	case t.Truncate(time.Microsecond).IsZero():
		// The ledger reads the zero time as "not given"; a client sends it
		// when it never set the time.
		return time.Time{}, &fieldDetail{Field: field, Message: fmt.Sprintf("%q is 0001-01-01T00:00:00Z, the zero "+
			"time (.NET's DateTime.MinValue), a time that was never set; accepted: %s", value, ledger.TimeRange)}
	}
	return t, nil
}

// parseSeconds checks an optional count of seconds against [min, MaxDelay].
func parseSeconds(field string, v *int64, min int64) (time.Duration, *fieldDetail) {
	if v == nil {
		return 0, nil
	}
	max := int64(MaxDelay / time.Second)
	if *v < min || *v > max {
		return 0, &fieldDetail{Field: field, Message: fmt.Sprintf("%d is outside %d..%d", *v, min, max)}
	}
	return time.Duration(*v) * time.Second, nil
}

// decodeSchedule turns a POST /v1/notifications body into the ledger rows it
// asks for, fully validated: a nil error means ledger.Schedule will accept
// the rows. It touches no database, so the fuzz target exercises it whole.
func decodeSchedule(body []byte, p principal, maxExpanded int64) (string, []ledger.NewNotification, *apiError) {
	var req scheduleRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", nil, e
	}
	rows := make([]ledger.NewNotification, len(req.Notifications))
	var bad []fieldDetail
	for i, n := range req.Notifications {
		prefix := fmt.Sprintf("notifications[%d].", i)
		due, fe := parseTime(prefix+"due_at", n.DueAt)
		if fe != nil {
			bad = append(bad, *fe)
		}
		rows[i] = ledger.NewNotification{Recipient: n.Recipient, Channel: n.Channel, Kind: n.Kind,
			RefID: n.RefID, DueAt: due, Payload: n.Payload, TimeZone: n.TimeZone, Urgent: n.Urgent}
		if n.DueLocal != "" || n.ExpiresLocal != "" || n.Disambiguation != "" {
			rows[i].Local = &ledger.Local{Due: n.DueLocal, Expires: n.ExpiresLocal, Disambiguation: n.Disambiguation}
		}
		if n.ExpiresAt != "" {
			exp, fe := parseTime(prefix+"expires_at", n.ExpiresAt)
			if fe != nil {
				bad = append(bad, *fe)
			}
			rows[i].ExpiresAt = &exp
		}
	}
	if e := fieldErrors(bad); e != nil {
		return "", nil, e
	}
	if e := checkExpanded(rows, "notifications", maxExpanded); e != nil {
		return "", nil, e
	}
	if err := ledger.Validate(tenant, rows); err != nil {
		return "", nil, fromLedger(err, batchNamer("notifications"))
	}
	return tenant, rows, nil
}

// decodeSubject reads a cancel body, fully validated.
func decodeSubject(body []byte, p principal) (string, subjectRequest, *apiError) {
	var req subjectRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", req, e
	}
	if err := ledger.ValidateCancel(tenant, req.Kind, req.RefID); err != nil {
		return "", req, fromLedger(err, batchNamer("notifications"))
	}
	return tenant, req, nil
}

// decodeErase reads an erasure's body into the ledger's request; who
// asked is the token's kind, since a token carries no person's name.
func decodeErase(body []byte, p principal) (string, ledger.EraseRequest, *apiError) {
	var req eraseRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", ledger.EraseRequest{}, e
	}
	by := "api:tenant token"
	if p.service {
		by = "api:service token"
	}
	er := ledger.EraseRequest{Tenant: tenant, Recipient: req.Recipient, Channel: req.Channel, RequestedBy: by,
		Reason: req.Reason}
	if err := er.Validate(); err != nil {
		return "", er, fromLedger(err, batchNamer("notifications"))
	}
	return tenant, er, nil
}

// rescheduleTo is a reschedule body resolved: the subject and its new due
// time.
type rescheduleTo struct {
	subjectRequest
	due time.Time
}

// decodeReschedule reads a reschedule body. The new due time is due_at, or
// now plus delay_seconds for a snooze; exactly one must be given.
func decodeReschedule(body []byte, p principal, now time.Time) (string, rescheduleTo, *apiError) {
	var req rescheduleRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", rescheduleTo{}, e
	}
	switch {
	case req.DueAt != "" && req.DelaySeconds != nil:
		return "", rescheduleTo{}, badField("delay_seconds", "give due_at or delay_seconds, not both")
	case req.DueAt == "" && req.DelaySeconds == nil:
		return "", rescheduleTo{}, badField("due_at", "required (RFC 3339 time), or delay_seconds")
	}
	due, fe := parseTime("due_at", req.DueAt)
	if req.DelaySeconds != nil {
		var delay time.Duration
		delay, fe = parseSeconds("delay_seconds", req.DelaySeconds, 0)
		due = now.Add(delay)
	}
	if fe != nil {
		return "", rescheduleTo{}, fieldErrors([]fieldDetail{*fe})
	}
	if err := ledger.ValidateReschedule(tenant, req.Kind, req.RefID, due); err != nil {
		return "", rescheduleTo{}, fromLedger(err, batchNamer("notifications"))
	}
	return tenant, rescheduleTo{subjectRequest: req.subjectRequest, due: due}, nil
}

// decodeEvent fans an event out into one ledger row per recipient. The due
// time is occurred_at plus delay_seconds, both taken from the body: a replay
// of the same event therefore lands on the same rows, which a due time
// computed from the server's clock would not. due_local instead is a wall
// clock time each recipient's zone resolves, as a schedule's is.
func decodeEvent(body []byte, p principal, maxExpanded int64) (string, []ledger.NewNotification, *apiError) {
	tenant, rows, _, e := decodeEventRequest(body, p, maxExpanded)
	return tenant, rows, e
}

// decodeEventRequest is decodeEvent, also returning the request, which
// names the fields of the ledger's errors (eventNamer).
func decodeEventRequest(body []byte, p principal, maxExpanded int64) (string, []ledger.NewNotification, eventRequest,
	*apiError) {
	var req eventRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", nil, req, e
	}
	var bad []fieldDetail
	add := func(fe *fieldDetail) {
		if fe != nil {
			bad = append(bad, *fe)
		}
	}
	local := req.DueLocal != ""
	switch {
	case local && req.OccurredAt != "":
		add(&fieldDetail{Field: "due_local", Message: "give occurred_at (with delay_seconds) or due_local, not both"})
	case local && req.DelaySeconds != nil:
		add(&fieldDetail{Field: "delay_seconds", Message: "delay_seconds counts from occurred_at; with due_local " +
			"give the local time itself"})
	case local && req.ExpiresInSeconds != nil:
		add(&fieldDetail{Field: "expires_in_seconds", Message: "with due_local give expires_local or expires_at: " +
			"the due instant is known only once each recipient's zone resolves it"})
	case !local && req.OccurredAt == "":
		add(&fieldDetail{Field: "occurred_at", Message: "required (RFC 3339 time): when the event happened; " +
			"or due_local, a local time in the recipients' zone"})
	}
	occurred, fe := parseTime("occurred_at", req.OccurredAt)
	add(fe)
	delay, fe := parseSeconds("delay_seconds", req.DelaySeconds, 0)
	add(fe)
	var due time.Time
	if !local {
		due = occurred.Add(delay)
	}
	var expires *time.Time
	switch {
	case req.ExpiresAt != "" && req.ExpiresInSeconds != nil:
		add(&fieldDetail{Field: "expires_in_seconds", Message: "give expires_at or expires_in_seconds, not both"})
	case req.ExpiresLocal != "" && (req.ExpiresAt != "" || req.ExpiresInSeconds != nil):
		add(&fieldDetail{Field: "expires_local", Message: "give one of expires_at, expires_in_seconds and expires_local"})
	case req.ExpiresAt != "":
		exp, fe := parseTime("expires_at", req.ExpiresAt)
		add(fe)
		expires = &exp
	case req.ExpiresInSeconds != nil:
		in, fe := parseSeconds("expires_in_seconds", req.ExpiresInSeconds, 1)
		add(fe)
		exp := due.Add(in)
		expires = &exp
	}
	if e := fieldErrors(bad); e != nil {
		return "", nil, req, e
	}
	rows := make([]ledger.NewNotification, len(req.Recipients))
	for i, r := range req.Recipients {
		rows[i] = ledger.NewNotification{Recipient: r.Recipient, Channel: req.Channel, Kind: req.Kind,
			RefID: req.RefID, DueAt: due, ExpiresAt: expires, Payload: req.Payload, TimeZone: req.TimeZone,
			Urgent: req.Urgent}
		if r.Channel != "" {
			rows[i].Channel = r.Channel
		}
		if len(r.Payload) > 0 {
			rows[i].Payload = r.Payload
		}
		if r.TimeZone != "" {
			rows[i].TimeZone = r.TimeZone
		}
		if local || req.ExpiresLocal != "" || req.Disambiguation != "" {
			rows[i].Local = &ledger.Local{Due: req.DueLocal, Expires: req.ExpiresLocal, Disambiguation: req.Disambiguation}
		}
	}
	if e := checkExpanded(rows, "recipients", maxExpanded); e != nil {
		return "", nil, req, e
	}
	if err := ledger.Validate(tenant, rows); err != nil {
		return "", nil, req, fromLedger(err, eventNamer(req))
	}
	return tenant, rows, req, nil
}

// checkExpanded refuses with 413, naming list (the request's array of rows),
// a request whose rows add up to more than max bytes.
func checkExpanded(rows []ledger.NewNotification, list string, max int64) *apiError {
	var n int64
	for _, r := range rows {
		n += int64(len(r.Recipient) + len(r.Channel) + len(r.Kind) + len(r.RefID) + len(r.Payload))
	}
	if n <= max {
		return nil
	}
	return &apiError{Status: http.StatusRequestEntityTooLarge, Code: codeExpandedTooLarge, Field: list,
		Message: fmt.Sprintf("%s: the %d rows add up to %d bytes (each with its recipient, channel, kind, ref_id "+
			"and payload), over the limit of %d (OWED_API_MAX_EXPANDED_BYTES); send them in several requests",
			list, len(rows), n, max)}
}

// eventNamer names a ledger field error after the event field the value came
// from: the recipient's own override when it gave one, else the event's.
func eventNamer(req eventRequest) fieldNamer {
	return func(f ledger.FieldError) string {
		if f.Index < 0 {
			if f.Field == "notifications" {
				return "recipients"
			}
			return f.Field
		}
		r := req.Recipients[f.Index]
		own := fmt.Sprintf("recipients[%d].", f.Index)
		switch {
		case f.Field == "recipient":
			return own + "recipient"
		case f.Field == "channel" && r.Channel != "":
			return own + "channel"
		case strings.HasPrefix(f.Field, "payload") && len(r.Payload) > 0:
			return own + f.Field
		case f.Field == "due_at":
			return "occurred_at"
		case f.Field == "expires_at" && req.ExpiresInSeconds != nil:
			return "expires_in_seconds"
		case f.Field == "time_zone" && (r.TimeZone != "" || req.TimeZone == ""):
			// The recipient's own zone, or its contact's: the zone is
			// given (or missing) per recipient.
			return own + "time_zone"
		}
		return f.Field
	}
}
