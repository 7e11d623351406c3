package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/owedhq/owed/internal/clock"
)

// Endpoint is the send path every HTTP adapter shares: one URL, the client
// NewHTTPClient builds, the adapter's clock and the credentials no error may
// contain. An adapter builds its own body and headers and keeps its own
// reading of the answer (a Classifier); Endpoint builds the request, sends it
// with Do and hands the Response to that Classifier.
type Endpoint struct {
	name    string
	url     string
	hc      *http.Client
	clock   clock.Clock
	secrets []string
}

// Classifier is an adapter's reading of one provider response: a Result for
// an accepted send, otherwise a classified *Error. now is when the response
// arrived, by the adapter's clock, for Retry-After dates and reset instants.
type Classifier func(resp Response, now time.Time) (Result, error)

// NewEndpoint returns the Endpoint through which the adapter called name
// POSTs to url. timeout bounds one send (DefaultTimeout when zero); clk is
// the adapter's one clock (clock.Real when nil); secrets are redacted from
// every error the Endpoint returns.
func NewEndpoint(name, url string, timeout time.Duration, clk clock.Clock, secrets ...string) *Endpoint {
	if clk == nil {
		clk = clock.Real()
	}
	return &Endpoint{name: name, url: url, hc: NewHTTPClient(timeout), clock: clk, secrets: secrets}
}

// URL is where the Endpoint POSTs.
func (e *Endpoint) URL() string { return e.url }

// Now reads the adapter's clock.
func (e *Endpoint) Now() time.Time { return e.clock.Now() }

// PostJSON encodes v as the JSON body of Post. A value that cannot be
// encoded fails the same way on every attempt, so that failure is Permanent.
func (e *Endpoint) PostJSON(ctx context.Context, v any, header func(*http.Request), classify Classifier) (Result, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Result{}, NewError(e.name, Permanent, 0, "", "encode request: "+err.Error())
	}
	return e.Post(ctx, "application/json", body, header, classify)
}

// Post sends body to the Endpoint's URL with contentType and
// "Accept: application/json"; header, when not nil, adds the adapter's own
// headers (credentials, a signature) last, so it may also override those two.
// A failure below HTTP is a Transient *Error with the secrets redacted (and
// MaybeSent once the request was written); any HTTP answer goes to classify,
// a body that broke off after the status included (Response.Truncated).
func (e *Endpoint) Post(ctx context.Context, contentType string, body []byte, header func(*http.Request), classify Classifier) (Result, error) {
	req, err := NewJSONRequest(ctx, e.url, body)
	if err != nil {
		return Result{}, TransportError(e.name, err, e.secrets...)
	}
	req.Header.Set("Content-Type", contentType)
	if header != nil {
		header(req)
	}
	resp, err := do(e.hc, req, e.name, e.secrets...)
	if err != nil {
		return Result{}, err
	}
	return classify(resp, e.clock.Now())
}
