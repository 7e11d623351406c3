package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ParseRetryAfter is retryafter.Parse (tested there) at the provider's cap.
func TestParseRetryAfterCapsAtMaxRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3600", time.Hour, true},
		{"3601", MaxRetryAfter, true},
		{"Mon, 01 Mar 2027 12:00:00 GMT", MaxRetryAfter, true},
		{"Sun, 01 Mar 2026 12:00:30 GMT", 30 * time.Second, true},
		{"soon", 0, false},
	} {
		if got, ok := ParseRetryAfter(tt.in, now); got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	if Classify(nil) != nil {
		t.Fatal("Classify(nil) != nil")
	}
	plain := errors.New("boom")
	if !IsTransient(plain) || IsPermanent(plain) {
		t.Fatal("an unclassified error must be transient")
	}
	perm := NewError("x", Permanent, 400, "21211", "bad number")
	wrapped := fmt.Errorf("send: %w", perm)
	if !IsPermanent(wrapped) {
		t.Fatal("a wrapped permanent error must stay permanent")
	}
	rl := &Error{Class: RateLimited, RetryAfter: 7 * time.Second}
	if d, ok := IsRateLimited(rl); !ok || d != 7*time.Second {
		t.Fatalf("IsRateLimited = %v, %v", d, ok)
	}
	if _, ok := IsRateLimited(perm); ok {
		t.Fatal("a permanent error is not rate limited")
	}
	want := "x: permanent (HTTP 400, code 21211): bad number"
	if perm.Error() != want {
		t.Fatalf("Error() = %q, want %q", perm.Error(), want)
	}
}

func TestRedactAndTruncate(t *testing.T) {
	t.Parallel()
	got := Redact("token abc123 leaked abc123", "abc123", "")
	if strings.Contains(got, "abc123") {
		t.Fatalf("secret survived: %q", got)
	}
	long := Redact(strings.Repeat("é", MaxMessageLen))
	if len(long) > MaxMessageLen+len("…") || !strings.HasSuffix(long, "…") {
		t.Fatalf("not truncated: %d bytes", len(long))
	}
}

func TestDoTransportErrorHidesURL(t *testing.T) {
	t.Parallel()
	// The server never answers: the client's timeout ends every request.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	const token = "123456:SECRET-token"
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/bot"+token+"/sendMessage", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Do(NewHTTPClient(20*time.Millisecond), req, "telegram", token)
	if !IsTransient(err) {
		t.Fatalf("timeout must be transient: %v", err)
	}
	if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("error leaks the URL: %v", err)
	}
	if !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("error does not say it timed out: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req = req.WithContext(ctx)
	_, err = Do(NewHTTPClient(0), req, "telegram", token)
	if !errors.Is(err, context.Canceled) || !IsTransient(err) {
		t.Fatalf("cancelled send: %v", err)
	}
}

func TestDoDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	hit := make(chan struct{}, 1)
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit <- struct{}{} }))
	defer target.Close()
	srv := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	resp, err := Do(NewHTTPClient(0), req, "x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusTemporaryRedirect {
		t.Fatalf("status %d, want 307", resp.Status)
	}
	if c := StatusError("x", resp, now).Class; c != Account {
		t.Fatalf("3xx classified %v", c)
	}
	select {
	case <-hit:
		t.Fatal("redirect was followed")
	default:
	}
}

func TestDoBoundsBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 4*MaxResponseBytes)))
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := Do(NewHTTPClient(0), req, "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Body) != MaxResponseBytes {
		t.Fatalf("read %d bytes, want %d", len(resp.Body), MaxResponseBytes)
	}
}

func TestStatusError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		ra     string
		class  Class
		after  time.Duration
	}{
		{429, "30", RateLimited, 30 * time.Second},
		{503, "5", Transient, 5 * time.Second},
		{500, "", Transient, 0},
		{408, "", Transient, 0},
		{400, "30", Permanent, 0},
		{410, "", Permanent, 0},
		{401, "30", Account, 0},
		{301, "", Account, 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.ra != "" {
			h.Set("Retry-After", tt.ra)
		}
		e := StatusError("x", Response{Status: tt.status, Header: h}, now)
		if e.Class != tt.class || e.RetryAfter != tt.after || e.MaybeSent != (tt.status >= 500) {
			t.Errorf("%d: class %v after %v maybe sent %v; want %v %v", tt.status, e.Class, e.RetryAfter, e.MaybeSent, tt.class, tt.after)
		}
	}
}

// TestDoMaybeSent: a failure below HTTP is a possible duplicate exactly when
// the whole request had been written: a refused connection carried nothing,
// a connection dropped after the request, a timeout waiting for the answer
// and a body that broke off after the status may each have been acted on.
func TestDoMaybeSent(t *testing.T) {
	t.Parallel()
	refused := httptest.NewServer(http.NotFoundHandler())
	refusedURL := refused.URL
	refused.Close()
	dropped := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	defer dropped.Close()
	// The hung server reads the request first, so that the client giving
	// up cancels r.Context.
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer hung.Close()
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"id":`))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer cut.Close()
	for _, tt := range []struct {
		name, url string
		status    int
		maybe     bool
	}{
		{"refused", refusedURL, 0, false},
		{"dropped", dropped.URL, 0, true},
		{"timed out", hung.URL, 0, true},
		{"body cut", cut.URL, 200, true},
	} {
		req, _ := http.NewRequest(http.MethodPost, tt.url, strings.NewReader(`{"a":1}`))
		_, err := Do(NewHTTPClient(200*time.Millisecond), req, "x")
		pe := Classify(err)
		if pe == nil || pe.Class != Transient || pe.MaybeSent != tt.maybe || pe.HTTPStatus != tt.status {
			t.Errorf("%s: %#v; want transient, HTTP %d, maybe sent %v", tt.name, pe, tt.status, tt.maybe)
		}
	}

	// Through an Endpoint the cut body reaches the adapter's Classifier,
	// which alone knows whether the status was the verdict.
	var got Response
	_, err := NewEndpoint("x", cut.URL, 0, nil).Post(context.Background(), "application/json", nil, nil,
		func(resp Response, _ time.Time) (Result, error) {
			got = resp
			return Result{HTTPStatus: resp.Status}, nil
		})
	if err != nil || !got.Truncated || got.Status != 200 || string(got.Body) != `{"id":` {
		t.Fatalf("%v: %+v; want the truncated 200", err, got)
	}
}

func TestReclassifyAndExpired(t *testing.T) {
	t.Parallel()
	e := &Error{Class: Transient, RetryAfter: time.Second, MaybeSent: true}
	if e.Reclassify(Permanent, true); e.RetryAfter != 0 || e.MaybeSent || !e.Recipient {
		t.Fatalf("permanent: %#v", e)
	}
	if e.Reclassify(Account, true); e.Recipient || e.Class != Account {
		t.Fatalf("account: %#v", e)
	}
	if e.Reclassify(RateLimited, true); !e.Recipient || e.Class != RateLimited {
		t.Fatalf("a recipient's rate limit: %#v", e)
	}
	if e.Reclassify(Transient, true); e.Recipient {
		t.Fatalf("transient: %#v", e)
	}
	if e := (Rule{Class: Transient}).Apply(&Error{MaybeSent: true}); !e.MaybeSent {
		t.Fatalf("a 5xx's maybe-sent was dropped: %#v", e)
	}
	if e := (Rule{Class: Transient, MaybeSent: true}).Apply(&Error{}); !e.MaybeSent {
		t.Fatalf("the rule's maybe-sent was dropped: %#v", e)
	}
	if e := (Rule{Class: Permanent, MaybeSent: true}).Apply(&Error{MaybeSent: true}); e.MaybeSent {
		t.Fatalf("a permanent failure flagged maybe sent: %#v", e)
	}
	x := Expired("twilio:AC1", 400*time.Millisecond)
	if !errors.Is(x, ErrExpired) || !IsTransient(x) || x.MaybeSent || x.Code != "expired" {
		t.Fatalf("expired: %#v", x)
	}
	if u := Unreadable("slack", Response{Status: 200, Truncated: true}, "chat.postMessage"); !u.MaybeSent || u.Class != Transient ||
		!strings.Contains(u.Error(), "broke off") {
		t.Fatalf("unreadable: %v", u)
	}
}
