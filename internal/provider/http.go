package provider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
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
// classifies it Account (see StatusClass).
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
	// Truncated says the status and headers arrived but the body broke off
	// (the connection dropped mid-body); Body holds what did arrive. Only
	// Endpoint hands such a Response to a Classifier; Do turns it into an
	// error.
	Truncated bool
}

// Do sends req with hc and reads a bounded body. A failure below HTTP comes
// back as a Transient *Error with the URL stripped and secrets redacted, and
// MaybeSent when the whole request had been written (the provider may have
// acted on it); a body that broke off after the status is such an error too,
// with HTTPStatus set. Any HTTP status, including errors, is returned as a
// Response for the adapter to classify.
func Do(hc *http.Client, req *http.Request, name string, secrets ...string) (Response, error) {
	resp, err := do(hc, req, name, secrets...)
	if err == nil && resp.Truncated {
		// The status arrived but the body did not: the provider may or may
		// not have accepted the message.
		err = &Error{Provider: name, Class: Transient, HTTPStatus: resp.Status, MaybeSent: true,
			Message: "the response body broke off after HTTP " + fmt.Sprint(resp.Status)}
		resp = Response{}
	}
	return resp, err
}

// do is Do, except that a body broken off after the status is a Truncated
// Response for the adapter's Classifier: only the adapter knows whether its
// provider's status alone is the verdict.
func do(hc *http.Client, req *http.Request, name string, secrets ...string) (Response, error) {
	// wrote is set once the whole request is on the wire: from then on the
	// provider may act on it even if no answer comes back. A dial that is
	// refused or times out never sets it, so that failure is no duplicate.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
		},
	}))
	resp, err := hc.Do(req)
	if err != nil {
		pe := TransportError(name, err, secrets...)
		pe.MaybeSent = wrote.Load()
		return Response{}, pe
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	if err != nil {
		return Response{Status: resp.StatusCode, Header: resp.Header, Body: body, Truncated: true}, nil
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
// provider documents nothing more specific: 429 is RateLimited; 401 and 3xx
// are Account (the credential was refused, or the base URL is wrong, so no
// send on the account can succeed until someone fixes it); 408 and 5xx are
// Transient (the request timed out or the server failed, so it may succeed
// later); every other 4xx is Permanent (the request itself is wrong and
// resending it unchanged cannot help). Anything else unexpected is
// Transient.
func StatusClass(status int) Class {
	switch {
	case status == http.StatusTooManyRequests:
		return RateLimited
	case status == http.StatusUnauthorized, status >= 300 && status < 400:
		return Account
	case status == http.StatusRequestTimeout:
		return Transient
	case status >= 400 && status < 500:
		return Permanent
	default:
		return Transient
	}
}

// StatusError classifies a non-2xx response by StatusClass, with RetryAfter
// from the Retry-After header, a message naming the status, and MaybeSent for
// a 5xx (the server failed after taking the request, which it may have acted
// on). Adapters start from it and refine Code, Message, Class and Recipient
// from the provider's error body.
func StatusError(name string, resp Response, now time.Time) *Error {
	e := &Error{Provider: name, Class: StatusClass(resp.Status), HTTPStatus: resp.Status, MaybeSent: resp.Status >= 500}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), now); ok && (e.Class == RateLimited || e.Class == Transient) {
		e.RetryAfter = d
	}
	if resp.Status >= 300 && resp.Status < 400 {
		e.Message = fmt.Sprintf("unexpected redirect (HTTP %d); check the base URL", resp.Status)
	} else {
		e.Message = http.StatusText(resp.Status)
	}
	return e
}

// Unreadable is the answer to a 200 that does not say whether the message
// was accepted, from a provider that reports failures inside a 200 (Slack,
// Telegram): a body that is not the documented JSON, or broke off. The
// request was sent, so the retry is a possible duplicate.
func Unreadable(name string, resp Response, method string) *Error {
	msg := "unreadable " + method + " response"
	if resp.Truncated {
		msg = method + " response broke off"
	}
	return &Error{Provider: name, Class: Transient, HTTPStatus: resp.Status, MaybeSent: true, Message: msg}
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
