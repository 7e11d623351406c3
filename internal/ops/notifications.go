package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// ParseID reads a notification id an operator typed.
func ParseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("notification id %q is not a positive integer", s)
	}
	return id, nil
}

// ShowNotification reads one row of any tenant with every attempt and
// receipt (ledger.GetAny: the row is read in its own tenant's scope).
func ShowNotification(ctx context.Context, l ledger.HasReads, id int64) (ledger.Detail, error) {
	d, err := l.ReadsRole().GetAny(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return d, fmt.Errorf("notification %d not found in any tenant", id)
	}
	if err != nil {
		return d, fmt.Errorf("read notification %d: %w", id, err)
	}
	return d, nil
}

// Event is one step of a row's life.
type Event struct {
	At time.Time `json:"at"`
	// What is the step: scheduled, due, published, leased until, claimed,
	// attempt N, receipt, delivered, settled.
	What string `json:"what"`
	// Outcome is the attempt's outcome or the receipt's status; Provider
	// and ProviderMessageID say who sent it; Detail is the rest (an HTTP
	// status, an error, a receipt's code).
	Outcome           string `json:"outcome,omitempty"`
	Provider          string `json:"provider,omitempty"`
	ProviderMessageID string `json:"provider_message_id,omitempty"`
	Detail            string `json:"detail,omitempty"`
}

// Timeline is d's life in time order: when it was scheduled and due (and,
// when quiet hours held it, the time asked and until when), when the sweep
// published it, its lease, the worker's claim, every send attempt
// with its outcome and provider id, every receipt, and when it settled.
// Steps that have not happened are absent.
func Timeline(d ledger.Detail) []Event {
	n := d.Notification
	// A digest's member is due at the digest's send time, and goes out in
	// the digest's one send (docs/api.md, "Digests").
	var digest string
	due := Event{At: n.DueAt, What: "due"}
	if n.DigestID != 0 {
		digest = "in digest " + strconv.FormatInt(n.DigestID, 10)
		due.Detail = digest
		if n.DigestFrom != nil {
			due.Detail += ", asked for " + n.DigestFrom.Format(time.RFC3339Nano)
		}
	}
	ev := []Event{{At: n.CreatedAt, What: "scheduled"}, due}
	add := func(t *time.Time, e Event) {
		if t != nil && !t.IsZero() {
			e.At = *t
			ev = append(ev, e)
		}
	}
	if n.HeldFrom != nil {
		// The time asked, when quiet hours moved the row to a window's
		// opening: its due time above.
		until := strings.TrimPrefix(n.Hold, "held for quiet hours ")
		if until == "" {
			until = "until " + n.DueAt.UTC().Format(time.RFC3339)
		}
		add(n.HeldFrom, Event{What: "held for quiet hours", Detail: until})
	}
	add(n.PublishedAt, Event{What: "published", Detail: "queue generation " + strconv.Itoa(n.QueueGeneration)})
	if !n.State.Settled() {
		add(n.LeaseUntil, Event{What: "leased until"})
	}
	add(n.ClaimedAt, Event{What: "claimed", Detail: "claim " + strconv.FormatInt(n.ClaimSeq, 10)})
	for _, a := range d.History {
		e := Event{At: a.StartedAt, What: "attempt " + strconv.Itoa(a.Attempt), Outcome: string(a.Outcome),
			Provider: a.Provider, ProviderMessageID: a.ProviderMessageID, Detail: a.Error}
		if a.HTTPStatus != 0 {
			e.Detail = strconv.Itoa(a.HTTPStatus) + " " + e.Detail
		}
		if a.PossibleDuplicate {
			e.Detail += " (possible duplicate)"
		}
		e.Detail = strings.TrimSpace(e.Detail + " took " + a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond).String())
		ev = append(ev, e)
	}
	for _, r := range d.Receipts {
		at := r.ReceivedAt
		if r.OccurredAt != nil {
			at = *r.OccurredAt
		}
		ev = append(ev, Event{At: at, What: "receipt", Outcome: string(r.Status), Provider: r.Provider,
			ProviderMessageID: r.ProviderMessageID, Detail: r.Code})
	}
	add(n.DeliveredAt, Event{What: "delivered", Provider: n.Provider, ProviderMessageID: n.ProviderMessageID,
		Detail: digest})
	add(n.SettledAt, Event{What: "settled", Outcome: string(n.State), Detail: n.LastError})
	slices.SortStableFunc(ev, func(a, b Event) int { return a.At.Compare(b.At) })
	return ev
}

// ListQuery is a notifications list's filter as an operator types it (the
// console's form, owedctl notifications list's flags), before Parse.
type ListQuery struct {
	Tenant, State, Kind, Channel, Recipient, RecipientPrefix, Ref string
	// The time ranges: RFC 3339, or 2006-01-02T15:04 read as UTC; empty
	// leaves a side open.
	DueFrom, DueTo, SettledFrom, SettledTo string
	// Cursor is the position the page starts after (ledger.Position.Cursor).
	Cursor string
}

// listStates are the states a list may filter on.
var listStates = []ledger.State{ledger.StatePending, ledger.StateLeased, ledger.StateQueued, ledger.StateSending,
	ledger.StateDelivered, ledger.StateSkipped, ledger.StateExpired, ledger.StateFailed, ledger.StateCancelled}

// ListStates are the states a list may filter on, in a row's life order.
func ListStates() []ledger.State { return slices.Clone(listStates) }

// ListStateNames is ListStates for a message or a flag's help.
func ListStateNames() string {
	names := make([]string, len(listStates))
	for i, st := range listStates {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

// ParseTime reads a time an operator typed: RFC 3339, or a date and time
// without a zone (2026-12-02T09:30, or with seconds, or a space for the T)
// read as UTC.
func ParseTime(field, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time like 2026-12-02T09:30 (UTC), 2026-12-02 or 2026-12-02T09:30:00+01:00", field, s)
}

// Parse checks q and gives the ledger's filter, with the page's start
// (nil: the first page). Each error names the field, what it got and what
// it accepts.
func (q ListQuery) Parse() (ledger.Filter, *ledger.Position, error) {
	f := ledger.Filter{Recipient: strings.TrimSpace(q.Recipient), RefID: strings.TrimSpace(q.Ref), Kind: strings.TrimSpace(q.Kind),
		Channel: strings.TrimSpace(q.Channel), RecipientPrefix: strings.TrimSpace(q.RecipientPrefix)}
	if strings.TrimSpace(q.Tenant) == "" {
		return f, nil, errors.New("a tenant is required: rows are only ever listed within one tenant")
	}
	if s := strings.TrimSpace(q.State); s != "" {
		if !slices.Contains(listStates, ledger.State(s)) {
			return f, nil, fmt.Errorf("state %q is not one of %s", s, ListStateNames())
		}
		f.State = ledger.State(s)
	}
	for _, t := range []struct {
		field, value string
		into         *time.Time
	}{{"due from", q.DueFrom, &f.DueFrom}, {"due to", q.DueTo, &f.DueTo},
		{"settled from", q.SettledFrom, &f.SettledFrom}, {"settled to", q.SettledTo, &f.SettledTo}} {
		if strings.TrimSpace(t.value) == "" {
			continue
		}
		v, err := ParseTime(t.field, t.value)
		if err != nil {
			return f, nil, err
		}
		if !ledger.InRange(v) {
			return f, nil, fmt.Errorf("%s %q is outside the years 1 to 9999", t.field, t.value)
		}
		*t.into = v
	}
	if !f.DueFrom.IsZero() && !f.DueTo.IsZero() && !f.DueTo.After(f.DueFrom) {
		return f, nil, fmt.Errorf("due to %q must be after due from %q", q.DueTo, q.DueFrom)
	}
	if !f.SettledFrom.IsZero() && !f.SettledTo.IsZero() && !f.SettledTo.After(f.SettledFrom) {
		return f, nil, fmt.Errorf("settled to %q must be after settled from %q", q.SettledTo, q.SettledFrom)
	}
	if q.Cursor == "" {
		return f, nil, nil
	}
	from, err := ledger.ParseCursor(q.Cursor)
	if err != nil {
		return f, nil, fmt.Errorf("cursor %q: %v: pass the next page's cursor unchanged, with the same filters", q.Cursor, err)
	}
	return f, &from, nil
}

// ListPage is one page of a notifications list, with the counts of every
// row the filter matches.
type ListPage struct {
	Rows []ledger.Notification `json:"notifications"`
	// Next is the cursor of the following page, "" on the last.
	Next   string        `json:"next_cursor,omitempty"`
	Counts ledger.Counts `json:"counts"`
}

// ListNotifications reads one page of q's rows, newest due first, limit at
// most, and counts what the filter matches by state.
func ListNotifications(ctx context.Context, l ledger.HasReads, q ListQuery, limit int) (ListPage, error) {
	f, from, err := q.Parse()
	if err != nil {
		return ListPage{}, err
	}
	if limit < 1 || limit > ledger.MaxFindLimit {
		return ListPage{}, fmt.Errorf("the limit %d must be 1 to %d", limit, ledger.MaxFindLimit)
	}
	f.Limit = limit
	var p ListPage
	var next *ledger.Position
	if p.Rows, next, err = l.ReadsRole().FindPage(ctx, q.Tenant, f, from); err != nil {
		return p, fmt.Errorf("list the notifications of tenant %q: %w", q.Tenant, err)
	}
	if next != nil {
		p.Next = next.Cursor()
	}
	if p.Counts, err = l.ReadsRole().Count(ctx, q.Tenant, f); err != nil {
		return p, fmt.Errorf("count the notifications of tenant %q: %w", q.Tenant, err)
	}
	return p, nil
}
