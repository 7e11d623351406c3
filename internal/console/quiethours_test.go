package console_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// A row held for quiet hours says so on its page, in its list and on its
// timeline, "held for quiet hours until …" in the row's zone as the API's
// hold field says it; the tenant's windows are on the quiet-hours page.
func TestConsoleShowsTheHoldAndTheWindows(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	ctx := context.Background()
	// A window that opens two hours from now on a Tokyo clock, the row's,
	// so a row due now is held until then, whatever the time the test runs
	// at.
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	open, shut := now.Add(2*time.Hour).In(tokyo), now.Add(3*time.Hour).In(tokyo)
	window := fmt.Sprintf("daily %s-%s", open.Format("15:04"), shut.Format("15:04"))
	if _, err := b.stack.Ledger.SetQuietHours(ctx, "acme", ledger.QuietHours{Scope: "tenant", Windows: []string{window}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.stack.Ledger.SetQuietHours(ctx, "acme", ledger.QuietHours{Scope: "kind:digest",
		Windows: []string{"mon-fri 08:00-20:00"}, TimeZone: "Europe/Berlin"}); err != nil {
		t.Fatal(err)
	}
	row := b.stack.Schedule(t, "acme", 1, now, func(_ int, r *ledger.NewNotification) { r.TimeZone = "Asia/Tokyo" })[0]
	d, err := b.stack.Ledger.Get(ctx, "acme", row.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "held for quiet hours until " + open.Truncate(time.Minute).Format(time.RFC3339); d.Hold != want {
		t.Fatalf("the ledger's hold %q, want %q: the opening in Tokyo time", d.Hold, want)
	}
	c := b.login(t, "alice")
	get := func(path string) string {
		t.Helper()
		resp, body := do(t, c, "GET", b.srv.URL+path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s answered %d: %s", path, resp.StatusCode, body)
		}
		return html.UnescapeString(body)
	}
	page := get(fmt.Sprintf("/console/notifications/%d", row.ID))
	if !strings.Contains(page, `id="hold">`+d.Hold) || !strings.Contains(page, "Asia/Tokyo") {
		t.Errorf("the row's page does not say %q in its zone: %s", d.Hold, page)
	}
	if !strings.Contains(page, "<td>held for quiet hours</td>") {
		t.Errorf("the timeline has no hold step: %s", page)
	}
	if list := get("/console/notifications?tenant=acme"); !strings.Contains(list, `<small class="hold">`+d.Hold+`</small>`) {
		t.Errorf("the list does not say %q: %s", d.Hold, list)
	}
	quiet := get("/console/quiet-hours?tenant=acme")
	for _, want := range []string{"<td>tenant</td><td>" + window + "</td><td>UTC</td>",
		"<td>kind:digest</td><td>mon-fri 08:00-20:00</td><td>Europe/Berlin</td>"} {
		if !strings.Contains(quiet, want) {
			t.Errorf("the quiet-hours page lacks %q: %s", want, quiet)
		}
	}
	if none := get("/console/quiet-hours?tenant=globex"); !strings.Contains(none, `id="no-quiet-hours"`) {
		t.Errorf("a tenant without windows: %s", none)
	}
}
