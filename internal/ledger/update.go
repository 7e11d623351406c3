package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/localtime"
	"github.com/owedhq/owed/internal/payload"
)

// Change is what Update replaces on one unsettled row; a field left zero
// keeps the row's value.
type Change struct {
	// Payload replaces the row's payload (checked against its channel).
	Payload json.RawMessage
	// DueAt moves the row, as Reschedule moves one. Its expiry, unless
	// the change gives one, moves with it and keeps its distance.
	DueAt time.Time
	// ExpiresAt replaces the row's expiry.
	ExpiresAt *time.Time
	// Local gives the due time or the expiry as wall-clock times in
	// TimeZone, else in the row's own zone.
	Local *Local
	// TimeZone is the zone Local is read in, recorded on the row.
	TimeZone string
}

// Key names a row by its schedule key, the idempotency tuple of Schedule.
type Key struct {
	Recipient, Kind, RefID string
	DueAt                  time.Time
}

// UpdateResult is what Update did.
type UpdateResult struct {
	ID int64 `json:"id"`
	// State is the row's state after the change.
	State State `json:"state"`
	// Changed is true when the row took the change now: it is certain.
	Changed bool `json:"changed"`
	// InFlight is true when a worker is sending the row right now; the
	// change is then recorded as an intent (Intent), applied when the send
	// ends if the send is handed back, and too late if it delivers.
	InFlight bool `json:"in_flight"`
	Intent   bool `json:"intent"`
	// Certain says whether what the row will send is now the changed
	// content at the changed time: Changed, never an intent.
	Certain bool `json:"certain"`
}

// ErrSettled is returned by Update for a row that settled: nothing of it
// may change any more.
type ErrSettled struct {
	ID    int64
	State State
}

func (e *ErrSettled) Error() string {
	return fmt.Sprintf("ledger: notification %d is %s (settled): only an unsettled row can be updated", e.ID, e.State)
}

// ErrCancelWaiting is returned by Update for a row whose send is in flight
// with a cancel waiting on it: the cancel came first and wins.
var ErrCancelWaiting = errors.New("ledger: the notification's send is in flight with a cancel waiting on it: " +
	"it ends cancelled unless it is delivered first, so there is nothing to update")

// The statements of Update, beside it.
var (
	qLockRowByID   = queries.Get("LockRowByID")
	qLockRowByKey  = queries.Get("LockRowByKey")
	qRowState      = queries.Get("RowState")
	qRowStateByKey = queries.Get("RowStateByKey")
	qHandBackLapse = queries.Get("HandBackLapsed")
	qUpdateOpen    = queries.Get("UpdateOpen")
	qRecordUpdate  = queries.Get("RecordUpdate")
	qKeyTaken      = queries.Get("KeyTaken")
)

// Update replaces the payload, expiry or due time of the unsettled row id.
// An open row (pending, leased, queued, or claimed by a worker that has
// not started its send) takes the change at once; a row a worker is
// sending takes it as an intent (owed_apply_intent, sql/intents.sql). It
// returns ErrNotFound, *ErrSettled, ErrCancelWaiting, ErrConflict (a new
// due time another row of the recipient already has) or a
// *ValidationError naming the field.
func (l *Scheduling) Update(ctx context.Context, tenant string, id int64, c Change) (UpdateResult, error) {
	return l.update(ctx, tenant, c, func(tx *txn, now any) scanner {
		return tx.QueryRow(qLockRowByID, id, now)
	}, func(tx *txn) error {
		var st State
		if err := tx.QueryRow(qRowState, id).Scan(&st); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		return &ErrSettled{ID: id, State: st}
	})
}

// UpdateByKey is Update of the row with the schedule key k.
func (l *Scheduling) UpdateByKey(ctx context.Context, tenant string, k Key, c Change) (UpdateResult, error) {
	if err := ValidateKey(tenant, k); err != nil {
		return UpdateResult{}, err
	}
	due := k.DueAt.UTC().Truncate(time.Microsecond)
	return l.update(ctx, tenant, c, func(tx *txn, now any) scanner {
		return tx.QueryRow(qLockRowByKey, tenant, now, k.Recipient, k.Kind, k.RefID, due)
	}, func(tx *txn) error {
		var id int64
		var st State
		err := tx.QueryRow(qRowStateByKey, tenant, k.Recipient, k.Kind, k.RefID, due).Scan(&id, &st)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		return &ErrSettled{ID: id, State: st}
	})
}

// ValidateKey checks a schedule key as UpdateByKey does, without reading
// anything.
func ValidateKey(tenant string, k Key) error {
	v := validateSubject(tenant, k.Kind, k.RefID)
	checkText(v, -1, "recipient", k.Recipient, maxRecipientLen)
	if k.DueAt.IsZero() {
		v.add(-1, "due_at", "required (RFC 3339 time): the row's due time, part of its key")
	} else {
		checkTime(v, -1, "due_at", k.DueAt)
	}
	return v.orNil()
}

// updateRow is what update reads of the row it changes (updateColumns).
type updateRow struct {
	id                            int64
	recipient, kind, ref, channel string
	state                         State
	due                           time.Time
	expires                       sql.NullTime
	dueLocal                      sql.NullTime
	zone                          sql.NullString
	cancelWaiting                 bool
	waitingDue, waitingExpires    sql.NullTime
	waitingPayload                []byte
	inFlight                      bool
}

// ValidateChange checks what Update checks before it reads the row.
func ValidateChange(tenant string, c Change) error {
	v := &ValidationError{}
	checkTenant(v, tenant)
	checkChange(v, c)
	return v.orNil()
}

func checkChange(v *ValidationError, c Change) {
	if len(c.Payload) == 0 && c.DueAt.IsZero() && c.ExpiresAt == nil && c.Local == nil {
		v.add(-1, "payload", "nothing to change: give payload, due_at or due_local, expires_at or expires_local")
	}
	if !c.DueAt.IsZero() {
		checkTime(v, -1, "due_at", c.DueAt)
	}
	if c.ExpiresAt != nil {
		checkTime(v, -1, "expires_at", *c.ExpiresAt)
	}
}

func (l *Scheduling) update(ctx context.Context, tenant string, c Change, lock func(*txn, any) scanner,
	missing func(*txn) error) (UpdateResult, error) {
	if err := ValidateChange(tenant, c); err != nil {
		return UpdateResult{}, err
	}
	var res UpdateResult
	now := l.now()
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		read := func() (updateRow, error) {
			var r updateRow
			err := lock(tx, now).Scan(&r.id, &r.recipient, &r.kind, &r.ref, &r.channel, &r.state, &r.due, &r.expires,
				&r.dueLocal, &r.zone, &r.cancelWaiting, &r.waitingDue, &r.waitingExpires, &r.waitingPayload, &r.inFlight)
			return r, err
		}
		r, err := read()
		if errors.Is(err, sql.ErrNoRows) {
			return missing(tx)
		}
		if err != nil {
			return err
		}
		// A claim that ran out with an intent waiting is handed back first,
		// so the earlier word is applied before this one is decided.
		if h, err := tx.Exec(qHandBackLapse, r.id, now); err != nil {
			return err
		} else if n, _ := h.RowsAffected(); n > 0 {
			if r, err = read(); errors.Is(err, sql.ErrNoRows) {
				return missing(tx)
			} else if err != nil {
				return err
			}
		}
		if r.inFlight && r.cancelWaiting {
			return ErrCancelWaiting
		}
		next, err := r.apply(c)
		if err != nil {
			return err
		}
		if !next.due.Equal(r.due) {
			var taken bool
			if err := tx.QueryRow(qKeyTaken, tenant, r.id, r.recipient, r.kind, r.ref, next.due).Scan(&taken); err != nil {
				return err
			}
			if taken {
				return ErrConflict
			}
		}
		res.ID = r.id
		if r.inFlight {
			if _, err := tx.Exec(qRecordUpdate, r.id, now, next.payload, next.due, next.expires, next.dueLocal,
				next.zone); err != nil {
				return err
			}
			res.State, res.InFlight, res.Intent = StateSending, true, true
			// The move takes the quiet hours in force at its new time when
			// the send is handed back.
			_, _, err := l.reholdIntents(tx, tenant, r.id, "", "")
			return err
		}
		if _, err := tx.Exec(qUpdateOpen, r.id, now, next.payload, next.due, next.expires, next.dueLocal,
			next.zone); err != nil {
			return err
		}
		res.Changed, res.Certain = true, true
		if !next.due.Equal(r.due) {
			// The row takes the quiet hours in force at its new time.
			if _, err := l.rehold(tx, tenant, r.id, "", ""); err != nil {
				return err
			}
		}
		return tx.QueryRow(qRowState, r.id).Scan(&res.State)
	})
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23505" {
		return UpdateResult{}, ErrConflict
	}
	if err != nil {
		return UpdateResult{}, err
	}
	return res, nil
}

// rowValues are a row's new values once a change applies.
type rowValues struct {
	payload  any // the canonical payload as text, or nil to keep the row's
	due      time.Time
	expires  *time.Time
	dueLocal any // the local due time (localtime.Layout), or nil
	zone     any
}

// apply works out r's values after c: the change on top of the row, or on
// top of the reschedule or update already waiting on its send. The errors
// are *ValidationErrors naming the request's fields.
func (r updateRow) apply(c Change) (rowValues, error) {
	v := &ValidationError{}
	due, expires := r.due, timePtr(r.expires)
	var dueLocal any
	if r.dueLocal.Valid {
		dueLocal = localtime.FormatCivil(r.dueLocal.Time)
	}
	if r.inFlight && r.waitingDue.Valid {
		due, expires, dueLocal = r.waitingDue.Time, timePtr(r.waitingExpires), nil
	}
	out := rowValues{zone: nullString(r.zone.String)}
	if r.inFlight && r.waitingPayload != nil {
		out.payload = string(r.waitingPayload)
	}
	if len(c.Payload) > 0 {
		if _, canon, err := payload.ParseCanonical(r.channel, c.Payload); err != nil {
			addPayloadError(v, -1, err)
		} else {
			out.payload = string(canon)
		}
	}
	// The change's times, resolved as Schedule resolves a row's: in the
	// change's zone, else the row's.
	n := NewNotification{DueAt: c.DueAt, ExpiresAt: c.ExpiresAt, Local: c.Local, TimeZone: c.TimeZone}
	if n.TimeZone == "" && n.Local != nil {
		n.TimeZone = r.zone.String
	}
	resolved := resolveLocal(v, []NewNotification{n}, func(int) (string, bool) { return "", true })[0]
	for i := range v.Fields {
		v.Fields[i].Index = -1
	}
	if len(v.Fields) > 0 {
		return out, v
	}
	if resolved.TimeZone != "" {
		out.zone = resolved.TimeZone
	}
	newDue := !resolved.DueAt.IsZero()
	if newDue {
		moved := resolved.DueAt.UTC().Truncate(time.Microsecond)
		if expires != nil && resolved.ExpiresAt == nil {
			e := expires.Add(moved.Sub(due))
			expires = &e
		}
		due, dueLocal = moved, nullString(resolved.DueLocal)
		if resolved.DueLocal == "" {
			dueLocal = nil
		}
	}
	if resolved.ExpiresAt != nil {
		e := resolved.ExpiresAt.UTC().Truncate(time.Microsecond)
		expires = &e
	}
	out.due, out.expires, out.dueLocal = due, expires, dueLocal
	if expires != nil {
		field := "expires_at"
		switch {
		case c.Local != nil && c.Local.Expires != "":
			field = "expires_local"
		case c.ExpiresAt == nil && newDue:
			field = "due_at"
		}
		if !InRange(*expires) {
			v.add(-1, field, "the expiry %s is outside %s (an expiry moves with its due time)",
				expires.Format(time.RFC3339Nano), TimeRange)
		} else if !expires.After(due) {
			v.add(-1, field, "the expiry %s is not after the due time %s", expires.Format(time.RFC3339),
				due.Format(time.RFC3339))
		}
	}
	return out, v.orNil()
}
