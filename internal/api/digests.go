package api

import (
	"net/http"
	"net/url"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// digestRequest is the body of PUT /v1/digests: one kind's digest window
// (docs/api.md, "Digests").
type digestRequest struct {
	TenantID string `json:"tenant_id"`
	Kind     string `json:"kind"`
	// Window is a duration ("10m", "90s"); "0" turns digesting off for
	// the kind.
	Window *string `json:"window"`
}

func (r digestRequest) tenantID() string { return r.TenantID }

// digestView is one digestible kind as the API shows it.
type digestView struct {
	Kind   string `json:"kind"`
	Window string `json:"window"`
}

func viewDigest(d ledger.Digest) digestView {
	return digestView{Kind: d.Kind, Window: d.Window.String()}
}

func decodeDigest(body []byte, p principal) (string, ledger.Digest, *apiError) {
	var req digestRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", ledger.Digest{}, e
	}
	if req.Window == nil {
		return "", ledger.Digest{}, badField("window", "required: a duration such as 10m, or 0 to turn digesting off")
	}
	window, err := time.ParseDuration(*req.Window)
	if err != nil {
		return "", ledger.Digest{}, badField("window", "%q is not a duration such as 10m or 90s (0 turns digesting off)",
			*req.Window)
	}
	d := ledger.Digest{Kind: req.Kind, Window: window}
	if err := ledger.ValidateDigest(tenant, d); err != nil {
		return "", d, fromLedger(err, changeNamer)
	}
	return tenant, d, nil
}

// setDigest is PUT /v1/digests: declare a kind digestible, change its
// window, or turn digesting off for it.
func (s *server) setDigest(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, d, ok := decoded(s, w, r, p, decodeDigest)
	if !ok {
		return
	}
	res, err := s.ledger.SetDigest(r.Context(), tenant, d)
	if err != nil {
		s.fail(w, r, err, changeNamer)
		return
	}
	writeData(w, http.StatusOK, map[string]any{"digest": viewDigest(d), "undigested": res.Undigested})
}

// digests is GET /v1/digests: the tenant's digestible kinds.
func (s *server) digests(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, e := decodeDigests(r.URL.Query(), p)
	if e != nil {
		writeError(w, e)
		return
	}
	if !s.enter(w, r, p, tenant) {
		return
	}
	ds, err := s.reads.Digests(r.Context(), tenant)
	if err != nil {
		s.fail(w, r, err, changeNamer)
		return
	}
	out := make([]digestView, len(ds))
	for i, d := range ds {
		out[i] = viewDigest(d)
	}
	writeData(w, http.StatusOK, out)
}

func decodeDigests(q url.Values, p principal) (string, *apiError) {
	for name := range q {
		if name != "tenant" {
			return "", unknownField(name, "unknown query parameter; accepted: tenant")
		}
	}
	return p.scope(q.Get("tenant"), "tenant")
}
