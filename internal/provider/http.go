package provider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/retryafter"
)

// DefaultTimeout bounds one send, from dial to the last byte of the response.
// Providers answer in well under a second; ten seconds rides out a slow moment
// without letting a hung connection hold a worker for its whole lease.
const DefaultTimeout = 10 * time.Second

// MaxResponseBytes bounds how much of a response body an adapter reads. Every
// provider's answer is a small JSON object; an endpoint that streams more is
// misbehaving and must not cost the worker memory.
const MaxResponseBytes = 64 << 10

// MaxRetryAfter caps a provider's Retry-After so that a buggy or hostile
// server saying "wait a year" pauses an account for an hour, after which the
// next send asks again. It is retryafter's default cap; the worker caps
// further with OWED_RETRY_AFTER_MAX.
const MaxRetryAfter = retryafter.DefaultMax

// idleConnsPerHost is how many keep-alive connections an adapter holds to
// its provider: OWED_WORKER_CONCURRENCY's ceiling, so a worker's sends in
// flight reuse connections instead of dialling.
const idleConnsPerHost = 1000

// NewHTTPClient returns the client every adapter uses: a whole-request
// timeout (DefaultTimeout when timeout is zero) and redirects not followed. A
// provider API that redirects a POST is misconfigured (a wrong base URL, an
// http:// URL upgraded to https), and following it would resend credentials
// and body to a host nobody configured; the adapter sees the 3xx and
// classifies it Permanent.
func NewHTTPClient(timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// Every send of an adapter goes to one host: with net/http's default of
	// two idle connections per host, each send beyond two in flight opened
	// (and closed) a connection of its own, a TCP and TLS handshake per
	// send. Keep as many as the worker can have sends in flight.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = idleConnsPerHost, idleConnsPerHost
	return &http.Client{
		Timeout:   timeout,
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Response is what Do read from the provider: the status, the headers and at
// most MaxResponseBytes of the body.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends req with hc and reads a bounded body. A failure below HTTP comes
// back as a Transient *Error with the URL stripped and secrets redacted; any
// HTTP status, including errors, is returned as a Response for the adapter to
// classify.
func Do(hc *http.Client, req *http.Request, name string, secrets ...string) (Response, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return Response{}, TransportError(name, err, secrets...)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	if err != nil {
		// The status arrived but the body did not: the provider may or may not
		// have accepted the message, and only a retry with the same key can
		// tell, so this is transient.
		pe := TransportError(name, err, secrets...)
		pe.HTTPStatus = resp.StatusCode
		return Response{}, pe
	}
	// Drain a little of any excess so the connection can be reused, without
	// reading an unbounded stream.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBytes))
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// NewJSONRequest builds a POST with a JSON body.
func NewJSONRequest(ctx context.Context, url string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// StatusClass is the default reading of an HTTP status, for adapters whose
// provider documents nothing more specific: 429 is RateLimited; 408 and 5xx
// are Transient (the request timed out or the server failed, so it may
// succeed later); 3xx and every other 4xx are Permanent (the request itself is
// wrong and resending it unchanged cannot help). Anything else unexpected is
// Transient.
func StatusClass(status int) Class {
	switch {
	case status == http.StatusTooManyRequests:
		return RateLimited
	case status == http.StatusRequestTimeout:
		return Transient
	case status >= 300 && status < 500:
		return Permanent
	default:
		return Transient
	}
}

// StatusError classifies a non-2xx response by StatusClass, with RetryAfter
// from the Retry-After header and a message naming the status. Adapters start
// from it and refine Code, Message and Class from the provider's error body.
func StatusError(name string, resp Response, now time.Time) *Error {
	e := &Error{Provider: name, Class: StatusClass(resp.Status), HTTPStatus: resp.Status}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok && e.Class != Permanent {
		e.RetryAfter = d
	}
	if resp.Status >= 300 && resp.Status < 400 {
		e.Message = fmt.Sprintf("unexpected redirect (HTTP %d); check the base URL", resp.Status)
	} else {
		e.Message = http.StatusText(resp.Status)
	}
	return e
}

// ParseRetryAfter reads a provider's Retry-After by owed's one rule set
// (retryafter.Parse: delta-seconds or an HTTP date, rounded up to whole
// seconds, a past date meaning zero, anything malformed reporting false),
// capped at MaxRetryAfter.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	return retryafter.Parse(value, now, MaxRetryAfter)
}

// BaseURL validates a provider's base URL setting, falling back to def when
// value is empty, and returns it without a trailing slash. variable names the
// setting in the error.
func BaseURL(variable, value, def string) (string, error) {
	if value == "" {
		value = def
	}
	u, err := url.Parse(value)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.User != nil {
		return "", fmt.Errorf("%s: must be an absolute http or https URL without query or credentials, like %s (got %q)",
			variable, def, redactURL(value))
	}
	return strings.TrimRight(value, "/"), nil
}

// redactURL shows only the scheme and host of a rejected base URL: a
// misplaced credential sits in the userinfo, path or query, never the host.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host + "/…"
	}
	return fmt.Sprintf("%d characters", len(s))
}
