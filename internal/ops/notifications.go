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
func ShowNotification(ctx context.Context, l *ledger.Ledger, id int64) (ledger.Detail, error) {
	d, err := l.GetAny(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return d, fmt.Errorf("notification %d not found in any tenant", id)
	}
	if err != nil {
		return d, fmt.Errorf("read notification %d: %w", id, err)
	}
	return d, nil
}

// FindNotifications lists a tenant's rows matching f, newest due first:
// rows are only ever listed within one tenant.
func FindNotifications(ctx context.Context, l *ledger.Ledger, tenant string, f ledger.Filter) ([]ledger.Notification, error) {
	if tenant == "" {
		return nil, fmt.Errorf("a tenant is required: rows are only ever listed within one tenant")
	}
	if f.Limit < 1 || f.Limit > ledger.MaxFindLimit {
		return nil, fmt.Errorf("the limit %d must be 1 to %d", f.Limit, ledger.MaxFindLimit)
	}
	rows, err := l.Find(ctx, tenant, f)
	if err != nil {
		return nil, fmt.Errorf("find notifications of tenant %q: %w", tenant, err)
	}
	return rows, nil
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

// Timeline is d's life in time order: when it was scheduled and due, when
// the sweep published it, its lease, the worker's claim, every send attempt
// with its outcome and provider id, every receipt, and when it settled.
// Steps that have not happened are absent.
func Timeline(d ledger.Detail) []Event {
	n := d.Notification
	ev := []Event{{At: n.CreatedAt, What: "scheduled"}, {At: n.DueAt, What: "due"}}
	add := func(t *time.Time, e Event) {
		if t != nil && !t.IsZero() {
			e.At = *t
			ev = append(ev, e)
		}
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
	add(n.DeliveredAt, Event{What: "delivered", Provider: n.Provider, ProviderMessageID: n.ProviderMessageID})
	add(n.SettledAt, Event{What: "settled", Outcome: string(n.State), Detail: n.LastError})
	slices.SortStableFunc(ev, func(a, b Event) int { return a.At.Compare(b.At) })
	return ev
}
