package provider

import (
	"context"
	"errors"
	"fmt"
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
	if c := StatusError("x", resp, now).Class; c != Permanent {
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
		{301, "", Permanent, 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.ra != "" {
			h.Set("Retry-After", tt.ra)
		}
		e := StatusError("x", Response{Status: tt.status, Header: h}, now)
		if e.Class != tt.class || e.RetryAfter != tt.after {
			t.Errorf("%d: class %v after %v; want %v %v", tt.status, e.Class, e.RetryAfter, tt.class, tt.after)
		}
	}
}
