package ledger

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/payload"
)

// ErasePrefix begins the recipient of a tombstone: an erased row's
// recipient is ErasePrefix followed by its id.
const ErasePrefix = "erased:"

// maxRequestedByLen and maxReasonLen are owed_erasures' bounds
// (internal/ledger/sql/erasures.sql).
const (
	maxRequestedByLen = 256
	maxReasonLen      = 1024
)

// EraseRequest names whose data to forget and who asked.
type EraseRequest struct {
	Tenant    string
	Recipient string
	// Channel narrows the erasure to one channel; empty: every channel.
	Channel string
	// RequestedBy says who asked ("owedctl:<operator>", "api:<token>").
	RequestedBy string
	Reason      string
}

// Erasure is what one erasure did, as owed_erasures records it.
type Erasure struct {
	// ID is the owed_erasures row.
	ID int64 `json:"id"`
	// Rows are the ledger rows now tombstones.
	Rows []int64 `json:"notification_ids"`
	// Cancelled counts the Rows that were still owed and are now cancelled.
	Cancelled int `json:"cancelled"`
	// InFlight counts the recipient's rows a worker was sending at that
	// moment, left as they were: erase again once they settle.
	InFlight       int `json:"in_flight"`
	Attempts       int `json:"attempts"`
	Contacts       int `json:"contacts"`
	Undeliverable  int `json:"undeliverable"`
	Items          int `json:"items"`
	SharedPayloads int `json:"shared_payloads"`
}

// Validate checks the request, naming every bad field.
func (r EraseRequest) Validate() error {
	v := &ValidationError{}
	checkTenant(v, r.Tenant)
	checkText(v, -1, "recipient", r.Recipient, maxRecipientLen)
	if r.Channel != "" && !slices.Contains(payload.Channels(), r.Channel) {
		v.add(-1, "channel", "%q is not a channel: one of %s, or empty for every channel", r.Channel,
			strings.Join(payload.Channels(), ", "))
	}
	checkText(v, -1, "requested_by", r.RequestedBy, maxRequestedByLen)
	if len(r.Reason) > maxReasonLen {
		v.add(-1, "reason", "%d bytes is over the limit of %d", len(r.Reason), maxReasonLen)
	}
	return v.orNil()
}

// Erase forgets a recipient of a tenant (the Erase statement,
// internal/ledger/sql/queries.sql, says what each table keeps and loses)
// in one transaction in the tenant's scope, and records the erasure in
// owed_erasures. Erasing again is safe: it finds only the rows that were
// in flight the first time.
func (l *Scheduling) Erase(ctx context.Context, r EraseRequest) (Erasure, error) {
	if err := r.Validate(); err != nil {
		return Erasure{}, err
	}
	var e Erasure
	err := l.withTenant(ctx, r.Tenant, func(tx *txn) error {
		return tx.QueryRow(qErase, r.Tenant, r.Recipient, r.Channel, r.RequestedBy, r.Reason, l.now()).
			Scan(&e.ID, pq.Array(&e.Rows), &e.Cancelled, &e.InFlight, &e.Attempts, &e.Contacts, &e.Undeliverable,
				&e.Items, &e.SharedPayloads)
	})
	if err != nil {
		return Erasure{}, fmt.Errorf("erase: %w", err)
	}
	return e, nil
}

var qErase = queries.Get("Erase")
