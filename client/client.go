// Package client is the Go client of owed's scheduling API (docs/api.md,
// the contract at GET /v1/openapi.json): schedule notifications, fan an
// event out, cancel, reschedule or snooze a subject, look a row up and list
// rows page by page.
//
// Every call takes a context and acts in one tenant's scope: a tenant token's
// own, or with the service token the tenant named by WithTenant. A refused
// call returns an *Error carrying the API's status, code and field.
// Idempotent calls (every one but Snooze, whose delay is counted from the
// server's now) are retried on a network error, a 429 or a 5xx, with
// exponential backoff bounded by WithRetry, and never sooner than a 429's
// Retry-After (the tenant's limit); a 4xx is never retried.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// RetryDefault bounds the time an idempotent call spends retrying
// (WithRetry).
const RetryDefault = 30 * time.Second

// maxAnswer bounds the bytes of one answer the client reads: a full page of
// 500 rows with 64 KiB payloads is about 33 MB.
const maxAnswer = 64 << 20

// Client calls one owed API. It is safe for concurrent use.
type Client struct {
	base, token, tenant string
	hc                  *http.Client
	retry               time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends through hc (default: a client with a 30 s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTenant names the tenant every call acts for: required with the
// service token, optional with a tenant token (which may only name its own).
func WithTenant(tenant string) Option { return func(c *Client) { c.tenant = tenant } }

// WithRetry bounds how long an idempotent call retries (default
// RetryDefault); zero or less disables retries.
func WithRetry(d time.Duration) Option { return func(c *Client) { c.retry = d } }

// New returns a client of the API at baseURL (the sweeper's public URL,
// without /v1) holding token.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: &http.Client{Timeout: 30 * time.Second},
		retry: RetryDefault}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Error is the API's refusal of a call.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the API's error code (invalid_field, not_found, conflict, …).
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the first input to fix; Details every one, when several.
	Field   string        `json:"field,omitempty"`
	Details []FieldDetail `json:"details,omitempty"`
	// RequestID is the answer's X-Request-Id, to find the server's log line.
	RequestID string
	// RetryAfter is the answer's Retry-After (a 429: the tenant is over
	// its limit), zero when it had none.
	RetryAfter time.Duration
}

// FieldDetail is one bad input of a refused call.
type FieldDetail struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("owed API: %d %s: %s", e.Status, e.Code, e.Message)
}

// IsNotFound reports whether err is the API's not_found.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == "not_found"
}

// Schedule schedules one notification.
func (c *Client) Schedule(ctx context.Context, n Notification) (Scheduled, error) {
	res, err := c.ScheduleMany(ctx, []Notification{n})
	if err != nil {
		return Scheduled{}, err
	}
	if len(res.Notifications) != 1 {
		return Scheduled{}, fmt.Errorf("owed API: scheduled %d rows for one", len(res.Notifications))
	}
	return res.Notifications[0], nil
}

// ScheduleMany schedules up to 1,000 notifications in one call, all or
// none.
func (c *Client) ScheduleMany(ctx context.Context, ns []Notification) (ScheduleResult, error) {
	var out ScheduleResult
	err := c.post(ctx, "/v1/notifications", map[string]any{"notifications": ns}, true, &out)
	return out, err
}

// Event fans e out to its recipients, one row each.
func (c *Client) Event(ctx context.Context, e Event) (ScheduleResult, error) {
	body := map[string]any{"kind": e.Kind, "ref_id": e.RefID, "channel": e.Channel, "payload": e.Payload,
		"recipients": e.Recipients}
	if e.DueLocal == "" {
		body["occurred_at"] = e.OccurredAt.UTC().Format(time.RFC3339Nano)
	}
	for k, v := range map[string]string{"due_local": e.DueLocal, "expires_local": e.ExpiresLocal,
		"time_zone": e.TimeZone, "disambiguation": e.Disambiguation} {
		if v != "" {
			body[k] = v
		}
	}
	if e.Urgent {
		body["urgent"] = true
	}
	if e.Delay > 0 {
		body["delay_seconds"] = int64(e.Delay / time.Second)
	}
	if e.ExpiresIn > 0 {
		body["expires_in_seconds"] = int64(e.ExpiresIn / time.Second)
	}
	var out ScheduleResult
	err := c.post(ctx, "/v1/events", body, true, &out)
	return out, err
}

// Cancel cancels every open row of the subject (kind, refID).
func (c *Client) Cancel(ctx context.Context, kind, refID string) (ChangeResult, error) {
	var out ChangeResult
	err := c.post(ctx, "/v1/notifications/cancel", map[string]any{"kind": kind, "ref_id": refID}, true, &out)
	return out, err
}

// Reschedule moves every open row of the subject to due. A row the
// recipient already has at due makes it an *Error with code conflict.
func (c *Client) Reschedule(ctx context.Context, kind, refID string, due time.Time) (ChangeResult, error) {
	var out ChangeResult
	err := c.post(ctx, "/v1/notifications/reschedule", map[string]any{"kind": kind, "ref_id": refID,
		"due_at": due.UTC().Format(time.RFC3339Nano)}, true, &out)
	return out, err
}

// Snooze moves every open row of the subject to the server's now + d
// (whole seconds). It is not retried: a repeat would snooze from a later
// now; use Reschedule with a time for a retryable move.
func (c *Client) Snooze(ctx context.Context, kind, refID string, d time.Duration) (ChangeResult, error) {
	var out ChangeResult
	err := c.post(ctx, "/v1/notifications/reschedule", map[string]any{"kind": kind, "ref_id": refID,
		"delay_seconds": int64(d / time.Second)}, false, &out)
	return out, err
}

// Update replaces the payload, expiry or due time of the unsettled row id
// (PATCH /v1/notifications/{id}); a zero field of u keeps the row's. A row
// a worker is sending takes the change as an intent: UpdateResult.Certain
// says whether the row will send what u says. A settled row is an *Error
// with code conflict.
func (c *Client) Update(ctx context.Context, id int64, u Update) (UpdateResult, error) {
	var out UpdateResult
	err := c.patch(ctx, fmt.Sprintf("/v1/notifications/%d", id), u.body(), &out)
	return out, err
}

// UpdateByKey is Update of the row scheduled under (recipient, kind,
// refID, due), its idempotency tuple (PATCH /v1/notifications).
func (c *Client) UpdateByKey(ctx context.Context, recipient, kind, refID string, due time.Time, u Update) (UpdateResult, error) {
	body := u.body()
	body["key"] = map[string]any{"recipient": recipient, "kind": kind, "ref_id": refID,
		"due_at": due.UTC().Format(time.RFC3339Nano)}
	var out UpdateResult
	err := c.patch(ctx, "/v1/notifications", body, &out)
	return out, err
}

// SetQuietHours sets one scope of the tenant's send windows (PUT
// /v1/quiet-hours) and moves the pending rows to the new rule.
func (c *Client) SetQuietHours(ctx context.Context, q QuietHours) (HoldResult, error) {
	body := map[string]any{"scope": q.Scope, "windows": q.Windows}
	if q.TimeZone != "" {
		body["time_zone"] = q.TimeZone
	}
	if c.tenant != "" {
		body["tenant_id"] = c.tenant
	}
	b, err := json.Marshal(body)
	if err != nil {
		return HoldResult{}, err
	}
	var out HoldResult
	err = c.do(ctx, http.MethodPut, "/v1/quiet-hours", b, true, &out)
	return out, err
}

// SetDigest declares a kind digestible with a window (PUT /v1/digests):
// rows of the kind to one recipient on one channel due within one window
// go out as one message listing them. A zero window turns digesting off
// for the kind.
func (c *Client) SetDigest(ctx context.Context, kind string, window time.Duration) (DigestResult, error) {
	w := "0"
	if window != 0 {
		w = window.String()
	}
	body := map[string]any{"kind": kind, "window": w}
	if c.tenant != "" {
		body["tenant_id"] = c.tenant
	}
	b, err := json.Marshal(body)
	if err != nil {
		return DigestResult{}, err
	}
	var out DigestResult
	err = c.do(ctx, http.MethodPut, "/v1/digests", b, true, &out)
	return out, err
}

// Digests lists the tenant's digestible kinds (GET /v1/digests).
func (c *Client) Digests(ctx context.Context) ([]Digest, error) {
	var out []Digest
	err := c.get(ctx, "/v1/digests", url.Values{}, &out)
	return out, err
}

// GetQuietHours reads every scope of the tenant's send windows (GET
// /v1/quiet-hours), ordered by scope; none is an empty slice.
func (c *Client) GetQuietHours(ctx context.Context) ([]QuietHours, error) {
	var out struct {
		QuietHours []QuietHours `json:"quiet_hours"`
	}
	err := c.get(ctx, "/v1/quiet-hours", url.Values{}, &out)
	return out.QuietHours, err
}

// patch sends a PATCH. An update is retried like the other writes: applied
// twice it leaves the row as applied once.
func (c *Client) patch(ctx context.Context, path string, body map[string]any, out any) error {
	if c.tenant != "" {
		body["tenant_id"] = c.tenant
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPatch, path, b, true, out)
}

// Get returns one row with its sends and receipts; IsNotFound(err) when the
// tenant has no such row.
func (c *Client) Get(ctx context.Context, id int64) (Detail, error) {
	var out Detail
	err := c.get(ctx, "/v1/notifications/"+strconv.FormatInt(id, 10), url.Values{}, &out)
	return out, err
}

// List returns one page of the tenant's rows matching o, newest due first.
func (c *Client) List(ctx context.Context, o ListOptions) (Page, error) {
	q := url.Values{}
	for k, v := range map[string]string{"recipient": o.Recipient, "ref": o.RefID, "kind": o.Kind, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out Page
	err := c.get(ctx, "/v1/notifications", q, &out)
	return out, err
}

// All iterates over every row matching o, page after page (o.Limit rows
// each), stopping at the first error, which it yields.
func (c *Client) All(ctx context.Context, o ListOptions) iter.Seq2[Row, error] {
	return func(yield func(Row, error) bool) {
		for {
			p, err := c.List(ctx, o)
			if err != nil {
				yield(Row{}, err)
				return
			}
			for _, r := range p.Notifications {
				if !yield(r, nil) {
					return
				}
			}
			if p.NextCursor == "" {
				return
			}
			o.Cursor = p.NextCursor
		}
	}
}

func (c *Client) post(ctx context.Context, path string, body map[string]any, idempotent bool, out any) error {
	if c.tenant != "" {
		body["tenant_id"] = c.tenant
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, path, b, idempotent, out)
}

func (c *Client) get(ctx context.Context, path string, q url.Values, out any) error {
	if c.tenant != "" {
		q.Set("tenant", c.tenant)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return c.do(ctx, http.MethodGet, path, nil, true, out)
}

// do sends one call, retrying it when idempotent and the failure is one a
// retry may cure, and decodes the answer's data into out.
func (c *Client) do(ctx context.Context, method, path string, body []byte, idempotent bool, out any) error {
	var b backoff.BackOff = &backoff.StopBackOff{}
	var wait *honourRetryAfter
	if idempotent && c.retry > 0 {
		eb := backoff.NewExponentialBackOff()
		eb.InitialInterval, eb.MaxInterval, eb.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, c.retry
		wait = &honourRetryAfter{BackOff: eb, budget: c.retry}
		b = wait
	}
	return backoff.Retry(func() error {
		err := c.once(ctx, method, path, body, out)
		var e *Error
		if wait != nil && errors.As(err, &e) {
			wait.floor = e.RetryAfter
		}
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			// The caller gave up: say so, whatever the last try answered.
			if errors.Is(err, ctx.Err()) {
				return backoff.Permanent(err)
			}
			return backoff.Permanent(fmt.Errorf("%w (the last try: %v)", ctx.Err(), err))
		case errors.As(err, &e) && e.Status != http.StatusTooManyRequests && e.Status < 500:
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
}

func (c *Client) once(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return backoff.Permanent(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id"),
			RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
		var env struct{ Error *Error }
		if json.Unmarshal(raw, &env) == nil && env.Error != nil {
			e.Code, e.Message, e.Field, e.Details = env.Error.Code, env.Error.Message, env.Error.Field, env.Error.Details
		} else {
			e.Message = strings.TrimSpace(string(raw))
		}
		return e
	}
	if err := json.Unmarshal(raw, &struct {
		Data any `json:"data"`
	}{Data: out}); err != nil {
		return backoff.Permanent(fmt.Errorf("owed API: %s %s: decode the answer: %w", method, path, err))
	}
	return nil
}

// retryAfter reads a Retry-After header: whole seconds, as the API sends
// it, or an HTTP date. Anything else is zero.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n <= math.MaxInt64/int64(time.Second) {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// honourRetryAfter is a backoff that waits at least the last answer's
// Retry-After (floor) before the next try, and gives up at once, with that
// answer, when the wait would end past the call's retry budget: retrying
// sooner only earns another 429.
type honourRetryAfter struct {
	backoff.BackOff
	budget time.Duration
	start  time.Time
	floor  time.Duration
}

func (h *honourRetryAfter) Reset() {
	h.BackOff.Reset()
	h.start, h.floor = time.Now(), 0
}

func (h *honourRetryAfter) NextBackOff() time.Duration {
	next := h.BackOff.NextBackOff()
	floor := h.floor
	h.floor = 0
	switch {
	case next == backoff.Stop || floor <= next:
		return next
	case time.Since(h.start)+floor > h.budget:
		return backoff.Stop
	}
	return floor
}
