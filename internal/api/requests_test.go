package api

import (
	"encoding/json"
	"testing"

	"github.com/owedhq/owed/internal/ledger"
)

// scheduleSeeds are bodies the fuzz target starts from; `go test` runs each
// as a regular test.
var scheduleSeeds = []string{
	`{"notifications":[{"recipient":"+15550001","channel":"sms","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","payload":{"text":"hi"}}]}`,
	`{"tenant_id":"acme","notifications":[{"recipient":"a@example.com","channel":"email","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00Z","expires_at":"2026-03-01T13:00:00Z","payload":{"subject":"s","text":"t"}}]}`,
	`{"tenant_id":"globex","notifications":[]}`,
	`{"notifications":[{"recipient":"x","channel":"webhook","kind":"k","ref_id":"r","due_at":"2026-03-01T12:00:00+02:00","payload":{"data":[1,2]}}]}`,
	`{"notifications":[{"due_at":"not a time","expires_at":"2026-02-30T00:00:00Z"}]}`,
	`{"notifications":[{"payload":null}]}`,
	`{"notifications":{"a":1}}`,
	`{"notifications":[1]}`,
	`{"unknown":true}`,
	`{"notifications":[]} trailing`,
	`[]`, `null`, `""`, `{`, ``, "\x00", `{"tenant_id":1}`,
}

// FuzzScheduleRequest feeds arbitrary bodies to the decoding and validation
// of POST /v1/notifications with a tenant token. It must never panic, must
// answer a bad body with a 4xx naming what is wrong, and anything it accepts
// must be rows the ledger accepts: the handler's only remaining step is the
// ledger write.
func FuzzScheduleRequest(f *testing.F) {
	for _, s := range scheduleSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tenant, rows, e := decodeSchedule(body, principal{tenant: "acme"})
		if e != nil {
			if e.Status < 400 || e.Status >= 500 || e.Code == "" || e.Message == "" {
				t.Fatalf("body %q: error %+v, want a 4xx with a code and a message", body, e)
			}
			if _, err := json.Marshal(map[string]*apiError{"error": e}); err != nil {
				t.Fatalf("error does not encode: %v", err)
			}
			return
		}
		if tenant != "acme" {
			t.Fatalf("tenant %q, want the token's tenant", tenant)
		}
		if err := ledger.Validate(tenant, rows); err != nil {
			t.Fatalf("body %q accepted, but the ledger rejects it: %v", body, err)
		}
	})
}

func TestScopeRules(t *testing.T) {
	tok := principal{tenant: "acme"}
	svc := principal{service: true}
	cases := []struct {
		p      principal
		named  string
		tenant string
		status int
	}{
		{tok, "", "acme", 0},
		{tok, "acme", "acme", 0},
		{tok, "globex", "", 403},
		{svc, "", "", 400},
		{svc, "  ", "", 400},
		{svc, "globex", "globex", 0},
	}
	for _, c := range cases {
		tenant, e := c.p.scope(c.named, "tenant_id")
		status := 0
		if e != nil {
			status = e.Status
		}
		if tenant != c.tenant || status != c.status {
			t.Errorf("%+v naming %q: tenant %q status %d, want %q %d", c.p, c.named, tenant, status, c.tenant, c.status)
		}
	}
}
