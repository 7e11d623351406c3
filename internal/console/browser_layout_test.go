package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider/sandbox"
)

// viewport sets the page's width and its prefers-color-scheme.
func viewport(width int64, theme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := chromedp.EmulateViewport(width, 900)(ctx, tg); err != nil {
			return err
		}
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: theme}}})
		return err
	})
}

// layoutProbe reads what the layout checks need: how far the page is wider
// than the window, the body's background, the header's, and each nav
// link's colour and whether it lies within the header.
const layoutProbe = `(() => {
  const header = document.querySelector("header"), hr = header.getBoundingClientRect();
  const links = [...document.querySelectorAll("header nav a")].map(a => {
    const r = a.getBoundingClientRect();
    return {text: a.textContent, color: getComputedStyle(a).color,
            inside: r.left >= hr.left - 0.5 && r.right <= hr.right + 0.5 && r.top >= hr.top - 0.5 && r.bottom <= hr.bottom + 0.5};
  });
  return JSON.stringify({over: document.documentElement.scrollWidth - window.innerWidth,
    body: getComputedStyle(document.body).backgroundColor, header: getComputedStyle(header).backgroundColor, links});
})()`

type layout struct {
	Over   float64
	Body   string
	Header string
	Links  []struct {
		Text, Color string
		Inside      bool
	}
}

// luminance is the relative luminance (WCAG 2) of a CSS rgb() or rgba()
// colour.
func luminance(t *testing.T, css string) float64 {
	t.Helper()
	var r, g, b float64
	inner := css[strings.Index(css, "(")+1 : strings.LastIndex(css, ")")]
	if _, err := fmt.Sscanf(strings.ReplaceAll(inner, ",", " "), "%f %f %f", &r, &g, &b); err != nil {
		t.Fatalf("colour %q: %v", css, err)
	}
	lin := func(c float64) float64 {
		c /= 255
		if c <= 0.03928 {
			return c / 12.92
		}
		return math.Pow((c+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(r) + 0.7152*lin(g) + 0.0722*lin(b)
}

// contrast is the WCAG contrast ratio of two colours.
func contrast(t *testing.T, a, b string) float64 {
	la, lb := luminance(t, a), luminance(t, b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

// checkLayout asserts the page has no horizontal overflow, its nav links
// sit in the header and read at a contrast of 4.5:1 at least, and the body
// is the theme's.
func checkLayout(t *testing.T, b context.Context, page string, width int64, theme string) {
	t.Helper()
	raw, err := chromedp.Run(b, chromedp.Evaluate[string](layoutProbe))
	if err != nil {
		t.Fatalf("%s: read the layout: %v", page, err)
	}
	var l layout
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatalf("%s: %v: %s", page, err, raw)
	}
	where := fmt.Sprintf("%s at %d px, %s", page, width, theme)
	if l.Over > 0 {
		t.Errorf("%s: the page is %v px wider than the window", where, l.Over)
	}
	if len(l.Links) < 6 {
		t.Errorf("%s: %d nav links, want 6", where, len(l.Links))
	}
	for _, a := range l.Links {
		if !a.Inside {
			t.Errorf("%s: the nav link %q lies outside the header", where, a.Text)
		}
		if c := contrast(t, a.Color, l.Header); c < 4.5 {
			t.Errorf("%s: the nav link %q reads at %.1f:1 on the header (%s on %s), want 4.5:1", where, a.Text, c, a.Color, l.Header)
		}
	}
	if lum := luminance(t, l.Body); (theme == "dark") != (lum < 0.05) {
		t.Errorf("%s: the body's background %s (luminance %.2f) is not the %s theme's", where, l.Body, lum, theme)
	}
}

// The console in a real browser, second round: filter the notifications,
// cancel, reschedule, send now and redrive rows from their page, read the
// history charts, and every page at 390 px and 1,400 px, light and dark,
// without horizontal scrolling and with a legible nav (screenshots of each
// in the artefacts).
func TestBrowserActsFiltersChartsAndFits(t *testing.T) {
	chromium(t)
	dir := artifacts(t)
	s := startStack(t)
	ctx := context.Background()
	if err := s.SandboxClient.SetFaults(ctx, sandbox.Faults{PermanentRecipient: "bounce"}); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(-time.Minute)
	sent := s.Schedule(t, "acme", 4, due, nil)
	bounced := s.Schedule(t, "acme", 1, due, func(_ int, r *ledger.NewNotification) {
		r.Recipient, r.RefID = "bounce-1", "ref-bounce"
	})[0]
	later := s.Schedule(t, "acme", 3, time.Now().Add(time.Hour), func(i int, r *ledger.NewNotification) {
		r.Recipient = fmt.Sprintf("later-%d", i)
	})
	for _, r := range sent {
		s.waitState(t, "acme", r.ID, ledger.StateDelivered)
	}
	s.waitState(t, "acme", bounced.ID, ledger.StateFailed)
	s.waitFor(t, "the bounced row's dead letter", func() bool {
		st, err := s.Queue.Stats(ctx)
		return err == nil && st.DeadLetterDepth == 1
	})

	b := browser(t)
	run(t, b, "log in", viewport(1400, "light"), chromedp.Navigate(s.console),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="operator"]`), "carol"),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token),
		chromedp.Click(chromedp.CSS(`button.primary`)),
		chromedp.WaitVisible(chromedp.CSS(`#owed`)))

	// Filters: the form's tenant and state.
	run(t, b, "filter the pending rows", chromedp.Navigate(s.console+"notifications"),
		chromedp.WaitVisible(chromedp.CSS(`#filters`)),
		chromedp.SendKeys(chromedp.CSS(`#filters input[name="tenant"]`), "acme"),
		chromedp.SetValue(chromedp.CSS(`#filters select[name="state"]`), "pending"),
		chromedp.Click(chromedp.CSS(`#find`)),
		chromedp.WaitVisible(chromedp.CSS(`#results`)))
	list := text(t, b, "#results")
	if strings.Count(list, "pending") != len(later) || strings.Contains(list, "delivered") || !strings.Contains(list, "later-2") {
		t.Errorf("the pending filter lists: %s", list)
	}
	if counts := strings.Join(strings.Fields(text(t, b, "#counts")), " "); !strings.Contains(counts, "3 match") {
		t.Errorf("the counts read %q, want 3 matching", counts)
	}
	screenshot(t, b, dir, "list-filtered")
	run(t, b, "filter by recipient prefix and settle time", chromedp.Navigate(s.console+
		"notifications?tenant=acme&recipient_prefix=bounce&settled_from="+time.Now().Add(-time.Hour).UTC().Format("2006-01-02T15:04")),
		chromedp.WaitVisible(chromedp.CSS(`#results`)))
	if list := text(t, b, "#results"); !strings.Contains(list, "bounce-1") || strings.Contains(list, "later-") {
		t.Errorf("the prefix and settle filter lists: %s", list)
	}

	// Cancel later-0 from its page.
	act := func(id int64, verb, reason string, more ...chromedp.Action[chromedp.Void]) string {
		t.Helper()
		steps := []chromedp.Action[chromedp.Void]{chromedp.Navigate(fmt.Sprintf("%snotifications/%d", s.console, id)),
			chromedp.WaitVisible(chromedp.CSS(`#act-why`)), chromedp.SendKeys(chromedp.CSS(`#act-why`), reason)}
		steps = append(steps, more...)
		steps = append(steps, chromedp.Click(chromedp.CSS(`#act-`+verb)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
		run(t, b, verb+" row "+fmt.Sprint(id), steps...)
		run(t, b, "confirm the "+verb, chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#result`)))
		return text(t, b, "#result")
	}
	if got := act(later[0].ID, "cancel", "customer unsubscribed"); !strings.Contains(got, "now cancelled") {
		t.Errorf("the cancel says %q", got)
	}
	if st := text(t, b, "#state"); st != "cancelled" {
		t.Errorf("the cancelled row's page reads %q", st)
	}
	screenshot(t, b, dir, "notification-cancelled")
	newDue := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Minute)
	if got := act(later[1].ID, "reschedule", "asked to be reminded later",
		chromedp.SetValue(chromedp.CSS(`#act-due`), newDue.Format("2006-01-02T15:04"))); !strings.Contains(got, "now pending") {
		t.Errorf("the reschedule says %q", got)
	}
	if d, _ := s.Ledger.Get(ctx, "acme", later[1].ID); !d.DueAt.Equal(newDue) {
		t.Errorf("the rescheduled row is due %s, want %s", d.DueAt, newDue)
	}
	act(later[2].ID, "send-now", "customer waiting on the phone")
	s.waitState(t, "acme", later[2].ID, ledger.StateDelivered)

	// The history: the cron's first sample is in already.
	run(t, b, "open the dashboard", chromedp.Navigate(s.console), chromedp.WaitVisible(chromedp.CSS(`#history`)))
	for _, id := range []string{"hist-backlog", "hist-oldest", "hist-dlq"} {
		n, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("#`+id+` svg path").length`))
		if err != nil || n == 0 {
			t.Errorf("the chart %s draws %d lines (%v), want the sweeper's samples", id, n, err)
		}
	}
	run(t, b, "the day's charts", chromedp.Click(chromedp.CSS(`#range-day`)), chromedp.WaitVisible(chromedp.CSS(`#range-hour`)))
	if h := text(t, b, "#history h2"); !strings.Contains(h, "last day") {
		t.Errorf("the day's history is titled %q", h)
	}

	// Every page at a phone's width and a desktop's, light and dark; the
	// bounced row still failed, its dead letter still listed.
	pages := []struct{ name, path, wait string }{
		{"dashboard", "", "#history"},
		{"notifications", "notifications?tenant=acme", "#results"},
		{"notification", fmt.Sprintf("notifications/%d", bounced.ID), "#timeline"},
		{"deadletters", "dead-letters", "#deadletters"},
		{"pauses", "pauses", "#hold-account"},
		{"audit", "audit", "#audit"},
		{"sessions", "sessions", "#sessions"},
	}
	for _, width := range []int64{390, 1400} {
		for _, theme := range []string{"light", "dark"} {
			for _, p := range pages {
				run(t, b, "open "+p.name, viewport(width, theme), chromedp.Navigate(s.console+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait)))
				checkLayout(t, b, p.name, width, theme)
				screenshot(t, b, dir, fmt.Sprintf("%s-%d-%s", p.name, width, theme))
			}
			if width == 390 {
				run(t, b, "open the dead letters", chromedp.Navigate(s.console+"dead-letters"), chromedp.WaitVisible(chromedp.CSS(`#deadletters td.reason`)))
				w, err := chromedp.Run(b, chromedp.Evaluate[float64](`document.querySelector("#deadletters td.reason").getBoundingClientRect().width`))
				if err != nil || w < 200 {
					t.Errorf("the dead letter's reason is %v px wide at 390 px (%v): a word per line", w, err)
				}
			}
		}
	}

	// The bounced row: a redrive is refused until forced.
	run(t, b, "open the bounced row", viewport(1400, "light"), chromedp.Navigate(fmt.Sprintf("%snotifications/%d", s.console, bounced.ID)),
		chromedp.WaitVisible(chromedp.CSS(`#permanent`)),
		chromedp.SendKeys(chromedp.CSS(`#act-why`), "try again"),
		chromedp.Click(chromedp.CSS(`#act-redrive`)),
		chromedp.WaitVisible(chromedp.CSS(`.error[role="alert"]`)))
	if e := text(t, b, `.error[role="alert"]`); !strings.Contains(e, "failed permanently") {
		t.Errorf("the unforced redrive says %q", e)
	}
	if err := s.SandboxClient.SetFaults(ctx, sandbox.Faults{}); err != nil {
		t.Fatal(err)
	}
	if got := act(bounced.ID, "redrive", "address corrected", chromedp.Click(chromedp.CSS(`#act-force`))); !strings.Contains(got, "now pending") || !strings.Contains(got, "1 dead letter(s) removed") {
		t.Errorf("the forced redrive says %q", got)
	}
	s.waitState(t, "acme", bounced.ID, ledger.StateDelivered)
	s.waitFor(t, "the redriven row's dead letter removed", func() bool {
		st, err := s.Queue.Stats(ctx)
		return err == nil && st.DeadLetterDepth == 0
	})
	run(t, b, "open the audit trail", chromedp.Navigate(s.console+"audit"), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	audit := text(t, b, "#audit")
	for _, want := range []string{"notification_cancel", "notification_reschedule", "notification_send_now", "notification_redrive", "carol", "address corrected"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit trail lacks %q: %s", want, audit)
		}
	}
}
