package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ReceiptStatus is what a provider said became of a message after it
// accepted it. The first two are interim, the last three final; a row's
// confirmed outcome is its final receipt when it has one (the latest by
// the provider's time), else its latest interim one (owed_receipt_rank,
// sql/receipts.sql).
type ReceiptStatus string

// The receipt statuses, in owed's words; internal/receipt maps each
// provider's vocabulary onto them.
const (
	// ReceiptSent: handed on towards the recipient (Twilio's "sent": the
	// carrier took it), not yet confirmed.
	ReceiptSent ReceiptStatus = "sent"
	// ReceiptDeferred: a temporary refusal the provider is retrying.
	ReceiptDeferred ReceiptStatus = "deferred"
	// ReceiptDelivered: the recipient's server or handset took it.
	ReceiptDelivered ReceiptStatus = "delivered"
	// ReceiptBounced: the recipient's side refused it (a hard bounce, an
	// unreachable handset).
	ReceiptBounced ReceiptStatus = "bounced"
	// ReceiptFailed: the provider gave up or would not send it (dropped, a
	// suppression, a carrier filter).
	ReceiptFailed ReceiptStatus = "failed"
)

// Valid reports whether s is one of the statuses above.
func (s ReceiptStatus) Valid() bool {
	switch s {
	case ReceiptSent, ReceiptDeferred, ReceiptDelivered, ReceiptBounced, ReceiptFailed:
		return true
	}
	return false
}

// Bounds of a receipt's texts, as owed_receipts checks them (bytes).
const (
	MaxReceiptProviderLen  = 64
	MaxReceiptMessageIDLen = 256
	MaxReceiptCodeLen      = 256
)

// Receipt is one provider callback about one message.
type Receipt struct {
	// Provider is the provider family (twilio, sendgrid, postmark,
	// webhook): the part of a Sender's name before its first ':'.
	Provider          string        `json:"provider"`
	ProviderMessageID string        `json:"provider_message_id"`
	Status            ReceiptStatus `json:"status"`
	// Code is the provider's own reason ("30003", "5.1.1", "HardBounce").
	Code string `json:"code,omitempty"`
	// OccurredAt is the provider's time of the event; nil when it gave none.
	OccurredAt *time.Time `json:"occurred_at,omitempty"`
	// ReceivedAt is when owed recorded it, by the ledger's clock; set on
	// read, ignored by RecordReceipt.
	ReceivedAt time.Time `json:"received_at"`
}

// Validate names the first field the ledger would refuse.
func (r Receipt) Validate() error {
	for _, f := range []struct {
		name, v string
		max     int
	}{{"provider", r.Provider, MaxReceiptProviderLen}, {"provider_message_id", r.ProviderMessageID, MaxReceiptMessageIDLen},
		{"code", r.Code, MaxReceiptCodeLen}} {
		// Postgres text holds no NUL byte.
		if (f.v == "" && f.name != "code") || len(f.v) > f.max || !utf8.ValidString(f.v) || strings.IndexByte(f.v, 0) >= 0 {
			return fmt.Errorf("ledger: receipt %s must be 1 to %d bytes of UTF-8 without NUL", f.name, f.max)
		}
	}
	if !r.Status.Valid() {
		return fmt.Errorf("ledger: receipt status %q is not one of sent, deferred, delivered, bounced, failed", r.Status)
	}
	return nil
}

// ReceiptResult says what RecordReceipt did.
type ReceiptResult struct {
	// Known: an accepted send through the provider had the message id.
	Known bool
	// Recorded: the receipt is new (false for a replay, or an unknown id).
	Recorded bool
}

// RecordReceipt keeps r against the row whose accepted send the provider
// gave r's message id, in whichever tenant that row is: the callback names
// no tenant, so this is the SECURITY DEFINER owed_receipt_record
// (sql/receipts.sql), which also moves the row's confirmed outcome on. A
// replay records nothing and an unknown id is no error: both are reported
// in the result.
func (l *Receipts) RecordReceipt(ctx context.Context, r Receipt) (ReceiptResult, error) {
	var res ReceiptResult
	if err := r.Validate(); err != nil {
		return res, err
	}
	var occurred *time.Time
	if r.OccurredAt != nil {
		t := r.OccurredAt.UTC()
		occurred = &t
	}
	err := l.queryRowAllTenants(ctx, qRecordReceipt, r.Provider, r.ProviderMessageID, string(r.Status),
		nullString(r.Code), occurred, l.now()).Scan(&res.Known, &res.Recorded)
	return res, err
}

// Outcome is a row's confirmed outcome: the receipt that governs it
// (owed_notifications.receipt_status, sql/notifications.sql), empty when no
// provider has said anything yet.
type Outcome struct {
	ReceiptStatus ReceiptStatus `json:"receipt_status,omitempty"`
	ReceiptCode   string        `json:"receipt_code,omitempty"`
	// ConfirmedAt is the governing receipt's time: the provider's, or the
	// time owed received it when the provider gave none.
	ConfirmedAt *time.Time `json:"confirmed_at,omitempty"`
}

// readReceipts fills d's confirmed outcome and its receipts, oldest first,
// in the transaction's tenant scope.
func readReceipts(tx *txn, id int64, d *Detail) error {
	var status, code sql.NullString
	var at sql.NullTime
	err := tx.QueryRow(qReceiptOutcome, id).Scan(&status, &code, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	d.Outcome = Outcome{ReceiptStatus: ReceiptStatus(status.String), ReceiptCode: code.String, ConfirmedAt: timePtr(at)}
	rows, err := tx.Query(qReceipts, id)
	if err != nil {
		return err
	}
	defer rows.Close()
	d.Receipts = []Receipt{}
	for rows.Next() {
		var r Receipt
		var code sql.NullString
		var occurred sql.NullTime
		if err := rows.Scan(&r.Provider, &r.ProviderMessageID, &r.Status, &code, &occurred, &r.ReceivedAt); err != nil {
			return err
		}
		r.Code, r.OccurredAt, r.ReceivedAt = code.String, timePtr(occurred), r.ReceivedAt.UTC()
		d.Receipts = append(d.Receipts, r)
	}
	return rows.Err()
}

// ReceiptStats splits the rows settled delivered since a time (the provider
// accepted them) by what the providers confirmed since, for `owedctl stats`.
type ReceiptStats struct {
	// Accepted counts rows settled delivered: the provider took them.
	Accepted int64 `json:"accepted"`
	// ConfirmedDelivered counts those a provider then confirmed delivered.
	ConfirmedDelivered int64 `json:"confirmed_delivered"`
	// Bounced and Failed count those a provider reported lost after
	// accepting them; the row stays delivered.
	Bounced int64 `json:"bounced"`
	Failed  int64 `json:"failed"`
	// Unconfirmed counts those with no final receipt (none, or only sent or
	// deferred): a provider without callbacks configured lands here.
	Unconfirmed int64 `json:"unconfirmed"`
}

// ReceiptStats reads the receipt figures of rows settled since since,
// across every tenant (owed_ledger_receipt_stats).
func (l *Reads) ReceiptStats(ctx context.Context, since time.Time) (ReceiptStats, error) {
	var s ReceiptStats
	err := l.queryRowAllTenants(ctx, qReceiptStats, since).Scan(&s.Accepted, &s.ConfirmedDelivered, &s.Bounced,
		&s.Failed, &s.Unconfirmed)
	return s, err
}

// The receipts' statements.
var (
	qRecordReceipt  = queries.Get("RecordReceipt")
	qReceiptOutcome = queries.Get("ReceiptOutcome")
	qReceipts       = queries.Get("Receipts")
	qReceiptStats   = queries.Get("ReceiptStats")
)
