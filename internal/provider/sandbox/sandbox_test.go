package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/webhook"
)

var secret = webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("sandbox signing key, 24 bytes or more"))

// draw is a settable fault draw.
type draw struct {
	mu sync.Mutex
	v  float64
}

func (d *draw) Float64() float64 { d.mu.Lock(); defer d.mu.Unlock(); return d.v }
func (d *draw) Set(v float64)    { d.mu.Lock(); defer d.mu.Unlock(); d.v = v }

type bundle struct {
	srv *Server
	url string
	// clock starts at the real time because the webhook adapter stamps
	// requests with time.Now and the sandbox checks that stamp against it.
	clock  *clock.Stub
	draw   *draw
	sender *webhook.Client
	admin  *Client
}

// setup starts a sandbox at 40/m with burst 3, signed with secret, and a
// webhook adapter pointed at it.
func setup(t *testing.T, mutate func(*Config)) bundle {
	t.Helper()
	b := bundle{clock: clock.NewStub(time.Now()), draw: &draw{v: 0.99}}
	cfg := Config{Secret: secret, Clock: b.clock, Rand: b.draw.Float64}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	sender, err := webhook.New(webhook.Config{URL: hs.URL, Secret: secret, Name: "sandbox", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.srv, b.url, b.sender, b.admin = srv, hs.URL, sender, NewClient(hs.URL)
	return b
}

func delivery(n int64, recipient string) provider.Delivery {
	return provider.Delivery{Tenant: "t1", NotificationID: n, Recipient: recipient, Channel: payload.ChannelEmail,
		Kind: "reminder", IdempotencyKey: fmt.Sprintf("key-%d", n),
		Content: payload.Content{Subject: "Hi", Text: "owed"}}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for i := range int64(DefaultBurst) {
		if _, err := b.sender.Send(ctx, delivery(i+1, "a@example.com")); err != nil {
			t.Fatalf("burst send %d: %v", i, err)
		}
	}
	_, err := b.sender.Send(ctx, delivery(10, "a@example.com"))
	after, limited := provider.IsRateLimited(err)
	if !limited || after != 2*time.Second {
		t.Fatalf("over the burst: %v; want rate limited with Retry-After 2s (1.5s rounded up)", err)
	}
	b.clock.Advance(1500 * time.Millisecond)
	if _, err := b.sender.Send(ctx, delivery(10, "a@example.com")); err != nil {
		t.Fatalf("after the wait: %v", err)
	}
	st, err := b.admin.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Accepted != 4 || st.RateLimited != 1 || st.Duplicates != 0 || st.Rate != "40/m" || st.Burst != DefaultBurst {
		t.Fatalf("stats %+v", st)
	}
}

func TestDuplicatesByIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Rate, c.Burst = pace.Rate{Count: 1000, Per: time.Second}, 100 })
	ctx := context.Background()
	first, err := b.sender.Send(ctx, delivery(1, "a@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.sender.Send(ctx, delivery(1, "a@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	if first.MessageID == "" || again.MessageID != first.MessageID {
		t.Fatalf("duplicate got id %q, first %q", again.MessageID, first.MessageID)
	}
	if _, err := b.sender.Send(ctx, delivery(2, "b@example.com")); err != nil {
		t.Fatal(err)
	}
	st, _ := b.admin.Stats(ctx)
	if st.Accepted != 3 || st.Duplicates != 1 || st.DistinctKeys != 2 {
		t.Fatalf("stats %+v", st)
	}
	if last := st.PerMinute[len(st.PerMinute)-1]; last.Accepted != 3 || len(st.PerMinute) != DefaultStatsMinutes {
		t.Fatalf("per minute %+v (%d)", last, len(st.PerMinute))
	}
	sends, err := b.admin.Sends(ctx, SendQuery{Key: "key-1"})
	if err != nil || len(sends) != 1 || sends[0].Duplicates != 1 || sends[0].NotificationID != 1 ||
		sends[0].Tenant != "t1" || sends[0].Recipient != "a@example.com" {
		t.Fatalf("sends %+v %v", sends, err)
	}
	all, _ := b.admin.Sends(ctx, SendQuery{})
	if len(all) != 2 || all[0].Key != "key-2" {
		t.Fatalf("all sends, newest first: %+v", all)
	}

	if err := b.admin.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ = b.admin.Stats(ctx)
	if st.Accepted != 0 || st.DistinctKeys != 0 {
		t.Fatalf("after reset %+v", st)
	}
}

func TestSignature(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for name, s := range map[string]string{
		"wrong secret": webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("another signing key, as long as the first")),
		"unsigned":     "",
	} {
		bad, err := webhook.New(webhook.Config{URL: b.url, Secret: s})
		if err != nil {
			t.Fatal(err)
		}
		_, err = bad.Send(ctx, delivery(1, "a@example.com"))
		// A refused signature refuses every send: the account, not the row.
		if pe := provider.Classify(err); pe == nil || pe.HTTPStatus != http.StatusUnauthorized || pe.Class != provider.Account {
			t.Errorf("%s: %v; want 401 account", name, err)
		}
	}
	// A stale timestamp fails too: the sandbox's clock is an hour ahead.
	b.clock.Advance(time.Hour)
	if _, err := b.sender.Send(ctx, delivery(2, "a@example.com")); provider.Classify(err).HTTPStatus != http.StatusUnauthorized {
		t.Errorf("stale timestamp: %v", err)
	}
	st, _ := b.admin.Stats(ctx)
	if st.Unauthorized != 3 || st.Accepted != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSignatureRotation: a sandbox holding two secrets accepts a send signed
// by either, so a receiver can be moved to a new secret before the sender.
func TestSignatureRotation(t *testing.T) {
	t.Parallel()
	next := webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("the sandbox's next signing key"))
	b := setup(t, func(c *Config) { c.Secret = secret + ", " + next })
	for i, s := range []string{secret, next, next + " " + secret} {
		sender, err := webhook.New(webhook.Config{URL: b.url, Secret: s})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sender.Send(context.Background(), delivery(int64(i+1), "a@example.com")); err != nil {
			t.Errorf("signed with %q: %v", s, err)
		}
	}
	if _, err := New(Config{Secret: secret + " whsec_!!"}); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("a malformed second secret: %v", err)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Rate, c.Burst = pace.Rate{Count: 1000, Per: time.Second}, 100 })
	ctx := context.Background()
	set := func(f Faults) {
		t.Helper()
		if err := b.admin.SetFaults(ctx, f); err != nil {
			t.Fatal(err)
		}
	}

	set(Faults{ErrorRate: 0.1, TimeoutRate: 0.1, TimeoutSeconds: 0.01, PermanentRecipient: "bounce"})
	b.draw.Set(0.05)
	_, err := b.sender.Send(ctx, delivery(1, "a@example.com"))
	if pe := provider.Classify(err); pe == nil || pe.Class != provider.Transient || pe.HTTPStatus != 503 {
		t.Errorf("injected error: %v", err)
	}
	b.draw.Set(0.15)
	_, err = b.sender.Send(ctx, delivery(2, "a@example.com"))
	if pe := provider.Classify(err); pe == nil || pe.Class != provider.Transient || pe.HTTPStatus != 504 {
		t.Errorf("injected timeout (504): %v", err)
	}
	_, err = b.sender.Send(ctx, delivery(3, "x+bounce@example.com"))
	if pe := provider.Classify(err); pe == nil || pe.Class != provider.Permanent || pe.HTTPStatus != 422 {
		t.Errorf("permanent recipient: %v", err)
	}

	set(Faults{TimeoutRate: 1, TimeoutSeconds: 0.01, TimeoutMode: TimeoutClose})
	_, err = b.sender.Send(ctx, delivery(4, "a@example.com"))
	if pe := provider.Classify(err); pe == nil || pe.Class != provider.Transient || pe.HTTPStatus != 0 {
		t.Errorf("injected timeout (close): %v", err)
	}

	set(Faults{StormSeconds: 30, StormRetryAfterSeconds: 90})
	_, err = b.sender.Send(ctx, delivery(5, "a@example.com"))
	if after, ok := provider.IsRateLimited(err); !ok || after != 90*time.Second {
		t.Errorf("storm: %v", err)
	}
	b.clock.Advance(31 * time.Second)
	b.draw.Set(0.99)
	// The adapter stamps real time; the sandbox clock is now 31s ahead,
	// well within the signature tolerance.
	if _, err := b.sender.Send(ctx, delivery(5, "a@example.com")); err != nil {
		t.Errorf("after the storm: %v", err)
	}

	st, _ := b.admin.Stats(ctx)
	want := map[string]int64{FaultError: 1, FaultTimeout: 2, FaultStorm: 1, FaultPermanent: 1}
	for k, v := range want {
		if st.Faults[k] != v {
			t.Errorf("faults[%s] = %d, want %d (%v)", k, st.Faults[k], v, st.Faults)
		}
	}
	if st.Accepted != 1 {
		t.Errorf("accepted %d", st.Accepted)
	}
}

func TestSetFaultsRejectsInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tt := range []struct {
		body, want string
	}{
		{`{"error_rate":1.5}`, "error_rate"},
		{`{"error_rate":0.6,"timeout_rate":0.6}`, "error_rate + timeout_rate"},
		{`{"timeout_seconds":600}`, "timeout_seconds"},
		{`{"timeout_mode":"hang"}`, "timeout_mode"},
		{`{"permanent_recipient":"("}`, "permanent_recipient"},
		{`{"storm_retry_after_seconds":-1}`, "storm_retry_after_seconds"},
		{`{"error_rte":0.1}`, "unknown field"},
	} {
		resp, err := http.Post(b.url+"/admin/faults", "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		var msg struct{ Message string }
		decodeJSON(t, resp, &msg)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg.Message, tt.want) {
			t.Errorf("%s: %d %q", tt.body, resp.StatusCode, msg.Message)
		}
	}
	if f := b.srv.Faults(); f.ErrorRate != 0 {
		t.Fatalf("invalid faults were applied: %+v", f)
	}
}

func TestHTTPSurface(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Secret = "" })
	for _, tt := range []struct {
		method, path, body string
		header             map[string]string
		status             int
	}{
		{"GET", "/healthz", "", nil, 200},
		{"GET", "/", "", nil, 405},
		{"POST", "/", `{"type":"x","data":{}}`, nil, 400}, // no webhook-id
		{"POST", "/", `not json`, map[string]string{"webhook-id": "k"}, 400},
		{"POST", "/", strings.Repeat("x", MaxBodyBytes+1), map[string]string{"webhook-id": "k"}, 413},
		{"POST", "/hooks", `{"type":"x","data":{"recipient":"r"}}`, map[string]string{"webhook-id": "k", "owed-notification-id": "77", "owed-tenant": "t9"}, 200},
		{"GET", "/sends?limit=0", "", nil, 400},
		{"GET", "/sends?limit=5", "", nil, 200},
	} {
		req, _ := http.NewRequest(tt.method, b.url+tt.path, strings.NewReader(tt.body))
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
		}
	}
	// The notification id and tenant come from the headers when the body
	// lacks them.
	sends := b.srv.Sends(SendQuery{Key: "k"})
	if len(sends) != 1 || sends[0].NotificationID != 77 || sends[0].Tenant != "t9" {
		t.Fatalf("sends %+v", sends)
	}
	st := b.srv.Stats()
	if st.BadRequests != 3 {
		t.Fatalf("bad requests %d", st.BadRequests)
	}
}

func TestSendsAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Rate, c.Burst, c.MaxSends = pace.Rate{Count: 1000, Per: time.Second}, 100, 2 })
	for i := range int64(3) {
		if _, err := b.sender.Send(context.Background(), delivery(i+1, "a@example.com")); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.srv.Sends(SendQuery{}); len(got) != 2 || got[1].Key != "key-2" {
		t.Fatalf("sends %+v", got)
	}
	if got := b.srv.Sends(SendQuery{Key: "key-1"}); len(got) != 0 {
		t.Fatalf("the oldest send was not forgotten: %+v", got)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Burst: -1}, "burst"},
		{Config{Rate: pace.Rate{Count: 40}}, "rate"},
		{Config{Secret: "whsec_!!"}, "secret"},
		{Config{Faults: Faults{TimeoutRate: 2}}, "timeout_rate"},
	} {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v", tt.cfg, err)
		}
	}
}

func TestServeShutsDownGracefully(t *testing.T) {
	t.Parallel()
	// The longest hang there is: a shutdown that waited for it would hold
	// Serve, and the send, for a minute.
	hang := MaxTimeoutHang
	srv, err := New(Config{Faults: Faults{TimeoutRate: 1, TimeoutSeconds: hang.Seconds()}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	sender, _ := webhook.New(webhook.Config{URL: "http://" + ln.Addr().String(), Timeout: 20 * time.Second})
	// A send that hangs on the injected timeout must not hold shutdown
	// for its full hang. The sender's own timeout is shorter than the hang:
	// a send the shutdown did not end times out on the sender's side
	// instead of being answered 504.
	sent := make(chan error, 1)
	sending := time.Now()
	go func() {
		_, err := sender.Send(context.Background(), delivery(1, "a@example.com"))
		sent <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); srv.Stats().Faults[FaultTimeout] == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the send was not hung within 30 s: stats %+v", srv.Stats())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	// The hang began after sending did, so it could not have ended yet.
	if waited := time.Since(sending); waited >= hang {
		t.Fatalf("Serve returned %s after the send began: it waited out the %s hang", waited, hang)
	}
	if err := <-sent; provider.Classify(err).HTTPStatus != http.StatusGatewayTimeout {
		t.Fatalf("hung send ended with %v, want 504: the shutdown did not answer it", err)
	}
	if _, err := sender.Send(context.Background(), delivery(2, "a@example.com")); !provider.IsTransient(err) {
		t.Fatalf("send after shutdown: %v", err)
	}
}

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
