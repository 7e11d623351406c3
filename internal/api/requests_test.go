package api

import "testing"

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
