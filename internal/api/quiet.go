package api

import (
	"net/http"
	"net/url"

	"github.com/owedhq/owed/internal/ledger"
)

// quietRequest is the body of PUT /v1/quiet-hours: one scope's send
// windows (docs/api.md, "Quiet hours").
type quietRequest struct {
	TenantID string   `json:"tenant_id"`
	Scope    string   `json:"scope"`
	Windows  []string `json:"windows"`
	TimeZone string   `json:"time_zone"`
}

func (r quietRequest) tenantID() string { return r.TenantID }

func decodeQuiet(body []byte, p principal) (string, ledger.QuietHours, *apiError) {
	var req quietRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", ledger.QuietHours{}, e
	}
	q := ledger.QuietHours{Scope: req.Scope, Windows: req.Windows, TimeZone: req.TimeZone}
	if err := ledger.ValidateQuietHours(tenant, q); err != nil {
		return "", q, fromLedger(err, changeNamer)
	}
	return tenant, q, nil
}

func (s *server) quietHours(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, q, ok := decoded(s, w, r, p, decodeQuiet)
	if !ok {
		return
	}
	res, err := s.ledger.SetQuietHours(r.Context(), tenant, q)
	if err != nil {
		s.fail(w, r, err, changeNamer)
		return
	}
	writeData(w, http.StatusOK, res)
}

// quietHoursAnswer is GET /v1/quiet-hours' answer: every scope of the
// tenant's send windows, ordered by scope (none: an empty list).
type quietHoursAnswer struct {
	QuietHours []ledger.QuietHours `json:"quiet_hours"`
}

// decodeQuietGet reads GET /v1/quiet-hours' query: only the tenant.
func decodeQuietGet(q url.Values, p principal) (string, *apiError) {
	for name, vals := range q {
		if name != "tenant" {
			return "", unknownField(name, "unknown query parameter; accepted: tenant")
		}
		if len(vals) > 1 {
			return "", badField(name, "given %d times; give it once", len(vals))
		}
	}
	return p.scope(q.Get("tenant"), "tenant")
}

func (s *server) getQuietHours(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, e := decodeQuietGet(r.URL.Query(), p)
	if e != nil {
		writeError(w, e)
		return
	}
	if !s.enter(w, r, p, tenant) {
		return
	}
	q, err := s.reads.QuietHoursOf(r.Context(), tenant)
	if err != nil {
		s.fail(w, r, err, changeNamer)
		return
	}
	writeData(w, http.StatusOK, quietHoursAnswer{QuietHours: q})
}
