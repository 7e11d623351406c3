package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// POST /v1/recipients/erase forgets a recipient of the token's tenant only,
// answers what it erased, and names a bad field.
func TestEraseRoute(t *testing.T) {
	b := setup(t)
	due := b.clk.Now().Add(time.Hour)
	for _, tok := range []string{b.acme, b.globex} {
		expect(t, b.do(t, "POST", "/v1/notifications", tok, batch(note("+15550001", "T-1", due))), http.StatusOK)
	}
	r := b.do(t, "POST", "/v1/recipients/erase", b.acme, map[string]any{"recipient": "+15550001", "reason": "request 9"})
	expect(t, r, http.StatusOK)
	var got ledger.Erasure
	r.data(t, &got)
	if len(got.Rows) != 1 || got.Cancelled != 1 {
		t.Errorf("erasure %+v, want the one row, cancelled", got)
	}
	for tenant, want := range map[string]bool{"acme": true, "globex": false} {
		rows, err := b.ledger.Find(ctx, tenant, ledger.Filter{})
		if err != nil || len(rows) != 1 {
			t.Fatalf("%s: %d rows (%v)", tenant, len(rows), err)
		}
		if erased := strings.HasPrefix(rows[0].Recipient, ledger.ErasePrefix); erased != want {
			t.Errorf("%s's row recipient %q, erased %v, want %v", tenant, rows[0].Recipient, erased, want)
		}
	}
	expectField(t, b.do(t, "POST", "/v1/recipients/erase", b.acme, map[string]any{"recipient": "x", "channel": "pigeon",
		"reason": "r"}), http.StatusBadRequest, "channel")
	expectField(t, b.do(t, "POST", "/v1/recipients/erase", b.acme, map[string]any{"recipient": "", "reason": "r"}),
		http.StatusBadRequest, "recipient")
	if r := b.do(t, "POST", "/v1/recipients/erase", b.acme, "{"); r.status != http.StatusBadRequest ||
		r.apiErr(t).Code != codeMalformedJSON {
		t.Errorf("a malformed body: %d %s", r.status, r.body)
	}
	expectField(t, b.do(t, "POST", "/v1/recipients/erase", serviceToken, map[string]any{"recipient": "x", "reason": "r"}),
		http.StatusBadRequest, "tenant_id")
}
