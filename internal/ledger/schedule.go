package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/tenant"
)

// Limits on scheduled rows. The database enforces the same bounds; checking
// here gives the caller an error that names the field instead of a
// constraint name. The tenant id's rules are tenant.Validate's.
const (
	MaxScheduleBatch = 1000
	maxRecipientLen  = 512
	maxKindLen       = 128
	maxRefLen        = 256
)

// NewNotification is one row to schedule.
type NewNotification struct {
	Recipient string          `json:"recipient"`
	Channel   string          `json:"channel"`
	Kind      string          `json:"kind"`
	RefID     string          `json:"ref_id"`
	DueAt     time.Time       `json:"due_at"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	Payload   json.RawMessage `json:"payload"`
}

// Scheduled reports what Schedule did with one input row, in input order.
type Scheduled struct {
	ID      int64 `json:"id"`
	Created bool  `json:"created"`
	// State is the row's state when it already existed.
	State State `json:"state"`
}

// FieldError names one invalid field of one input row.
type FieldError struct {
	Index int    // position in the batch, -1 for the batch itself
	Field string // JSON name of the field
	Msg   string
}

func (e FieldError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("%s: %s", e.Field, e.Msg)
	}
	return fmt.Sprintf("notifications[%d].%s: %s", e.Index, e.Field, e.Msg)
}

// ValidationError lists every invalid field of a request; nothing was written.
type ValidationError struct{ Fields []FieldError }

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		msgs[i] = f.Error()
	}
	return "invalid input: " + strings.Join(msgs, "; ")
}

func (e *ValidationError) add(idx int, field, format string, args ...any) {
	e.Fields = append(e.Fields, FieldError{Index: idx, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (e *ValidationError) orNil() error {
	if len(e.Fields) == 0 {
		return nil
	}
	return e
}

func checkText(v *ValidationError, idx int, field, value string, max int) {
	switch {
	case strings.TrimSpace(value) == "":
		v.add(idx, field, "required")
	case len(value) > max:
		v.add(idx, field, "%d bytes exceeds the limit of %d", len(value), max)
	}
}

// checkTenant reports a tenant id tenant.Validate refuses, in the wording of
// the other fields ("tenant_id: required").
func checkTenant(v *ValidationError, id string) {
	if id == "" {
		v.add(-1, "tenant_id", "required")
		return
	}
	if err := tenant.Validate(id); err != nil {
		// tenant.Validate names the field; the FieldError names it once.
		v.add(-1, "tenant_id", "%s", strings.TrimPrefix(err.Error(), "tenant_id "))
	}
}

// ValidateTenant checks a tenant id by tenant.Validate's rules, as a
// *ValidationError naming the field tenant_id.
func ValidateTenant(id string) error {
	v := &ValidationError{}
	checkTenant(v, id)
	return v.orNil()
}

// Validate checks a batch without writing it. Every bad field is reported.
func Validate(tenant string, rows []NewNotification) error {
	v := &ValidationError{}
	checkTenant(v, tenant)
	switch {
	case len(rows) == 0:
		v.add(-1, "notifications", "at least one row is required")
	case len(rows) > MaxScheduleBatch:
		v.add(-1, "notifications", "%d rows exceeds the batch limit of %d", len(rows), MaxScheduleBatch)
	}
	for i, r := range rows {
		checkText(v, i, "recipient", r.Recipient, maxRecipientLen)
		checkText(v, i, "kind", r.Kind, maxKindLen)
		checkText(v, i, "ref_id", r.RefID, maxRefLen)
		if r.DueAt.IsZero() {
			v.add(i, "due_at", "required (RFC 3339 time)")
		}
		if r.ExpiresAt != nil && !r.ExpiresAt.After(r.DueAt) {
			v.add(i, "expires_at", "%s is not after due_at %s", r.ExpiresAt.UTC().Format(time.RFC3339),
				r.DueAt.UTC().Format(time.RFC3339))
		}
		if strings.TrimSpace(r.Channel) == "" {
			v.add(i, "channel", "required: one of %s", strings.Join(payload.Channels(), ", "))
		} else if _, err := payload.Parse(r.Channel, r.Payload); err != nil {
			// payload.Parse names the field (channel, payload, subject, text…).
			field, msg, ok := strings.Cut(err.Error(), ": ")
			if !ok {
				field, msg = "payload", err.Error()
			}
			if field != "channel" {
				field = "payload." + field
				if strings.HasPrefix(field, "payload.payload") {
					field = "payload"
				}
			}
			v.add(i, field, "%s", msg)
		}
	}
	return v.orNil()
}

// scheduleInput is one element of qSchedule's JSON array: the row and its
// place in the batch.
type scheduleInput struct {
	Idx int `json:"idx"`
	NewNotification
}

// Schedule inserts rows for tenant idempotently: a row whose (recipient,
// kind, ref_id, due_at) already exists is reported, not inserted again. The
// batch is validated first; if any field is bad nothing is written.
func (l *Ledger) Schedule(ctx context.Context, tenant string, rows []NewNotification) ([]Scheduled, error) {
	if err := Validate(tenant, rows); err != nil {
		return nil, err
	}
	in := make([]scheduleInput, len(rows))
	for i, r := range rows {
		in[i] = scheduleInput{Idx: i, NewNotification: r}
		in[i].DueAt = r.DueAt.UTC().Truncate(time.Microsecond)
		if r.ExpiresAt != nil {
			e := r.ExpiresAt.UTC().Truncate(time.Microsecond)
			in[i].ExpiresAt = &e
		}
	}
	doc, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	out := make([]Scheduled, len(rows))
	err = l.withTenant(ctx, tenant, func(tx *txn) error {
		res, err := tx.Query(qSchedule, string(doc), tenant, l.now())
		if err != nil {
			return err
		}
		defer res.Close()
		for res.Next() {
			var idx int
			var id sql.NullInt64
			var s Scheduled
			if err := res.Scan(&idx, &id, &s.Created, &s.State); err != nil {
				return err
			}
			s.ID = id.Int64
			out[idx] = s
		}
		if err := res.Err(); err != nil {
			return err
		}
		res.Close()
		for i := range out {
			if out[i].ID != 0 {
				continue
			}
			r := in[i]
			if err := tx.QueryRow(qFindScheduled, tenant, r.Recipient, r.Kind, r.RefID, r.DueAt).
				Scan(&out[i].ID, &out[i].State); err != nil {
				return fmt.Errorf("find row scheduled concurrently: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The same key twice in one batch is one row: only its first mention
	// created it.
	seen := make(map[int64]bool, len(out))
	for i := range out {
		if seen[out[i].ID] {
			out[i].Created = false
		}
		seen[out[i].ID] = true
	}
	return out, nil
}

// ChangeResult reports what Cancel or Reschedule did to one subject's rows.
type ChangeResult struct {
	// Changed counts open rows that were cancelled or moved.
	Changed int64 `json:"changed"`
	// InFlight counts rows a worker is sending right now; they were left
	// alone, and their send's outcome stands.
	InFlight int64 `json:"in_flight"`
}

func validateSubject(tenant, kind, ref string) *ValidationError {
	v := &ValidationError{}
	checkTenant(v, tenant)
	checkText(v, -1, "kind", kind, maxKindLen)
	checkText(v, -1, "ref_id", ref, maxRefLen)
	return v
}

// Cancel settles every open row of (tenant, kind, ref) as cancelled, say
// when the ticket was closed. Settled rows, delivered ones above all, are
// never changed.
func (l *Ledger) Cancel(ctx context.Context, tenant, kind, ref string) (ChangeResult, error) {
	if err := validateSubject(tenant, kind, ref).orNil(); err != nil {
		return ChangeResult{}, err
	}
	return l.changeSubject(ctx, tenant, kind, ref, qCancel)
}

// ErrConflict is returned when a reschedule would collide with a row already
// scheduled for the same recipient, kind, ref and new due time.
var ErrConflict = errors.New("ledger: a notification for this recipient, kind and ref_id is already scheduled at that due_at")

// Reschedule moves every open row of (tenant, kind, ref) to newDue (a snooze).
func (l *Ledger) Reschedule(ctx context.Context, tenant, kind, ref string, newDue time.Time) (ChangeResult, error) {
	v := validateSubject(tenant, kind, ref)
	if newDue.IsZero() {
		v.add(-1, "due_at", "required (RFC 3339 time)")
	}
	if err := v.orNil(); err != nil {
		return ChangeResult{}, err
	}
	res, err := l.changeSubject(ctx, tenant, kind, ref, qReschedule, newDue.UTC().Truncate(time.Microsecond))
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23505" {
		return ChangeResult{}, ErrConflict
	}
	return res, err
}

// changeSubject runs query (qCancel or qReschedule: $1 to $3 name the
// subject, $4 is now, extra follow) and counts what it left in flight, both
// at the one instant of its transaction.
func (l *Ledger) changeSubject(ctx context.Context, tenant, kind, ref, query string, extra ...any) (ChangeResult, error) {
	var res ChangeResult
	now := l.now()
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		r, err := tx.Exec(query, append([]any{tenant, kind, ref, now}, extra...)...)
		if err != nil {
			return err
		}
		if res.Changed, err = r.RowsAffected(); err != nil {
			return err
		}
		return tx.QueryRow(qCountInFlight, tenant, kind, ref, now).Scan(&res.InFlight)
	})
	return res, err
}
