package client

import (
	"encoding/json"
	"time"
)

// Payload is a notification's rendered message. email needs Subject and
// Text or HTML; sms, telegram and slack need Text; webhook needs Data or
// Text.
type Payload struct {
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text,omitempty"`
	HTML    string `json:"html,omitempty"`
	// Data is the JSON body a webhook receives.
	Data json.RawMessage `json:"data,omitempty"`
	// Extras are channel-specific options (say, Telegram's parse_mode).
	Extras map[string]string `json:"extras,omitempty"`
}

// Notification is one row to schedule. Scheduling is idempotent on
// (tenant, Recipient, Kind, RefID, DueAt): scheduling it again inserts
// nothing and answers the same id.
type Notification struct {
	Recipient string `json:"recipient"`
	// Channel is email, sms, telegram, slack or webhook.
	Channel string `json:"channel"`
	Kind    string `json:"kind"`
	RefID   string `json:"ref_id"`
	// DueAt is the instant the row is due; or leave it zero and give
	// DueLocal.
	DueAt time.Time `json:"-"`
	// ExpiresAt, when set, is when the row stops being worth sending.
	ExpiresAt *time.Time `json:"-"`
	Payload   Payload    `json:"payload"`
	// DueLocal and ExpiresLocal give the times as the recipient's wall
	// clock shows them, without an offset ("2027-03-28T09:00"), in
	// TimeZone, or in the recipient's contact's zone when TimeZone is
	// empty (docs/api.md, "Local time").
	DueLocal     string `json:"due_local,omitempty"`
	ExpiresLocal string `json:"expires_local,omitempty"`
	// TimeZone is the recipient's IANA time zone (Europe/Berlin).
	TimeZone string `json:"time_zone,omitempty"`
	// Disambiguation chooses the instant of a local time a daylight-saving
	// change skips or repeats: compatible (the default), earlier, later or
	// reject.
	Disambiguation string `json:"disambiguation,omitempty"`
	// Urgent rows are never held for quiet hours.
	Urgent bool `json:"urgent,omitempty"`
}

// QuietHours is one scope of the tenant's send windows: "tenant",
// "kind:<kind>" or "recipient:<recipient>", windows like "mon-fri
// 08:00-20:00" on the recipient's clock (none removes the scope), and the
// zone of a recipient whose row and contact name none.
type QuietHours struct {
	Scope    string   `json:"scope"`
	Windows  []string `json:"windows"`
	TimeZone string   `json:"time_zone,omitempty"`
}

// HoldResult counts what a change of quiet hours did to pending rows.
type HoldResult struct {
	Held     int `json:"held"`
	Released int `json:"released"`
	Expired  int `json:"expired"`
	Merged   int `json:"merged"`
}

// Digest is one digestible kind and its window, as the API writes it
// ("10m0s").
type Digest struct {
	Kind   string `json:"kind"`
	Window string `json:"window"`
}

// DigestResult is what SetDigest did: the kind's setting, and how many
// pending rows left digests not yet leased (digesting turned off).
type DigestResult struct {
	Digest     Digest `json:"digest"`
	Undigested int    `json:"undigested"`
}

// MarshalJSON writes the times as RFC 3339 strings, as the API reads them.
func (n Notification) MarshalJSON() ([]byte, error) {
	type plain Notification
	out := struct {
		plain
		DueAt     string `json:"due_at,omitempty"`
		ExpiresAt string `json:"expires_at,omitempty"`
	}{plain: plain(n)}
	if !n.DueAt.IsZero() {
		out.DueAt = n.DueAt.UTC().Format(time.RFC3339Nano)
	}
	if n.ExpiresAt != nil {
		out.ExpiresAt = n.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return json.Marshal(out)
}

// Scheduled is what scheduling did with one input row, in input order.
type Scheduled struct {
	// Recipient is set for an event's rows.
	Recipient string `json:"recipient,omitempty"`
	ID        int64  `json:"id"`
	// Created is false when the row already existed; State is then its
	// state.
	Created bool   `json:"created"`
	State   string `json:"state"`
}

// ScheduleResult is the answer to ScheduleMany and Event.
type ScheduleResult struct {
	Notifications []Scheduled `json:"notifications"`
	Created       int         `json:"created"`
	Existing      int         `json:"existing"`
}

// Event fans one event out: one row per recipient, due at OccurredAt +
// Delay, or at DueLocal on each recipient's wall clock. The due time comes
// from the event, so sending it twice lands on the same rows.
type Event struct {
	Kind       string
	RefID      string
	Channel    string
	Payload    Payload
	OccurredAt time.Time
	Delay      time.Duration
	// ExpiresIn, when positive, expires each row that long after its due
	// time.
	ExpiresIn  time.Duration
	Recipients []EventRecipient
	// DueLocal, instead of OccurredAt and Delay, is the due time as each
	// recipient's wall clock shows it ("2027-03-29T09:00"): in the
	// recipient's TimeZone, else the event's, else the recipient's
	// contact's. ExpiresLocal is the expiry the same way (instead of
	// ExpiresIn); Disambiguation as for Notification.
	DueLocal, ExpiresLocal, TimeZone, Disambiguation string
	// Urgent rows are never held for quiet hours.
	Urgent bool
}

// EventRecipient is one recipient of an Event; Channel, Payload and
// TimeZone, when set, override the event's.
type EventRecipient struct {
	Recipient string   `json:"recipient"`
	Channel   string   `json:"channel,omitempty"`
	Payload   *Payload `json:"payload,omitempty"`
	TimeZone  string   `json:"time_zone,omitempty"`
}

// ChangeResult is what a cancel or a reschedule changed.
type ChangeResult struct {
	// Changed counts open rows changed.
	Changed int64 `json:"changed"`
	// InFlight counts rows a worker is sending now; Intents those the
	// change is recorded on, applied when the send ends.
	InFlight int64 `json:"in_flight"`
	Intents  int64 `json:"intents"`
}

// Update is what Client.Update replaces; a zero field keeps the row's.
type Update struct {
	Payload   *Payload
	DueAt     time.Time
	ExpiresAt *time.Time
	// DueLocal and ExpiresLocal are local times in TimeZone, else in the
	// row's own zone; Disambiguation as for Notification.
	DueLocal, ExpiresLocal, TimeZone, Disambiguation string
}

func (u Update) body() map[string]any {
	b := map[string]any{}
	if u.Payload != nil {
		b["payload"] = u.Payload
	}
	if !u.DueAt.IsZero() {
		b["due_at"] = u.DueAt.UTC().Format(time.RFC3339Nano)
	}
	if u.ExpiresAt != nil {
		b["expires_at"] = u.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	for k, v := range map[string]string{"due_local": u.DueLocal, "expires_local": u.ExpiresLocal,
		"time_zone": u.TimeZone, "disambiguation": u.Disambiguation} {
		if v != "" {
			b[k] = v
		}
	}
	return b
}

// UpdateResult is what an update did.
type UpdateResult struct {
	ID    int64  `json:"id"`
	State string `json:"state"`
	// Changed: the row took the change now. InFlight: a worker is sending
	// it; Intent: the change waits on that send, applied if it is handed
	// back, too late if it delivers. Certain is Changed.
	Changed  bool `json:"changed"`
	InFlight bool `json:"in_flight"`
	Intent   bool `json:"intent"`
	Certain  bool `json:"certain"`
}

// Row is a scheduled notification as the API reports it.
type Row struct {
	ID        int64      `json:"id"`
	TenantID  string     `json:"tenant_id"`
	Recipient string     `json:"recipient"`
	Channel   string     `json:"channel"`
	Kind      string     `json:"kind"`
	RefID     string     `json:"ref_id"`
	DueAt     time.Time  `json:"due_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// TimeZone and DueLocal are the zone and the local time the row was
	// scheduled in, when it was.
	TimeZone string `json:"time_zone,omitempty"`
	DueLocal string `json:"due_local,omitempty"`
	// HeldFrom and Hold say, while quiet hours hold the row, the time it
	// was asked for and until when it is held (DueAt).
	HeldFrom *time.Time `json:"held_from,omitempty"`
	Hold     string     `json:"hold,omitempty"`
	Urgent   bool       `json:"urgent,omitempty"`
	// DigestID names the digest the row is in, or went out in (one
	// provider call listing its members); DigestFrom is then the due time
	// asked for, DueAt being the digest's send time.
	DigestID          int64      `json:"digest_id,omitempty"`
	DigestFrom        *time.Time `json:"digest_from,omitempty"`
	Payload           Payload    `json:"payload"`
	State             string     `json:"state"`
	Attempts          int        `json:"attempts"`
	DeliveredAt       *time.Time `json:"delivered_at,omitempty"`
	SettledAt         *time.Time `json:"settled_at,omitempty"`
	Provider          string     `json:"provider,omitempty"`
	ProviderMessageID string     `json:"provider_message_id,omitempty"`
	LastError         string     `json:"last_error,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	UpdatedAt         time.Time  `json:"updated_at"`
}

// Attempt is one send tried.
type Attempt struct {
	Attempt           int       `json:"attempt"`
	Provider          string    `json:"provider"`
	StartedAt         time.Time `json:"started_at"`
	FinishedAt        time.Time `json:"finished_at"`
	Outcome           string    `json:"outcome"`
	ProviderMessageID string    `json:"provider_message_id,omitempty"`
	HTTPStatus        int       `json:"http_status,omitempty"`
	Error             string    `json:"error,omitempty"`
	PossibleDuplicate bool      `json:"possible_duplicate,omitempty"`
}

// Receipt is one status the provider reported after accepting a send.
type Receipt struct {
	Provider          string     `json:"provider"`
	ProviderMessageID string     `json:"provider_message_id"`
	Status            string     `json:"status"`
	Code              string     `json:"code,omitempty"`
	OccurredAt        *time.Time `json:"occurred_at,omitempty"`
	ReceivedAt        time.Time  `json:"received_at"`
}

// Detail is one row with its sends and receipts: the answer to "was this
// recipient notified, and when".
type Detail struct {
	Row
	History  []Attempt `json:"history"`
	Receipts []Receipt `json:"receipts"`
	// ReceiptStatus is the provider's confirmed word, when it sent one.
	ReceiptStatus string     `json:"receipt_status,omitempty"`
	ReceiptCode   string     `json:"receipt_code,omitempty"`
	ConfirmedAt   *time.Time `json:"confirmed_at,omitempty"`
}

// ListOptions filters List; empty fields match every row.
type ListOptions struct {
	Recipient string
	RefID     string
	Kind      string
	// Limit is the rows per page (default and maximum 500).
	Limit int
	// Cursor is a Page's NextCursor; empty for the first page.
	Cursor string
}

// Page is one page of List, newest due first.
type Page struct {
	Notifications []Row `json:"notifications"`
	// NextCursor reads the following page (ListOptions.Cursor); empty on
	// the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}
