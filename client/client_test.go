package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/client"
	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
)

func sms(recipient, ref string, at time.Time) client.Notification {
	return client.Notification{Recipient: recipient, Channel: "sms", Kind: "follow_up", RefID: ref, DueAt: at,
		Payload: client.Payload{Text: "hello"}}
}

// fresh is a due time no other run of a test in this process used: the
// tests share one database.
func fresh() time.Time {
	return time.Date(2031, 5, 1, 8, 0, 0, 0, time.UTC).Add(time.Duration(runs.Add(1)) * 24 * time.Hour)
}

var runs atomic.Int64

func TestEveryCall(t *testing.T) {
	ctx := context.Background()
	c := client.New(serverURL, tenantToken)
	at := fresh()
	calls, pagesRef := "T-CALLS-"+at.Format("20060102"), "T-PAGES-"+at.Format("20060102")

	exp := at.Add(time.Hour)
	one := sms("+15551000", calls, at)
	one.ExpiresAt = &exp
	s, err := c.Schedule(ctx, one)
	if err != nil || !s.Created || s.ID < 1 {
		t.Fatalf("Schedule: %+v, %v", s, err)
	}
	d, err := c.Get(ctx, s.ID)
	if err != nil || d.Recipient != "+15551000" || !d.DueAt.Equal(at) || d.ExpiresAt == nil || !d.ExpiresAt.Equal(exp) ||
		d.State != "pending" || d.Payload.Text != "hello" || d.History == nil {
		t.Fatalf("Get: %+v, %v", d, err)
	}

	// The same row in the recipient's local time: due 09:00 in Berlin the
	// day after the clocks went forward.
	local := sms("+15551001", calls+"-LOCAL", time.Time{})
	local.DueLocal, local.TimeZone = "2027-03-29T09:00", "Europe/Berlin"
	s, err = c.Schedule(ctx, local)
	if err != nil || !s.Created {
		t.Fatalf("Schedule in local time: %+v, %v", s, err)
	}
	if d, err = c.Get(ctx, s.ID); err != nil || d.DueAt.UTC().Format(time.RFC3339) != "2027-03-29T07:00:00Z" ||
		d.TimeZone != "Europe/Berlin" || d.DueLocal != "2027-03-29T09:00:00" {
		t.Fatalf("Get of a local-time row: %+v, %v", d, err)
	}

	// Update: by id, then by key, to a new text and a new time.
	u, err := c.Update(ctx, s.ID, client.Update{Payload: &client.Payload{Text: "updated"}})
	if err != nil || !u.Certain || u.ID != s.ID {
		t.Fatalf("Update: %+v, %v", u, err)
	}
	moved := at.Add(2 * time.Hour)
	if u, err = c.UpdateByKey(ctx, "+15551001", "follow_up", calls+"-LOCAL", d.DueAt, client.Update{DueAt: moved}); err != nil ||
		!u.Certain {
		t.Fatalf("UpdateByKey: %+v, %v", u, err)
	}
	if d, err = c.Get(ctx, s.ID); err != nil || d.Payload.Text != "updated" || !d.DueAt.Equal(moved) {
		t.Fatalf("Get after the updates: %+v, %v", d, err)
	}

	// Quiet hours for one recipient only (the tests share the tenant): a
	// row due outside 03:00-03:01 UTC waits for 03:00.
	quiet := "+1555199" + at.Format("20060102")
	if hr, err := c.SetQuietHours(ctx, client.QuietHours{Scope: "recipient:" + quiet,
		Windows: []string{"daily 03:00-03:01"}}); err != nil || hr != (client.HoldResult{}) {
		t.Fatalf("SetQuietHours: %+v, %v", hr, err)
	}
	if qs, err := c.GetQuietHours(ctx); err != nil || !containsScope(qs, "recipient:"+quiet, "daily 03:00-03:01") {
		t.Fatalf("GetQuietHours: %+v, %v; want the recipient's window", qs, err)
	}
	s, err = c.Schedule(ctx, sms(quiet, calls+"-QUIET", at))
	if err != nil {
		t.Fatal(err)
	}
	if d, err = c.Get(ctx, s.ID); err != nil || d.DueAt.UTC().Hour() != 3 || d.DueAt.UTC().Minute() != 0 ||
		d.DueAt.Before(at) {
		t.Fatalf("Get of a row in quiet hours: %+v, %v; want it due at the next 03:00 UTC", d, err)
	}

	// A digest of a kind of this run's own (the tests share the tenant):
	// two rows to one recipient in one window are one digest, due as it
	// closes; turning it off takes them back to their own times.
	kind := "digest_" + at.Format("20060102150405")
	if dr, err := c.SetDigest(ctx, kind, 10*time.Minute); err != nil || dr.Digest != (client.Digest{Kind: kind, Window: "10m0s"}) {
		t.Fatalf("SetDigest: %+v, %v", dr, err)
	}
	if ds, err := c.Digests(ctx); err != nil || !slices.Contains(ds, client.Digest{Kind: kind, Window: "10m0s"}) {
		t.Fatalf("Digests: %+v, %v; want %s among them", ds, err, kind)
	}
	var members []int64
	for i := range 2 {
		n := sms("+15551300", fmt.Sprintf("%s-DIGEST-%d", calls, i), at.Add(time.Duration(i)*time.Minute))
		n.Kind = kind
		s, err := c.Schedule(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, s.ID)
	}
	for _, id := range members {
		if d, err := c.Get(ctx, id); err != nil || d.DigestID != members[0] || !d.DueAt.Equal(at.Add(10*time.Minute)) {
			t.Fatalf("Get of a digest member: %+v, %v; want digest %d due at %s", d, err, members[0], at.Add(10*time.Minute))
		}
	}
	if dr, err := c.SetDigest(ctx, kind, 0); err != nil || dr.Undigested != 2 {
		t.Fatalf("SetDigest off: %+v, %v; want 2 rows undigested", dr, err)
	}

	var many []client.Notification
	for i := range 7 {
		many = append(many, sms(fmt.Sprintf("+1555110%d", i), pagesRef, at.Add(time.Duration(i%3)*time.Minute)))
	}
	res, err := c.ScheduleMany(ctx, many)
	if err != nil || res.Created != 7 || len(res.Notifications) != 7 {
		t.Fatalf("ScheduleMany: %+v, %v", res, err)
	}
	// Page by page, then through All: every row once, newest due first.
	seen := map[int64]bool{}
	opts := client.ListOptions{RefID: pagesRef, Limit: 3}
	pages := 0
	for {
		p, err := c.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range p.Notifications {
			if seen[r.ID] {
				t.Fatalf("row %d on two pages", r.ID)
			}
			seen[r.ID] = true
		}
		if p.NextCursor == "" {
			break
		}
		opts.Cursor = p.NextCursor
	}
	if pages != 3 || len(seen) != 7 {
		t.Fatalf("%d pages, %d rows; want 3 pages of the 7 rows", pages, len(seen))
	}
	var last client.Row
	n := 0
	for r, err := range c.All(ctx, client.ListOptions{RefID: pagesRef, Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && (r.DueAt.After(last.DueAt) || (r.DueAt.Equal(last.DueAt) && r.ID >= last.ID)) {
			t.Fatalf("row %d after %d: not newest due first", r.ID, last.ID)
		}
		last, n = r, n+1
	}
	if n != 7 {
		t.Fatalf("All yielded %d rows, want 7", n)
	}
	if _, err := c.List(ctx, client.ListOptions{Cursor: "not-a-cursor"}); !isAPIError(err, 400, "invalid_field", "cursor") {
		t.Errorf("bad cursor: %v", err)
	}

	ev, err := c.Event(ctx, client.Event{Kind: "shipment", RefID: "S-CALLS", Channel: "sms",
		Payload: client.Payload{Text: "delayed"}, OccurredAt: at, Delay: time.Minute,
		Recipients: []client.EventRecipient{{Recipient: "+15551200"}, {Recipient: "+15551201"}}})
	if err != nil || ev.Created != 2 || ev.Notifications[1].Recipient != "+15551201" {
		t.Fatalf("Event: %+v, %v", ev, err)
	}
	if d, err := c.Get(ctx, ev.Notifications[0].ID); err != nil || !d.DueAt.Equal(at.Add(time.Minute)) {
		t.Fatalf("event row: %+v, %v", d, err)
	}

	// The same event in each recipient's local time: 09:00 in Berlin the
	// day after the clocks went forward, and in New York for the second.
	ev, err = c.Event(ctx, client.Event{Kind: "shipment", RefID: "S-CALLS-LOCAL", Channel: "sms",
		Payload: client.Payload{Text: "delayed"}, DueLocal: "2027-03-29T09:00", TimeZone: "Europe/Berlin",
		Recipients: []client.EventRecipient{{Recipient: "+15551202"}, {Recipient: "+15551203", TimeZone: "America/New_York"}}})
	if err != nil || ev.Created != 2 {
		t.Fatalf("Event in local time: %+v, %v", ev, err)
	}
	for i, want := range []string{"2027-03-29T07:00:00Z", "2027-03-29T13:00:00Z"} {
		if d, err := c.Get(ctx, ev.Notifications[i].ID); err != nil || d.DueAt.UTC().Format(time.RFC3339) != want ||
			d.DueLocal != "2027-03-29T09:00:00" {
			t.Fatalf("local event row %d: %+v, %v; want due %s", i, d, err, want)
		}
	}

	ch, err := c.Reschedule(ctx, "follow_up", calls, at.Add(2*time.Hour))
	if err != nil || ch.Changed != 1 {
		t.Fatalf("Reschedule: %+v, %v", ch, err)
	}
	// A second T-CALLS row for the same recipient: moving the first onto
	// its due time would make two rows of one schedule key.
	if _, err := c.Schedule(ctx, sms("+15551000", calls, at.Add(3*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reschedule(ctx, "follow_up", calls, at.Add(3*time.Hour)); !isAPIError(err, 409, "conflict", "due_at") {
		t.Errorf("Reschedule onto an existing row: %v, want 409 conflict on due_at", err)
	}
	if ch, err := c.Snooze(ctx, "follow_up", pagesRef, 10*time.Minute); err != nil || ch.Changed != 7 {
		t.Fatalf("Snooze: %+v, %v", ch, err)
	}
	if ch, err := c.Cancel(ctx, "follow_up", pagesRef); err != nil || ch.Changed != 7 {
		t.Fatalf("Cancel: %+v, %v", ch, err)
	}
	if d, err := c.Get(ctx, res.Notifications[0].ID); err != nil || d.State != "cancelled" || d.SettledAt == nil {
		t.Fatalf("cancelled row: %+v, %v", d, err)
	}

	if _, err := client.New(serverURL, tenantToken, client.WithTenant("globex")).Get(ctx, s.ID); !isAPIError(err, 403, "forbidden", "tenant") {
		t.Errorf("another tenant: %v", err)
	}
	if _, err := client.New(serverURL, "wrong").List(ctx, client.ListOptions{}); !isAPIError(err, 401, "unauthorized", "") {
		t.Errorf("bad token: %v", err)
	}
	if _, err := client.New(serverURL, serviceToken, client.WithTenant("acme")).Get(ctx, s.ID); err != nil {
		t.Errorf("service token naming the tenant: %v", err)
	}
}

// containsScope says whether qs holds scope with window among its windows.
func containsScope(qs []client.QuietHours, scope, window string) bool {
	for _, q := range qs {
		if q.Scope == scope && slices.Contains(q.Windows, window) {
			return true
		}
	}
	return false
}

func isAPIError(err error, status int, code, field string) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status == status && e.Code == code && e.Field == field && e.RequestID != ""
}

// flaky answers 503 to the first fails requests, then passes them to the
// real API, counting every request.
type flaky struct {
	fails, seen atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.seen.Add(1) <= f.fails.Load() {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "flaky")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":{"code":"internal","message":"try again"}}`))
		return
	}
	apiHandler.ServeHTTP(w, r)
}

func TestRetriesOnlyIdempotentCalls(t *testing.T) {
	ctx := context.Background()
	f := &flaky{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := client.New(srv.URL, tenantToken)
	at := fresh()

	f.fails.Store(2)
	if _, err := c.Schedule(ctx, sms("+15552000", "T-RETRY", at)); err != nil || f.seen.Load() != 3 {
		t.Fatalf("Schedule through two 503s: %v after %d requests, want success on the 3rd", err, f.seen.Load())
	}
	f.seen.Store(0)
	f.fails.Store(1)
	if _, err := c.Snooze(ctx, "follow_up", "T-RETRY", time.Minute); !isAPIError(err, 503, "internal", "") ||
		f.seen.Load() != 1 {
		t.Fatalf("Snooze: %v after %d requests, want the 503 after one (it is not idempotent)", err, f.seen.Load())
	}
	f.seen.Store(0)
	f.fails.Store(0)
	if _, err := c.Get(ctx, 0); !isAPIError(err, 400, "invalid_field", "id") || f.seen.Load() != 1 {
		t.Fatalf("a 400: %v after %d requests, want one", err, f.seen.Load())
	}
	// A cancelled context ends the retries.
	f.seen.Store(0)
	f.fails.Store(1 << 40)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		for f.seen.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := c.List(cctx, client.ListOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("List with a cancelled context: %v, want context.Canceled", err)
	}
	f.seen.Store(0)
	if _, err := client.New(srv.URL, tenantToken, client.WithRetry(0)).List(ctx, client.ListOptions{}); err == nil ||
		f.seen.Load() != 1 {
		t.Fatalf("WithRetry(0): %v after %d requests, want one", err, f.seen.Load())
	}
}

// limited is the real API with a limiter on a stub clock that stands still
// but for the wait a 429 asks for: the server moves it on by the
// Retry-After it answered, so the next request passes whenever it comes,
// and records, on the real clock, how long the client waited.
type limited struct {
	h        http.Handler
	clk      *clock.Stub
	refusals atomic.Int64
	mu       sync.Mutex
	// refusedAt is when the last 429 was answered; waited is the time from
	// it to the next request.
	refusedAt time.Time
	waited    time.Duration
}

func newLimited(t *testing.T, lim *api.Limiter) (*limited, string) {
	t.Helper()
	clk := clock.NewStub(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l := &limited{clk: clk, h: checked(api.New(api.Options{Ledger: ledger.New(apiDB.App, nil),
		Tokens: api.NewTokens(apiDB.App, nil), Log: zerolog.Nop(), Clock: clk, Limits: lim}))}
	srv := httptest.NewServer(l)
	t.Cleanup(srv.Close)
	return l, srv.URL
}

func (l *limited) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.refusedAt.IsZero() {
		l.waited, l.refusedAt = time.Since(l.refusedAt), time.Time{}
	}
	rec := httptest.NewRecorder()
	l.h.ServeHTTP(rec, r)
	if rec.Code == http.StatusTooManyRequests {
		l.refusals.Add(1)
		secs, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
		l.clk.Advance(time.Duration(secs) * time.Second)
		l.refusedAt = time.Now()
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// A tenant over its limit is answered 429 with Retry-After: the client
// waits that long before its retry, which then succeeds, rather than
// retrying on its own schedule into more 429s; when the wait would end past
// its retry budget it returns the 429 at once, with RetryAfter set.
func TestRetryHonoursRetryAfter(t *testing.T) {
	ctx := context.Background()
	srv, url := newLimited(t, api.NewLimiter(api.Limits{Rate: 1}, nil))
	c := client.New(url, tenantToken)
	for i := range 2 {
		if _, err := c.List(ctx, client.ListOptions{Limit: 1}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := srv.refusals.Load(); n != 1 || srv.waited < time.Second {
		t.Errorf("the server refused %d calls and the client retried %s after the 429; want one refusal and "+
			"a retry no sooner than its Retry-After of 1 s", n, srv.waited)
	}

	srv, url = newLimited(t, api.NewLimiter(api.Limits{Rate: 0.1}, nil))
	c = client.New(url, tenantToken, client.WithRetry(2*time.Second))
	if _, err := c.List(ctx, client.ListOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := c.List(ctx, client.ListOptions{Limit: 1})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.Code != "rate_limited" || e.RetryAfter != 10*time.Second {
		t.Fatalf("over the limit with a 2 s budget: %v, want the 429 with RetryAfter 10s", err)
	}
	if n := srv.refusals.Load(); n != 1 {
		t.Errorf("the server refused %d calls, want one: a wait past the budget is not tried", n)
	}
}
