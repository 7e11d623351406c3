package devstack

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/owedhq/owed/client"
	"github.com/owedhq/owed/internal/tenant"
)

// The seeded workload, shaped like the real ones.
const (
	// followUpsPerDay is the steady rate of ticket follow-ups: one every
	// 7.2 seconds.
	followUpsPerDay = 12_000
	followUpEvery   = 24 * time.Hour / followUpsPerDay
	// followUpAhead is how far ahead of its due time the stream schedules
	// a follow-up, as a helpdesk schedules "nudge if no reply".
	followUpAhead = time.Minute
	// backlogFollowUps are owed from before the start, spread over
	// backlogSpan: the catch-up a paused cron leaves, sent oldest first at
	// the provider's pace. The span is short so the demo's lag figures
	// settle within a few minutes instead of reading like an outage.
	backlogFollowUps = 40
	backlogSpan      = 3 * time.Minute
	// shipmentEvery is how often the stream raises a shipment exception.
	shipmentEvery = 5 * time.Minute
	// startShipments are raised at start.
	startShipments = 2
	// expiredRows are past their expiry when scheduled: they must be
	// settled expired and never reach the sandbox.
	expiredRows = 3
	// bouncedRows go to recipients the sandbox refuses for good: they must
	// end failed and dead-lettered.
	bouncedRows = 2
	// seedTimeout bounds one API call of the seeder.
	seedTimeout = 10 * time.Second
)

// calendarItems are the upcoming items written to owed_items: startsIn from
// now, and the item's own lead ("remind me N minutes before"), zero for the
// default lead (OWED_DEFAULT_LEAD, 10m). The first falls due within seconds
// of the first materialise run.
var calendarItems = []struct {
	startsIn, lead time.Duration
	title          string
}{
	{2 * time.Minute, 100 * time.Second, "Stand-up"},
	{15 * time.Minute, 5 * time.Minute, "Design review"},
	{25 * time.Minute, 0, "1:1 with Sam"},
	{40 * time.Minute, 30 * time.Minute, "Customer call: Globex"},
	{90 * time.Minute, 60 * time.Minute, "Quarterly planning"},
	{150 * time.Minute, 0, "Dentist"},
}

// Seeded is what the seeder scheduled.
type Seeded struct {
	// Scheduled counts the rows created through the API.
	Scheduled int
	// Items counts the calendar items written to owed_items.
	Items int
	// Expired are the rows scheduled already past their expiry.
	Expired []Row
	// Bounced are the rows addressed to a recipient the sandbox refuses.
	Bounced []Row
}

// Row is one seeded ledger row.
type Row struct {
	ID        int64
	Recipient string
}

// seeder schedules the workload through the public API as tenant Tenant,
// with the Go client applications use, and the calendar items through the
// documented owed_items table.
type seeder struct {
	api *client.Client
	db  *sql.DB

	mu       sync.Mutex
	seeded   Seeded
	ticket   int
	shipment int
	lastErr  string
}

// newSeeder schedules through the API at apiURL with token (a tenant
// token of Tenant) and writes the calendar items through db.
func newSeeder(apiURL, token string, db *sql.DB) *seeder {
	api := client.New(apiURL, token, client.WithHTTPClient(&http.Client{Timeout: seedTimeout}),
		client.WithRetry(seedTimeout))
	return &seeder{api: api, db: db, ticket: 1000, shipment: 880}
}

func (s *seeder) snapshot() Seeded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seeded
	out.Expired = append([]Row(nil), s.seeded.Expired...)
	out.Bounced = append([]Row(nil), s.seeded.Bounced...)
	return out
}

func (s *seeder) err() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// notification is one row the seeder schedules.
type notification = client.Notification

type payload = client.Payload

// seedInitial schedules the start-up workload: the backlog, the shipment
// exceptions, the expired and the bounced rows, and the calendar items.
func (s *seeder) seedInitial(ctx context.Context) error {
	now := time.Now().UTC().Truncate(time.Second)
	var rows []notification
	for i := range backlogFollowUps {
		due := now.Add(-backlogSpan + time.Duration(i)*backlogSpan/backlogFollowUps)
		rows = append(rows, s.followUp(due))
	}
	if _, err := s.schedule(ctx, rows); err != nil {
		return fmt.Errorf("backlog follow-ups: %w", err)
	}
	for range startShipments {
		if err := s.shipmentException(ctx, now); err != nil {
			return err
		}
	}

	// A "starts in 10 minutes" nudge for meetings long over: each expired
	// before it could be sent.
	rows = rows[:0]
	for i := range expiredRows {
		expires := now.Add(-time.Duration(i+1) * time.Minute)
		rows = append(rows, notification{Recipient: fmt.Sprintf("late-%d@example.com", i+1), Channel: "email",
			Kind: "meeting_soon", RefID: fmt.Sprintf("CAL-PAST-%d", i+1), DueAt: expires.Add(-10 * time.Minute),
			ExpiresAt: &expires, Payload: payload{Subject: "Starting soon", Text: "Your meeting starts in 10 minutes."}})
	}
	expired, err := s.schedule(ctx, rows)
	if err != nil {
		return fmt.Errorf("expired rows: %w", err)
	}

	rows = rows[:0]
	for i := range bouncedRows {
		// Due before the backlog, so the first minute already shows rows
		// ending failed and dead-lettered.
		r := s.followUp(now.Add(-backlogSpan - time.Minute))
		r.Recipient = fmt.Sprintf("%s-%d@example.com", PermanentRecipient, i+1)
		rows = append(rows, r)
	}
	bounced, err := s.schedule(ctx, rows)
	if err != nil {
		return fmt.Errorf("bounced rows: %w", err)
	}
	s.mu.Lock()
	s.seeded.Expired, s.seeded.Bounced = expired, bounced
	s.mu.Unlock()
	return s.calendar(ctx, now)
}

// stream keeps scheduling follow-ups at followUpsPerDay and a shipment
// exception every shipmentEvery until ctx ends.
func (s *seeder) stream(ctx context.Context) {
	t := time.NewTicker(followUpEvery)
	defer t.Stop()
	perShipment := int(shipmentEvery / followUpEvery)
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now().UTC().Truncate(time.Second)
		_, err := s.schedule(ctx, []notification{s.followUp(now.Add(followUpAhead))})
		if err == nil && n%perShipment == 0 {
			err = s.shipmentException(ctx, now)
		}
		if err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.lastErr = err.Error()
			s.mu.Unlock()
		}
	}
}

// followUp is a helpdesk's "any news on your ticket?", due at due.
func (s *seeder) followUp(due time.Time) notification {
	s.mu.Lock()
	s.ticket++
	n := s.ticket
	s.mu.Unlock()
	return notification{Recipient: fmt.Sprintf("customer-%d@example.com", n), Channel: "email", Kind: "follow_up",
		RefID: fmt.Sprintf("TCK-%d", n), DueAt: due,
		Payload: payload{Subject: fmt.Sprintf("Ticket %d", n), Text: "Any news on your ticket? Reply to this email and we will pick it up."}}
}

// shipmentException fans one exception out to the buyer, the merchant's
// inbox, the support agent and the warehouse contact (POST /v1/events).
func (s *seeder) shipmentException(ctx context.Context, occurred time.Time) error {
	s.mu.Lock()
	s.shipment++
	ref := fmt.Sprintf("SHP-%d", s.shipment)
	s.mu.Unlock()
	text := "Shipment " + ref + " is held at customs."
	out, err := s.api.Event(ctx, client.Event{
		Kind: "shipment_exception", RefID: ref, OccurredAt: occurred, Channel: "sms", Payload: payload{Text: text},
		Recipients: []client.EventRecipient{
			{Recipient: "+15550100" + ref[len(ref)-3:]},
			{Recipient: "orders@merchant.example", Channel: "email", Payload: &payload{Subject: ref + " held at customs", Text: text}},
			{Recipient: "C024BE91L", Channel: "slack"},
			{Recipient: "dock@warehouse.example", Channel: "email", Payload: &payload{Subject: ref + ": customs hold", Text: text}},
		},
	})
	if err != nil {
		return fmt.Errorf("shipment exception %s: %w", ref, err)
	}
	s.mu.Lock()
	s.seeded.Scheduled += out.Created
	s.mu.Unlock()
	return nil
}

// schedule posts rows and returns them with their ids, in input order.
func (s *seeder) schedule(ctx context.Context, rows []notification) ([]Row, error) {
	out, err := s.api.ScheduleMany(ctx, rows)
	if err != nil {
		return nil, err
	}
	if len(out.Notifications) != len(rows) {
		return nil, fmt.Errorf("scheduled %d rows, the API answered for %d", len(rows), len(out.Notifications))
	}
	ids := make([]Row, len(rows))
	for i, n := range out.Notifications {
		ids[i] = Row{ID: n.ID, Recipient: rows[i].Recipient}
	}
	s.mu.Lock()
	s.seeded.Scheduled += out.Created
	s.mu.Unlock()
	return ids, nil
}

// calendar upserts the calendar items as the application does: in its
// tenant's scope, one row per (tenant, recipient, kind, ref).
func (s *seeder) calendar(ctx context.Context, now time.Time) error {
	err := tenant.InTx(ctx, s.db, Tenant, func(tx *sql.Tx) error {
		for i, it := range calendarItems {
			var lead sql.NullInt64
			if it.lead > 0 {
				lead = sql.NullInt64{Int64: int64(it.lead / time.Second), Valid: true}
			}
			p, _ := json.Marshal(payload{Subject: it.title, Text: it.title + " is coming up."})
			ref := fmt.Sprintf("CAL-%d-%d", now.Unix(), i+1)
			if _, err := tx.ExecContext(ctx, qUpsertItem, Tenant, calendarRecipient(i), "sms", "meeting_soon",
				ref, now.Add(it.startsIn), lead, p); err != nil {
				return fmt.Errorf("calendar item %s: %w", ref, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("calendar items: %w", err)
	}
	s.mu.Lock()
	s.seeded.Items += len(calendarItems)
	s.mu.Unlock()
	return nil
}

// calendarRecipient is the phone number of the i-th calendar item.
func calendarRecipient(i int) string { return fmt.Sprintf("+1555020%04d", i+1) }

// qUpsertItem is the statement an application runs against owed_items
// (docs/api.md), in its tenant's scope.
const qUpsertItem = `
INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at, lead_seconds, payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT ON CONSTRAINT owed_items_key DO UPDATE
   SET starts_at = excluded.starts_at, lead_seconds = excluded.lead_seconds,
       payload = excluded.payload, updated_at = now()`
