package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweeper"
	"github.com/owedhq/owed/internal/testenv"
	"github.com/owedhq/owed/internal/worker"
)

// The browser tests drive headless Chromium (Debian's chromium, installed by
// scripts/install-deps.sh) against a running stack: a real Postgres, the
// queue emulator, the sandbox provider, the sweeper (its console on the
// operator listener, its cron endpoint called in a loop) and a worker. Each
// main page is saved as a PNG in ArtifactsVariable's directory.

// ArtifactsVariable names the directory the screenshots go to; unset, they
// go to bin/artifacts/console at the top of the repository.
const ArtifactsVariable = "OWED_CONSOLE_ARTIFACTS"

// ChromiumVariable names the browser binary; unset, chromium (or
// chromium-browser, google-chrome) is looked up on PATH.
const ChromiumVariable = "OWED_CHROMIUM"

const cronSecret = "browser-test-cron-secret-0123456789"

func chromium(t *testing.T) string {
	if p := os.Getenv(ChromiumVariable); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "a Chromium binary", "apt-get install chromium (scripts/install-deps.sh does), or set "+ChromiumVariable)
	return ""
}

func artifacts(t *testing.T) string {
	dir := os.Getenv(ArtifactsVariable)
	if dir == "" {
		dir = filepath.Join("..", "..", "bin", "artifacts", "console")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	t.Logf("screenshots in %s", abs)
	return dir
}

// runningStack is a stack with the sweeper and a worker running.
type runningStack struct {
	*stacktest.Stack
	console       string
	workerMetrics *prometheus.Registry
}

func startStack(t *testing.T) *runningStack {
	t.Helper()
	s := stacktest.New(t, stacktest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := sweeper.Defaults()
	cfg.CronSecret, cfg.ConsoleToken = cronSecret, token
	cfg.PublishAhead = 0
	srv, err := sweeper.New(cfg, s.Ledger, s.Queue, zerolog.Nop(), nil, sweeper.WithOperator(s.Operator))
	if err != nil {
		t.Fatal(err)
	}
	public := httptest.NewServer(srv.Handler())
	opsSrv := httptest.NewServer(srv.OpsHandler())
	t.Cleanup(public.Close)
	t.Cleanup(opsSrv.Close)
	// The hosted cron: a sweep every 200 ms until the test ends.
	go func() {
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, "POST", public.URL+"/cron/sweep", nil)
			req.Header.Set("Authorization", "Bearer "+cronSecret)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Options{Ledger: s.Ledger, Queue: s.Queue, Metrics: worker.NewMetrics(reg),
		Route: func(string) (provider.Sender, error) { return s.Sender, nil },
		Pace:  func(string) worker.Pacer { return stacktest.Unpaced{} }, Log: zerolog.Nop(), NoUndeliverable: true,
		QueueDelayMax: 300 * time.Millisecond, Concurrency: 4, VisibilityTimeout: 10 * time.Second, SendTimeout: 5 * time.Second, ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &runningStack{Stack: s, console: opsSrv.URL + "/console/", workerMetrics: reg}
}

// workerGauge is the worker's gauge name{label=value}, or -1 when it has
// no such series.
func (s *runningStack) workerGauge(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := s.workerMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// waitFor polls ok until it holds, or fails the test after two minutes.
func (s *runningStack) waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 2 minutes", what)
		}
	}
}

// waitState polls the ledger until the row is in state.
func (s *runningStack) waitState(t *testing.T, tenant string, id int64, state ledger.State) {
	t.Helper()
	s.waitFor(t, fmt.Sprintf("row %d %s", id, state), func() bool {
		got, err := s.Ledger.Get(context.Background(), tenant, id)
		return err == nil && got.State == state
	})
}

func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first call starts the browser, which lives as long as its
	// context: no timeout here, each step has its own (step).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// stepTimeout bounds one step in the browser, however loaded the machine.
const stepTimeout = 2 * time.Minute

func step(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, stepTimeout)
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	ctx, cancel := step(ctx)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := step(ctx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
		t.Fatalf("wait for %s: %v", sel, err)
	}
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := step(ctx)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// The on-call path in a real browser: log in, read the dashboard, find a
// notification and its timeline, redrive a dead letter and see its row
// delivered, hold the provider account and see sends stop, resume it and
// see them go.
func TestBrowserOnCall(t *testing.T) {
	bin := chromium(t)
	t.Logf("chromium: %s", bin)
	dir := artifacts(t)
	s := startStack(t)
	ctx := context.Background()
	if err := s.SandboxClient.SetFaults(ctx, sandbox.Faults{PermanentRecipient: "bounce"}); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(-time.Minute)
	rows := s.Schedule(t, "acme", 6, due, nil)
	bounced := s.Schedule(t, "acme", 1, due, func(_ int, r *ledger.NewNotification) { r.Recipient, r.RefID = "bounce-1", "ref-bounce" })[0]
	later := s.Schedule(t, "acme", 3, time.Now().Add(time.Hour), func(i int, r *ledger.NewNotification) { r.Recipient = fmt.Sprintf("later-%d", i) })
	for _, r := range rows {
		s.waitState(t, "acme", r.ID, ledger.StateDelivered)
	}
	s.waitState(t, "acme", bounced.ID, ledger.StateFailed)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if st, err := s.Queue.Stats(ctx); err == nil && st.DeadLetterDepth == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the bounced row's message was not dead-lettered within a minute")
		}
	}

	b := browser(t)
	run(t, b, "open the login form", chromedp.Navigate(s.console), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
	screenshot(t, b, dir, "login")
	run(t, b, "log in",
		chromedp.SendKeys(chromedp.CSS(`input[name="operator"]`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token),
		chromedp.Click(chromedp.CSS(`button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`#owed`)))
	if got := text(t, b, "#owed"); got != fmt.Sprint(len(later)) {
		t.Errorf("the dashboard's owed backlog reads %q, want %d (the rows due in an hour)", got, len(later))
	}
	if got := text(t, b, "#spm-total"); got != fmt.Sprintf("%d in the last hour", len(rows)) {
		t.Errorf("the dashboard's sends read %q, want the %d accepted sends", got, len(rows))
	}
	if got := text(t, b, "#dlq"); got != "1" {
		t.Errorf("the dashboard's dead letters read %q, want 1", got)
	}
	bars, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("svg.chart rect").length`))
	if err != nil {
		t.Fatalf("count the chart's bars: %v", err)
	}
	if bars != int(time.Hour/time.Minute) {
		t.Errorf("the chart has %d bars, want one a minute for an hour", bars)
	}
	screenshot(t, b, dir, "dashboard")

	run(t, b, "find by tenant and recipient", chromedp.Navigate(s.console+"notifications"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="tenant"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="tenant"]`), "acme"),
		chromedp.SendKeys(chromedp.CSS(`input[name="recipient"]`), "r3"),
		chromedp.Click(chromedp.CSS(`#find`)),
		chromedp.WaitVisible(chromedp.CSS(`#results`)))
	screenshot(t, b, dir, "find")
	run(t, b, "open the row", chromedp.Click(chromedp.CSS(`#results tbody a`)), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	timeline := text(t, b, "#timeline")
	// No "published": a worker may claim the row before the sweep marks it
	// queued, and then the row keeps no publish time.
	for _, want := range []string{"scheduled", "due", "claimed", "attempt 1", "accepted", "delivered", "settled"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("the timeline lacks %q: %s", want, timeline)
		}
	}
	if state := text(t, b, "#state"); state != "delivered" {
		t.Errorf("the row's state reads %q, want delivered", state)
	}
	screenshot(t, b, dir, "notification")

	// The provider is fixed: redrive the bounced row's dead letter.
	if err := s.SandboxClient.SetFaults(ctx, sandbox.Faults{}); err != nil {
		t.Fatal(err)
	}
	run(t, b, "list the dead letters", chromedp.Navigate(s.console+"dead-letters?tenant=acme"),
		chromedp.WaitVisible(chromedp.CSS(`#deadletters`)))
	if list := text(t, b, "#deadletters"); !strings.Contains(list, "bounce-1") {
		t.Fatalf("the dead letters lack the bounced row: %s", list)
	}
	screenshot(t, b, dir, "deadletters")
	run(t, b, "redrive the selected one",
		chromedp.Click(chromedp.CSS(`#deadletters tbody input[type="checkbox"]`)),
		chromedp.Click(chromedp.CSS(`button[value="redrive-selected"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	screenshot(t, b, dir, "confirm")
	run(t, b, "confirm", chromedp.SendKeys(chromedp.CSS(`input[name="why"]`), "provider fixed"),
		chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if got := text(t, b, "#result"); !strings.Contains(got, "Redrove 1") {
		t.Errorf("the redrive says %q", got)
	}
	s.waitState(t, "acme", bounced.ID, ledger.StateDelivered)
	run(t, b, "open the redriven row", chromedp.Navigate(fmt.Sprintf("%snotifications/%d", s.console, bounced.ID)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	if state := text(t, b, "#state"); state != "delivered" {
		t.Errorf("the redriven row's page reads %q, want delivered", state)
	}
	if tl := text(t, b, "#timeline"); !strings.Contains(tl, "attempt 2") || !strings.Contains(tl, "permanent") {
		t.Errorf("the redriven row's timeline lacks its failed first and accepted second attempt: %s", tl)
	}
	screenshot(t, b, dir, "redriven")
	run(t, b, "open the audit trail", chromedp.Navigate(s.console+"audit"), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	if a := text(t, b, "#audit"); !strings.Contains(a, "dlq_redrive") || !strings.Contains(a, "alice") {
		t.Errorf("the audit trail lacks alice's redrive: %s", a)
	}

	// Hold the provider account: sends stop, rows wait without an attempt.
	sentBefore, err := s.SandboxClient.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b, "hold the account", chromedp.Navigate(s.console+"pauses"),
		chromedp.WaitVisible(chromedp.CSS(`#hold-account`)),
		chromedp.SendKeys(chromedp.CSS(`#hold-name`), "sandbox"),
		chromedp.SendKeys(chromedp.CSS(`#hold-why`), "carrier incident"),
		chromedp.Click(chromedp.CSS(`#hold-account`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
		chromedp.Click(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`#result`)))
	if got := text(t, b, "#result"); !strings.Contains(got, "sandbox is held") {
		t.Errorf("the hold says %q", got)
	}
	// Another process's hold reaches a worker when its reading of the
	// pauses is renewed (at most pace.CacheFor old): schedule once it has.
	s.waitFor(t, "the worker sees the hold", func() bool {
		return s.workerGauge(t, "owed_worker_operator_pauses", "kind", "account") == 1
	})
	held := s.Schedule(t, "acme", 3, time.Now(), func(i int, r *ledger.NewNotification) { r.Recipient = fmt.Sprintf("held-%d", i) })
	// A held row is left pending (the sweep leases nothing for a held
	// account), or, published before the sweep read the hold, left in the
	// queue (the worker receives nothing while every account it serves is
	// held) or claimed and given back.
	for _, r := range held {
		s.waitFor(t, fmt.Sprintf("row %d held back", r.ID), func() bool {
			d, err := s.Ledger.Get(ctx, "acme", r.ID)
			return err == nil && (d.State == ledger.StatePending || d.State == ledger.StateQueued ||
				strings.Contains(d.LastError, "held by alice"))
		})
	}
	// A few of the worker's pause readings later, still nothing sent.
	time.Sleep(3 * pace.CacheFor)
	for _, r := range held {
		if d, _ := s.Ledger.Get(ctx, "acme", r.ID); d.State.Settled() || d.Attempts != 0 {
			t.Errorf("held row %d is %s with %d attempts, want owed with none", r.ID, d.State, d.Attempts)
		}
	}
	if st, err := s.SandboxClient.Stats(ctx); err != nil || st.Accepted != sentBefore.Accepted {
		t.Errorf("the sandbox accepted %d sends while the account was held (%v)", st.Accepted-sentBefore.Accepted, err)
	}
	run(t, b, "open the pauses", chromedp.Navigate(s.console+"pauses"), chromedp.WaitVisible(chromedp.CSS(`#accounts`)))
	if acc := text(t, b, "#accounts"); !strings.Contains(acc, "held") || !strings.Contains(acc, "carrier incident") {
		t.Errorf("the pauses page does not show the hold: %s", acc)
	}
	screenshot(t, b, dir, "pauses")
	// The dashboard's figures are at most half a refresh old.
	s.waitFor(t, "the dashboard shows the held account", func() bool {
		run(t, b, "open the dashboard", chromedp.Navigate(s.console), chromedp.WaitVisible(chromedp.CSS(`#pace`)))
		return strings.Contains(text(t, b, "#pace"), "held")
	})
	screenshot(t, b, dir, "dashboard-held")

	// Resume it: the held rows go out.
	run(t, b, "resume the account", chromedp.Navigate(s.console+"pauses"),
		chromedp.WaitVisible(chromedp.CSS(`#resume-account-sandbox`)),
		chromedp.Click(chromedp.CSS(`#resume-account-sandbox`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
		chromedp.Click(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`#result`)))
	for _, r := range held {
		s.waitState(t, "acme", r.ID, ledger.StateDelivered)
	}
	run(t, b, "open the audit trail", chromedp.Navigate(s.console+"audit"), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	if a := text(t, b, "#audit"); !strings.Contains(a, "account_hold") || !strings.Contains(a, "account_resume") {
		t.Errorf("the audit trail lacks the hold and the resume: %s", a)
	}
	screenshot(t, b, dir, "audit")

	run(t, b, "open the sessions", chromedp.Navigate(s.console+"sessions"), chromedp.WaitVisible(chromedp.CSS(`#sessions`)))
	if list := text(t, b, "#sessions"); !strings.Contains(list, "alice") || !strings.Contains(list, "(this one)") {
		t.Errorf("the sessions page lacks alice's own session: %s", list)
	}
	screenshot(t, b, dir, "sessions")
	run(t, b, "log out", chromedp.Click(chromedp.CSS(`.who button`)), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
	run(t, b, "open the dashboard after the logout", chromedp.Navigate(s.console), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
}
