package console_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

var (
	rowLink  = regexp.MustCompile(`<td><a href="/console/notifications/(\d+)">`)
	nextLink = regexp.MustCompile(`<a href="(/console/notifications\?[^"]*)" id="next-page">`)
)

// The list filters a tenant's rows, pages them with the keyset cursor (50
// a page, each row linked), and counts the matches by state.
func TestNotificationsListFiltersPagesAndCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, token, "")
	due := time.Now().Add(time.Hour)
	b.stack.Schedule(t, "acme", 60, due, func(i int, r *ledger.NewNotification) {
		r.Recipient, r.DueAt = fmt.Sprintf("+4420%03d", i), due.Add(time.Duration(i)*time.Second)
		if i%3 == 0 {
			r.Kind = "digest"
		}
	})
	b.stack.Schedule(t, "acme", 5, due, func(i int, r *ledger.NewNotification) { r.Recipient = fmt.Sprintf("+331%d", i) })
	b.stack.Schedule(t, "globex", 5, due, func(i int, r *ledger.NewNotification) { r.Recipient = fmt.Sprintf("+4420%03d", i) })
	c := b.login(t, "alice")
	get := func(path string) string {
		t.Helper()
		resp, body := do(t, c, "GET", b.srv.URL+path, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s answered %d: %s", path, resp.StatusCode, body)
		}
		return body
	}
	page := get("/console/notifications?tenant=acme&recipient_prefix=%2B4420")
	if n := len(rowLink.FindAllString(page, -1)); n != 50 {
		t.Errorf("the first page links %d rows, want 50", n)
	}
	if !strings.Contains(page, "<strong>60</strong> match") || !strings.Contains(page, `<span class="state pending">pending</span> 60`) {
		t.Errorf("the counts do not say 60 pending: %s", page)
	}
	m := nextLink.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no next page link: %s", page)
	}
	second := get(html.UnescapeString(m[1]))
	if n := len(rowLink.FindAllString(second, -1)); n != 10 || nextLink.MatchString(second) || !strings.Contains(second, `id="first-page"`) {
		t.Errorf("the second page links %d rows (want 10), or has a next page, or no first-page link", n)
	}
	seen := map[string]bool{}
	for _, p := range []string{page, second} {
		for _, l := range rowLink.FindAllStringSubmatch(p, -1) {
			if seen[l[1]] {
				t.Errorf("row %s is on two pages", l[1])
			}
			seen[l[1]] = true
		}
	}
	digest := get("/console/notifications?tenant=acme&kind=digest&state=pending&channel=sms")
	if n := len(rowLink.FindAllString(digest, -1)); n != 20 || !strings.Contains(digest, "<strong>20</strong> match") {
		t.Errorf("kind digest lists %d rows, want 20", n)
	}
	if n := len(rowLink.FindAllString(get("/console/notifications?tenant=acme&state=delivered"), -1)); n != 0 {
		t.Errorf("state delivered lists %d rows, want none", n)
	}
	from := due.Add(10 * time.Second).UTC().Format(time.RFC3339)
	to := due.Add(20 * time.Second).UTC().Format(time.RFC3339)
	if n := len(rowLink.FindAllString(get("/console/notifications?tenant=acme&recipient_prefix=%2B4420&due_from="+from+"&due_to="+to), -1)); n != 10 {
		t.Errorf("a 10 s due range lists %d rows, want 10", n)
	}
	resp, body := do(t, c, "GET", b.srv.URL+"/console/notifications?tenant=acme&state=lost", nil, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "state &#34;lost&#34; is not one of pending") {
		t.Errorf("an unknown state answered %d: %s", resp.StatusCode, body)
	}
	resp, body = do(t, c, "GET", b.srv.URL+"/console/notifications?tenant=acme&due_from=yesterday", nil, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "due from &#34;yesterday&#34; is not a time") {
		t.Errorf("a bad due time answered %d: %s", resp.StatusCode, body)
	}
}
