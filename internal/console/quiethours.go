package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/owedhq/owed/internal/ledger"
)

// quietData is the quiet-hours page: one tenant's send windows.
type quietData struct {
	Tenant string
	Scopes []ledger.QuietHours
}

// quietHours shows a tenant's send windows, read only: the tenant's
// application owns them (PUT /v1/quiet-hours), and an operator who reads
// "held for quiet hours until …" on a row sees here which rule held it.
func (c *Console) quietHours(w http.ResponseWriter, r *http.Request, op operator) {
	d := quietData{Tenant: strings.TrimSpace(r.URL.Query().Get("tenant"))}
	if d.Tenant == "" {
		c.show(w, op, http.StatusOK, "quiethours", "Quiet hours", d, "")
		return
	}
	scopes, err := c.o.Reads.ReadsRole().QuietHoursOf(r.Context(), d.Tenant)
	if err != nil {
		status := http.StatusServiceUnavailable
		var v *ledger.ValidationError
		if errors.As(err, &v) {
			status = http.StatusBadRequest
		}
		c.show(w, op, status, "quiethours", "Quiet hours", d, "read the quiet hours of tenant "+d.Tenant+": "+err.Error())
		return
	}
	d.Scopes = scopes
	c.show(w, op, http.StatusOK, "quiethours", "Quiet hours of "+d.Tenant, d, "")
}
