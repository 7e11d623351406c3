package ledger

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/tenant"
)

// Undeliverable is an address a provider refused for good as the
// recipient's own (a STOP reply, a blocked bot, an inactive or invalid
// address): the worker skips later sends to it on its channel in its tenant
// until it is cleared (owed_undeliverable, sql/undeliverable.sql).
type Undeliverable struct {
	Tenant  string `json:"tenant_id"`
	Channel string `json:"channel"`
	Address string `json:"address"`
	// Provider and Code are the refusing provider's name and its own code
	// ("twilio", "21610").
	Provider string `json:"provider"`
	Code     string `json:"code"`
	Reason   string `json:"reason"`
	// NotificationID is the row whose send failed; 0 once it is gone.
	NotificationID int64 `json:"notification_id,omitempty"`
	// MarkedAt is when it was (last) marked, by the ledger's clock; set on
	// read, ignored by MarkUndeliverable.
	MarkedAt time.Time `json:"marked_at"`
}

// Bounds of owed_undeliverable's texts (bytes), as the table checks them.
const (
	maxUndeliverableAddress = 1024
	maxUndeliverableReason  = 4096
)

// clip cuts s to at most n bytes of valid UTF-8 without NUL: a provider's
// message is free text, and a mark must not fail over its length.
func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) > n {
		s = s[:n]
	}
	// A rune cut in two is dropped whole.
	return strings.ToValidUTF8(s, "")
}

// MarkUndeliverable records u's address as undeliverable in u.Tenant's scope; marking
// it again replaces the earlier failure with this one.
func (l *Work) MarkUndeliverable(ctx context.Context, u Undeliverable) error {
	if u.Channel == "" || u.Address == "" || len(u.Address) > maxUndeliverableAddress || u.Provider == "" {
		return errors.New("ledger: an undeliverable mark needs a channel, an address (at most 1024 bytes) and a provider")
	}
	var nid *int64
	if u.NotificationID != 0 {
		nid = &u.NotificationID
	}
	return tenant.InTx(ctx, l.db, u.Tenant, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, qMarkUndeliverable,
			u.Tenant, u.Channel, u.Address, clip(u.Provider, 64), clip(u.Code, 256),
			clip(u.Reason, maxUndeliverableReason), nid, l.now())
		return err
	})
}

// The marks' statements (sql/queries.sql), each in the caller's tenant scope.
var (
	qMarkUndeliverable   = queries.Get("MarkUndeliverable")
	qLookupUndeliverable = queries.Get("LookupUndeliverable")
	qClearUndeliverable  = queries.Get("ClearUndeliverable")
	qListUndeliverable   = queries.Get("ListUndeliverable")
)

func scanUndeliverable(s interface{ Scan(...any) error }) (Undeliverable, error) {
	var u Undeliverable
	err := s.Scan(&u.Tenant, &u.Channel, &u.Address, &u.Provider, &u.Code, &u.Reason, &u.NotificationID, &u.MarkedAt)
	return u, err
}

// LookupUndeliverable reads the mark of address on channel in tenant's scope: one read
// by the table's key. ok is false when the address is not marked.
func (l *Work) LookupUndeliverable(ctx context.Context, tenantID, channel, address string) (u Undeliverable, ok bool, err error) {
	err = tenant.InTx(ctx, l.db, tenantID, func(tx *sql.Tx) error {
		u, err = scanUndeliverable(tx.QueryRowContext(ctx, qLookupUndeliverable, tenantID, channel, address))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Undeliverable{}, false, nil
	}
	return u, err == nil, err
}

// ClearUndeliverable removes the mark of address on channel in tenant's scope (the
// customer re-subscribed) and says whether there was one.
func (l *Actions) ClearUndeliverable(ctx context.Context, tenantID, channel, address string) (bool, error) {
	var n int64
	err := tenant.InTx(ctx, l.db, tenantID, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, qClearUndeliverable, tenantID, channel, address)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n > 0, err
}

// ListUndeliverable returns tenant's marks, newest first, on channel only unless it is
// empty.
func (l *Reads) ListUndeliverable(ctx context.Context, tenantID, channel string) ([]Undeliverable, error) {
	var out []Undeliverable
	err := tenant.InTx(ctx, l.db, tenantID, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, qListUndeliverable, tenantID, channel)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			u, err := scanUndeliverable(rows)
			if err != nil {
				return err
			}
			out = append(out, u)
		}
		return rows.Err()
	})
	return out, err
}
