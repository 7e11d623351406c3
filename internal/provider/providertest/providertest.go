// Package providertest is the test kit every provider adapter's tests share:
// a fake provider server that checks and records each request and answers
// with a chosen reply, a table-driven check that a status and body classify
// as expected, and the assertions every adapter must hold (an error never
// contains a credential, a configuration error names its variable, a
// classifier's answer stays within the provider contract).
//
// It only drives an adapter from outside, through provider.Sender and the
// adapter's own classify function; it never knows a provider's API.
package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/provider"
)

// Request is one request the fake server received, read whole.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test when it is not JSON.
func (r *Request) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Errorf("request body: %v", err)
	}
}

// Form parses the body the way http.Request.ParseForm does, so a request
// without the form Content-Type yields no values.
func (r *Request) Form(t testing.TB) url.Values {
	t.Helper()
	req := &http.Request{Method: r.Method, Header: r.Header, Body: io.NopCloser(bytes.NewReader(r.Body))}
	if err := req.ParseForm(); err != nil {
		t.Errorf("request form: %v", err)
	}
	return req.PostForm
}

// BasicAuth returns the request's basic credentials, as
// http.Request.BasicAuth does.
func (r *Request) BasicAuth() (user, password string, ok bool) {
	return (&http.Request{Header: r.Header}).BasicAuth()
}

// Reply is what the fake server answers. Status 0 drops the connection
// without an answer; Cut sends the status and part of the body, then drops
// the connection mid-body.
type Reply struct {
	Status int
	Body   string
	Header map[string]string
	Cut    bool
}

// RetryAfter is a reply header carrying Retry-After v, or none when v is
// empty.
func RetryAfter(v string) map[string]string {
	if v == "" {
		return nil
	}
	return map[string]string{"Retry-After": v}
}

// Server is a fake provider. Every request must be a POST to its path (any
// path when it was made with ""); it is then passed to the check function,
// recorded, and answered with the current Reply (200 with an empty body until
// Reply is called).
type Server struct {
	// URL is the server's base URL, for the adapter's BaseURL.
	URL string

	t     testing.TB
	path  string
	check func(testing.TB, *Request)

	mu       sync.Mutex
	reply    Reply
	requests []*Request
}

// NewServer starts a fake provider that the test's cleanup closes. check,
// when not nil, asserts the shape of each request; it runs on the server's
// goroutine, so it reports with t.Errorf, never t.Fatal.
func NewServer(t testing.TB, path string, check func(testing.TB, *Request)) *Server {
	t.Helper()
	s := &Server{t: t, path: path, check: check, reply: Reply{Status: http.StatusOK}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Reply sets what the server answers from now on.
func (s *Server) Reply(status int, body string, header map[string]string) {
	s.Answer(Reply{Status: status, Body: body, Header: header})
}

// Answer sets the whole Reply the server answers from now on.
func (s *Server) Answer(r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reply = r
}

// Requests returns every request received so far, oldest first.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// Last returns the latest request, failing the test when there was none.
func (s *Server) Last(t testing.TB) *Request {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("the fake provider received no request")
	}
	return reqs[len(reqs)-1]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("read request body: %v", err)
	}
	req := &Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	if req.Method != http.MethodPost || (s.path != "" && req.Path != s.path) {
		s.t.Errorf("request %s %s; want POST %s", req.Method, req.Path, s.path)
	}
	if s.check != nil {
		s.check(s.t, req)
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	reply := s.reply
	s.mu.Unlock()
	if reply.Status == 0 {
		// ErrAbortHandler makes net/http drop the connection without a
		// response and without logging a panic.
		panic(http.ErrAbortHandler)
	}
	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	if reply.Cut {
		// Promise more than is sent, so the client sees the body break off.
		w.Header().Set("Content-Length", strconv.Itoa(len(reply.Body)+64))
	}
	w.WriteHeader(reply.Status)
	_, _ = w.Write([]byte(reply.Body))
	if reply.Cut {
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// New builds an adapter with its constructor, failing the test when the
// configuration is rejected.
func New[C, S any](t testing.TB, newFn func(C) (S, error), cfg C) S {
	t.Helper()
	s, err := newFn(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Accept sends d through sender and fails the test unless the provider
// accepted it with the message id id and the HTTP status status.
func Accept(t testing.TB, sender provider.Sender, d provider.Delivery, id string, status int) {
	t.Helper()
	res, err := sender.Send(context.Background(), d)
	if err != nil || res.MessageID != id || res.HTTPStatus != status {
		t.Fatalf("send: %+v %v; want id %q and HTTP %d", res, err, id, status)
	}
}

// Row is one row of a provider's failure table: the provider answers Status
// (0: no answer at all), Body and Header (Cut: the body breaks off), and the
// send must fail with Class, exactly After as RetryAfter, Code as the
// provider's code, Status as HTTPStatus, and the Recipient and MaybeSent
// flags. Meaning is the row's "meaning" column in docs/providers.md, where
// DocTable renders the rows and CheckDocTable compares them.
type Row struct {
	Status    int
	Code      string
	Meaning   string
	Body      string
	Header    map[string]string
	Cut       bool
	Class     provider.Class
	Recipient bool
	MaybeSent bool
	After     time.Duration
}

func (r Row) name() string {
	return strings.TrimSpace(fmt.Sprintf("%d %s %s", r.Status, r.Code, r.Meaning))
}

// CheckRows runs an adapter's failure table: for each row srv answers the
// row's reply, sender sends d once, and the error must be classified as the
// row says, must come from exactly one request (a Sender never retries by
// itself) and must not contain secret.
func CheckRows(t *testing.T, srv *Server, sender provider.Sender, d provider.Delivery, secret string, rows []Row) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.name(), func(t *testing.T) {
			srv.Answer(Reply{Status: r.Status, Body: r.Body, Header: r.Header, Cut: r.Cut})
			before := len(srv.Requests())
			_, err := sender.Send(context.Background(), d)
			if n := len(srv.Requests()) - before; n != 1 {
				t.Errorf("the send made %d requests; want 1", n)
			}
			pe := provider.Classify(err)
			if pe == nil || pe.Class != r.Class || pe.RetryAfter != r.After || pe.Code != r.Code || pe.HTTPStatus != r.Status ||
				pe.Recipient != r.Recipient || pe.MaybeSent != r.MaybeSent {
				t.Fatalf("%#v; want %v after %v, code %q, HTTP %d, recipient %v, maybe sent %v",
					pe, r.Class, r.After, r.Code, r.Status, r.Recipient, r.MaybeSent)
			}
			NoSecret(t, err, secret)
		})
	}
}

// NoSecret fails the test when err's text contains any non-empty secret.
func NoSecret(t testing.TB, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("the error leaks a secret: %v", err)
		}
	}
}

// ConfigCase is one invalid configuration and the variable its error must
// name.
type ConfigCase[C any] struct {
	Config C
	Want   string
}

// CheckConfigErrors calls newFn with each case's configuration: it must fail
// with an error that names the case's variable and contains none of secrets.
func CheckConfigErrors[C, S any](t testing.TB, newFn func(C) (S, error), cases []ConfigCase[C], secrets ...string) {
	t.Helper()
	for _, c := range cases {
		_, err := newFn(c.Config)
		if err == nil || !strings.Contains(err.Error(), c.Want) {
			t.Errorf("%+v: %v; want an error naming %s", c.Config, err, c.Want)
			continue
		}
		NoSecret(t, err, secrets...)
	}
}

// Any2xx accepts every 2xx status, for providers that answer a send with
// 200, 201 or 202.
func Any2xx(status int) bool { return status >= 200 && status < 300 }

// Only200 accepts 200 alone, for providers that answer every send with it.
func Only200(status int) bool { return status == http.StatusOK }

// CheckOutcome is the contract a classifier's fuzz target asserts for any
// status and body: a success only for a status ok accepts, reporting that
// status; a failure whose RetryAfter is within [0, provider.MaxRetryAfter],
// whose text contains no secret, that is Recipient only when Permanent or
// RateLimited, that
// is MaybeSent only when Transient, and that is MaybeSent whenever a 5xx is
// Transient.
func CheckOutcome(t testing.TB, status int, ok func(int) bool, res provider.Result, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		if !ok(status) || res.HTTPStatus != status {
			t.Fatalf("accepted status %d as %+v", status, res)
		}
		return
	}
	pe := provider.Classify(err)
	if pe.RetryAfter < 0 || pe.RetryAfter > provider.MaxRetryAfter {
		t.Fatalf("retry after %v out of range: %v", pe.RetryAfter, err)
	}
	if (pe.Recipient && pe.Class != provider.Permanent && pe.Class != provider.RateLimited) ||
		(pe.MaybeSent && pe.Class != provider.Transient) {
		t.Fatalf("flags do not fit the class: %#v", pe)
	}
	if status >= 500 && pe.Class == provider.Transient && !pe.MaybeSent {
		t.Fatalf("a transient %d is not flagged maybe sent: %#v", status, pe)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Fatalf("secret leaked: %v", err)
		}
	}
}
