package api

import (
	"net/http"

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
