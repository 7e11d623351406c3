package api

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// TestListPagesWithTheCursor: pages of a tenant's rows, newest due first,
// cover every row once, rows scheduled between reads shift no page, the
// last page has no next_cursor, and a bad cursor is 400 naming cursor.
func TestListPagesWithTheCursor(t *testing.T) {
	b := setup(t)
	due := b.clk.Now().Add(time.Hour)
	var rows []map[string]any
	for i := range 7 {
		// Two rows per due time: the id breaks the tie.
		rows = append(rows, note(fmt.Sprintf("+1555000%d", i), "T-1", due.Add(time.Duration(i/2)*time.Minute)))
	}
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(rows...)), http.StatusOK)
	expect(t, b.do(t, "POST", "/v1/notifications", b.globex, batch(note("+15559999", "G-1", due))), http.StatusOK)

	var seen []ledger.Notification
	cursor := ""
	for page := 0; ; page++ {
		q := url.Values{"limit": {"3"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var got listPage
		r := b.do(t, "GET", "/v1/notifications?"+q.Encode(), b.acme, nil)
		expect(t, r, http.StatusOK)
		r.data(t, &got)
		seen = append(seen, got.Notifications...)
		if page == 0 {
			// A row scheduled later than every row read so far does not
			// shift the next pages.
			expect(t, b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550100", "T-9", due.Add(time.Hour)))),
				http.StatusOK)
		}
		if got.NextCursor == "" {
			if len(got.Notifications) == 3 && page < 2 {
				t.Fatalf("page %d is full but has no next_cursor", page)
			}
			break
		}
		if page > 5 {
			t.Fatal("pages never end")
		}
		cursor = got.NextCursor
	}
	if len(seen) != 7 {
		t.Fatalf("read %d rows over the pages, want the 7 scheduled before the first", len(seen))
	}
	for i := 1; i < len(seen); i++ {
		a, c := seen[i-1], seen[i]
		if a.DueAt.Before(c.DueAt) || (a.DueAt.Equal(c.DueAt) && a.ID <= c.ID) || c.Tenant != "acme" {
			t.Fatalf("row %d (%v, %d) after (%v, %d): not newest due first, or another tenant's", i, c.DueAt, c.ID, a.DueAt, a.ID)
		}
	}
	// A full last page with nothing after it has no cursor either.
	var exact listPage
	b.do(t, "GET", "/v1/notifications?limit=8", b.acme, nil).data(t, &exact)
	if len(exact.Notifications) != 8 || exact.NextCursor != "" {
		t.Errorf("limit 8 of 8 rows: %d rows, next_cursor %q; want 8 and none", len(exact.Notifications), exact.NextCursor)
	}
	for _, bad := range []string{"", "abc", "djEuMS4w", (ledger.Position{ID: 1}).Cursor() + "=", "!!!!"} {
		expectField(t, b.do(t, "GET", "/v1/notifications?cursor="+url.QueryEscape(bad), b.acme, nil),
			http.StatusBadRequest, "cursor")
	}
}
