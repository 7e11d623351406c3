package api

import (
	"net/http"

	"github.com/owedhq/owed/internal/ledger"
)

// scheduleResult is the answer to a schedule or an event: one entry per
// input row, in input order, and the totals.
type scheduleResult struct {
	Notifications []scheduledRow `json:"notifications"`
	Created       int            `json:"created"`
	Existing      int            `json:"existing"`
}

type scheduledRow struct {
	// Recipient is set for event fan-outs, whose rows differ by recipient.
	Recipient string       `json:"recipient,omitempty"`
	ID        int64        `json:"id"`
	Created   bool         `json:"created"`
	State     ledger.State `json:"state"`
}

func (s *server) schedule(w http.ResponseWriter, r *http.Request, p principal) {
	s.writeScheduled(w, r, p, func(body []byte, p principal) (string, []ledger.NewNotification, *apiError) {
		return decodeSchedule(body, p, s.maxExpanded)
	}, false, batchNamer("notifications"))
}

func (s *server) event(w http.ResponseWriter, r *http.Request, p principal) {
	// The ledger's errors name the event's fields as decoding does: a
	// recipient's zone its contact lacks is recipients[i].time_zone.
	var req eventRequest
	name := func(f ledger.FieldError) string { return eventNamer(req)(f) }
	s.writeScheduled(w, r, p, func(body []byte, p principal) (string, []ledger.NewNotification, *apiError) {
		tenant, rows, decoded, e := decodeEventRequest(body, p, s.maxExpanded)
		req = decoded
		return tenant, rows, e
	}, true, name)
}

// decoded reads r's JSON body and decodes it with decode into the tenant the
// request acts in and what it asks for, and enters that tenant. On an error
// it answers the request itself and ok is false.
func decoded[T any](s *server, w http.ResponseWriter, r *http.Request, p principal,
	decode func([]byte, principal) (string, T, *apiError)) (tenant string, req T, ok bool) {
	body, e := readBody(w, r)
	if e == nil {
		tenant, req, e = decode(body, p)
	}
	if e != nil {
		writeError(w, e)
		return "", req, false
	}
	return tenant, req, s.enter(w, r, p, tenant)
}

// writeScheduled decodes the body into rows, schedules them in one ledger
// call (all or nothing) and writes the per-row result.
func (s *server) writeScheduled(w http.ResponseWriter, r *http.Request, p principal,
	decode func([]byte, principal) (string, []ledger.NewNotification, *apiError), withRecipient bool, name fieldNamer) {
	tenant, rows, ok := decoded(s, w, r, p, decode)
	if !ok {
		return
	}
	// Rows are charged once the request is valid: a refused one schedules
	// nothing, and its rows are at most a batch, so always within a burst.
	if e := s.limits.admitRows(tenant, len(rows), s.clock.Now()); e != nil {
		writeError(w, e)
		return
	}
	ri := info(r)
	out, err := s.ledger.Schedule(r.Context(), tenant, rows)
	if err != nil {
		s.fail(w, r, err, name)
		return
	}
	res := scheduleResult{Notifications: make([]scheduledRow, len(out))}
	for i, sc := range out {
		res.Notifications[i] = scheduledRow{ID: sc.ID, Created: sc.Created, State: sc.State}
		if withRecipient {
			res.Notifications[i].Recipient = rows[i].Recipient
		}
		if sc.Created {
			res.Created++
		} else {
			res.Existing++
		}
	}
	ri.rows, ri.created = len(out), res.Created
	writeData(w, http.StatusOK, res)
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, req, ok := decoded(s, w, r, p, decodeSubject)
	if !ok {
		return
	}
	res, err := s.ledger.Cancel(r.Context(), tenant, req.Kind, req.RefID)
	if err != nil {
		s.fail(w, r, err, batchNamer("notifications"))
		return
	}
	writeData(w, http.StatusOK, res)
}

// erase forgets a recipient of the tenant (ledger.Erase).
func (s *server) erase(w http.ResponseWriter, r *http.Request, p principal) {
	_, req, ok := decoded(s, w, r, p, decodeErase)
	if !ok {
		return
	}
	res, err := s.ledger.Erase(r.Context(), req)
	if err != nil {
		s.fail(w, r, err, batchNamer("notifications"))
		return
	}
	info(r).rows = len(res.Rows)
	writeData(w, http.StatusOK, res)
}

func (s *server) reschedule(w http.ResponseWriter, r *http.Request, p principal) {
	now := s.clock.Now()
	tenant, req, ok := decoded(s, w, r, p, func(body []byte, p principal) (string, rescheduleTo, *apiError) {
		return decodeReschedule(body, p, now)
	})
	if !ok {
		return
	}
	res, err := s.ledger.Reschedule(r.Context(), tenant, req.Kind, req.RefID, req.due)
	if err != nil {
		s.fail(w, r, err, batchNamer("notifications"))
		return
	}
	writeData(w, http.StatusOK, res)
}

func (s *server) get(w http.ResponseWriter, r *http.Request, p principal) {
	tenant, id, e := decodeGet(r.PathValue("id"), r.URL.Query(), p)
	if e != nil {
		writeError(w, e)
		return
	}
	if !s.enter(w, r, p, tenant) {
		return
	}
	d, err := s.reads.Get(r.Context(), tenant, id)
	if err != nil {
		s.fail(w, r, err, batchNamer("notifications"))
		return
	}
	writeData(w, http.StatusOK, detailResponse{Notification: d.Notification, History: d.History, Outcome: d.Outcome,
		Receipts: d.Receipts})
}

// detailResponse is one row, its sends and the providers' receipts, with
// the confirmed outcome (receipt_status, receipt_code, confirmed_at).
// ledger.Detail's own JSON names its history "attempts", which shadows the
// row's attempt count; here the count stays "attempts" and the list is
// "history".
type detailResponse struct {
	ledger.Notification
	History []ledger.Attempt `json:"history"`
	ledger.Outcome
	Receipts []ledger.Receipt `json:"receipts"`
}

func (s *server) find(w http.ResponseWriter, r *http.Request, p principal) {
	q, e := decodeFind(r.URL.Query(), p)
	if e != nil {
		writeError(w, e)
		return
	}
	if !s.enter(w, r, p, q.tenant) {
		return
	}
	rows, next, err := s.reads.FindPage(r.Context(), q.tenant, q.filter, q.from)
	if err != nil {
		s.fail(w, r, err, batchNamer("notifications"))
		return
	}
	page := listPage{Notifications: rows, Limit: effectiveLimit(q.filter.Limit)}
	if next != nil {
		page.NextCursor = next.Cursor()
	}
	writeData(w, http.StatusOK, page)
}

// listPage is one page of GET /v1/notifications. NextCursor is absent on
// the last page; otherwise passing it as cursor (with the same filters)
// reads the rows after this page.
type listPage struct {
	Notifications []ledger.Notification `json:"notifications"`
	Limit         int                   `json:"limit"`
	NextCursor    string                `json:"next_cursor,omitempty"`
}

// effectiveLimit is the cap ledger.Find applied, so a client can tell a full
// page from a complete answer.
func effectiveLimit(n int) int {
	if n <= 0 || n > ledger.MaxFindLimit {
		return ledger.MaxFindLimit
	}
	return n
}
