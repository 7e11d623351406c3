package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/owedhq/owed/internal/ledger"
)

// updateRequest is the body of PATCH /v1/notifications/{id}: the fields to
// replace, each optional (at least one given). PATCH /v1/notifications
// names the row by its schedule key instead (Key).
type updateRequest struct {
	TenantID       string          `json:"tenant_id"`
	Key            *updateKey      `json:"key"`
	Payload        json.RawMessage `json:"payload"`
	DueAt          string          `json:"due_at"`
	ExpiresAt      string          `json:"expires_at"`
	DueLocal       string          `json:"due_local"`
	ExpiresLocal   string          `json:"expires_local"`
	TimeZone       string          `json:"time_zone"`
	Disambiguation string          `json:"disambiguation"`
}

// updateKey is a row's schedule key, the idempotency tuple it was
// scheduled under.
type updateKey struct {
	Recipient string `json:"recipient"`
	Kind      string `json:"kind"`
	RefID     string `json:"ref_id"`
	DueAt     string `json:"due_at"`
}

func (r updateRequest) tenantID() string { return r.TenantID }

// updateTo is an update body resolved: the row, by id or by key, and the
// change.
type updateTo struct {
	id     int64
	key    *ledger.Key
	change ledger.Change
}

// decodeUpdate reads a PATCH body. idText is the path's id, or "" for the
// route that names the row by key.
func decodeUpdate(idText string, body []byte, p principal) (string, updateTo, *apiError) {
	var req updateRequest
	tenant, e := decodeScoped(body, p, &req)
	if e != nil {
		return "", updateTo{}, e
	}
	var out updateTo
	switch {
	case idText != "" && req.Key != nil:
		return "", out, unknownField("key", "the row is named by the path's id; key is for PATCH /v1/notifications")
	case idText == "" && req.Key == nil:
		return "", out, badField("key", "required: the row's recipient, kind, ref_id and due_at, or PATCH "+
			"/v1/notifications/{id}")
	case idText != "":
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil || id < 1 {
			return "", out, badField("id", "%q is not a notification id (a positive integer)", idText)
		}
		out.id = id
	}
	var bad []fieldDetail
	add := func(fe *fieldDetail) {
		if fe != nil {
			bad = append(bad, *fe)
		}
	}
	if req.Key != nil {
		due, fe := parseTime("key.due_at", req.Key.DueAt)
		add(fe)
		out.key = &ledger.Key{Recipient: req.Key.Recipient, Kind: req.Key.Kind, RefID: req.Key.RefID, DueAt: due}
		if fe == nil {
			if err := ledger.ValidateKey(tenant, *out.key); err != nil {
				return "", out, fromLedger(err, func(f ledger.FieldError) string { return "key." + f.Field })
			}
		}
	}
	c := ledger.Change{Payload: req.Payload, TimeZone: req.TimeZone}
	var fe *fieldDetail
	c.DueAt, fe = parseTime("due_at", req.DueAt)
	add(fe)
	if req.ExpiresAt != "" {
		exp, fe := parseTime("expires_at", req.ExpiresAt)
		add(fe)
		c.ExpiresAt = &exp
	}
	if req.DueLocal != "" || req.ExpiresLocal != "" || req.Disambiguation != "" {
		c.Local = &ledger.Local{Due: req.DueLocal, Expires: req.ExpiresLocal, Disambiguation: req.Disambiguation}
	}
	if len(req.Payload) > 0 && string(req.Payload) == "null" {
		add(&fieldDetail{Field: "payload", Message: "null: give the new payload, or leave payload out to keep it"})
	}
	if e := fieldErrors(bad); e != nil {
		return "", out, e
	}
	if err := ledger.ValidateChange(tenant, c); err != nil {
		return "", out, fromLedger(err, changeNamer)
	}
	out.change = c
	return tenant, out, nil
}

// changeNamer names the fields of a change (ledger.Update's errors name the
// request's own fields).
func changeNamer(f ledger.FieldError) string { return f.Field }

func (s *server) update(w http.ResponseWriter, r *http.Request, p principal) {
	idText := r.PathValue("id")
	tenant, req, ok := decoded(s, w, r, p, func(body []byte, p principal) (string, updateTo, *apiError) {
		return decodeUpdate(idText, body, p)
	})
	if !ok {
		return
	}
	var res ledger.UpdateResult
	var err error
	if req.key != nil {
		res, err = s.ledger.UpdateByKey(r.Context(), tenant, *req.key, req.change)
	} else {
		res, err = s.ledger.Update(r.Context(), tenant, req.id, req.change)
	}
	var settled *ledger.ErrSettled
	switch {
	case errors.As(err, &settled):
		writeError(w, &apiError{Status: http.StatusConflict, Code: codeConflict, Message: "the notification is " +
			string(settled.State) + ", settled: only an unsettled notification can be updated"})
		return
	case errors.Is(err, ledger.ErrCancelWaiting):
		writeError(w, &apiError{Status: http.StatusConflict, Code: codeConflict, Message: "the notification is " +
			"being sent with a cancel waiting on the send: it ends cancelled unless it is delivered first, so " +
			"there is nothing to update"})
		return
	case errors.Is(err, ledger.ErrConflict):
		field := "due_at"
		if req.change.Local != nil && req.change.Local.Due != "" {
			field = "due_local"
		}
		writeError(w, &apiError{Status: http.StatusConflict, Code: codeConflict, Field: field, Message: err.Error()})
		return
	case err != nil:
		s.fail(w, r, err, changeNamer)
		return
	}
	writeData(w, http.StatusOK, res)
}
