package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/localtime"
)

// QuietHours is one scope of a tenant's send windows (owed_quiet_hours,
// sql/quiet_hours.sql): outside every window, a row of the scope is held
// until the next opening on its recipient's wall clock.
type QuietHours struct {
	// Scope is "tenant", "kind:<kind>" or "recipient:<recipient>"; the
	// most specific scope with windows applies to a row.
	Scope string `json:"scope"`
	// Windows are localtime.ParseWindow's ("mon-fri 08:00-20:00"); none
	// removes the scope.
	Windows []string `json:"windows"`
	// TimeZone is the zone of a row that has none of its own and whose
	// recipient's contact names none; empty is UTC.
	TimeZone string `json:"time_zone,omitempty"`
}

// HoldResult counts what a change of quiet hours did to the tenant's
// pending rows.
type HoldResult struct {
	// Held counts rows moved to a window's opening, Released rows a hold
	// no longer applies to (back at the due time asked for).
	Held     int `json:"held"`
	Released int `json:"released"`
	// Expired counts rows whose expiry falls inside their hold: settled
	// expired, never sent. Merged counts rows held onto the schedule key
	// of another row (the recipient's same notification at that opening),
	// settled cancelled since that row is the send.
	Expired int `json:"expired"`
	Merged  int `json:"merged"`
}

// The statements of quiet hours, beside their callers.
var (
	qQuietHours       = queries.Get("QuietHours")
	qUpsertQuietHours = queries.Get("UpsertQuietHours")
	qDeleteQuietHours = queries.Get("DeleteQuietHours")
	qPendingToHold    = queries.Get("PendingToHold")
	qMoveHolds        = queries.Get("MoveHolds")
	qSettleHeld       = queries.Get("SettleHeld")
	qIntentsToHold    = queries.Get("IntentsToHold")
	qMoveIntentHolds  = queries.Get("MoveIntentHolds")
)

// expiredInHold is the last_error of a row settled because its expiry falls
// inside its hold; owed_expired_in_hold (sql/intents.sql) writes the same
// for a move waiting on a send.
const expiredInHold = "expired before it was sent: its expiry falls inside the quiet hours that hold it"

// quietRule is one scope's windows, parsed.
type quietRule struct {
	windows []localtime.Window
	zone    string
}

// quietRules are a tenant's scopes by name.
type quietRules map[string]quietRule

// rule is the rule of a row: its recipient's, else its kind's, else the
// tenant's.
func (q quietRules) rule(recipient, kind string) (quietRule, bool) {
	for _, scope := range []string{"recipient:" + recipient, "kind:" + kind, "tenant"} {
		if r, ok := q[scope]; ok {
			return r, true
		}
	}
	return quietRule{}, false
}

// ValidateQuietHours checks what SetQuietHours checks, naming the field.
func ValidateQuietHours(tenant string, q QuietHours) error {
	v := &ValidationError{}
	checkTenant(v, tenant)
	name, rest, _ := strings.Cut(q.Scope, ":")
	switch {
	case q.Scope == "tenant":
	case name == "kind" && rest != "":
		checkText(v, -1, "scope", rest, maxKindLen)
	case name == "recipient" && rest != "":
		checkText(v, -1, "scope", rest, maxRecipientLen)
	default:
		v.add(-1, "scope", "%q is not a scope; accepted: tenant, kind:<kind>, recipient:<recipient>", q.Scope)
	}
	if len(q.Windows) > 32 {
		v.add(-1, "windows", "%d windows exceeds the limit of 32", len(q.Windows))
	}
	for i, w := range q.Windows {
		if _, err := localtime.ParseWindow(w); err != nil {
			v.add(-1, fmt.Sprintf("windows[%d]", i), "%v", err)
		}
	}
	if q.TimeZone != "" {
		if _, err := localtime.LoadZone(q.TimeZone); err != nil {
			v.add(-1, "time_zone", "%v", err)
		}
	}
	return v.orNil()
}

func loadQuiet(tx *txn, tenant string) (quietRules, error) {
	res, err := tx.Query(qQuietHours, tenant)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	q := quietRules{}
	for res.Next() {
		var scope, zone string
		var windows []string
		if err := res.Scan(&scope, pq.Array(&windows), &zone); err != nil {
			return nil, err
		}
		r := quietRule{zone: zone}
		for _, s := range windows {
			// A window the table holds was checked when it was written; one
			// written by hand that no longer parses holds nothing back.
			if w, err := localtime.ParseWindow(s); err == nil {
				r.windows = append(r.windows, w)
			}
		}
		q[scope] = r
	}
	return q, res.Err()
}

// holdOf is a row's hold under its rule: the effective due time (the
// window's opening when it is held), whether it is held, and whether its
// expiry falls inside the hold (it then expires unsent; due is still the
// opening). zone is the row's zone, its contact's, or "".
func holdOf(r quietRule, zone string, asked time.Time, expires *time.Time) (due time.Time, held, expire bool) {
	if zone == "" {
		zone = r.zone
	}
	loc := time.UTC
	if zone != "" {
		if l, err := localtime.LoadZone(zone); err == nil {
			loc = l
		}
	}
	open := localtime.NextOpening(asked, loc, r.windows).UTC().Truncate(time.Microsecond)
	if !open.After(asked) {
		return asked, false, false
	}
	if expires != nil && !expires.After(open) {
		return open, false, true
	}
	return open, true, false
}

// contactZonesOf reads the contact zone of each (recipient, channel) pair
// (ContactZones), by the pair's index.
func contactZonesOf(tx *txn, tenant string, recipients, channels []string) (map[int]string, error) {
	zones := map[int]string{}
	if len(recipients) == 0 {
		return zones, nil
	}
	res, err := tx.Query(qContactZones, tenant, pq.Array(recipients), pq.Array(channels))
	if err != nil {
		return nil, fmt.Errorf("read the contacts' time zones: %w", err)
	}
	defer res.Close()
	for res.Next() {
		var k int
		var zone string
		if err := res.Scan(&k, &zone); err != nil {
			return nil, err
		}
		zones[k-1] = zone
	}
	return zones, res.Err()
}

// holdRows applies the tenant's quiet hours to rows about to be scheduled:
// a row due outside its windows moves to the next opening (HeldFrom keeps
// the time asked), unless it is urgent; a row whose expiry falls inside the
// hold keeps its due time and is returned in expire, to be settled expired
// once written. Rows without a rule are returned as given.
func holdRows(tx *txn, tenant string, rows []NewNotification) (out []NewNotification, expire []int, err error) {
	q, err := loadQuiet(tx, tenant)
	if err != nil || len(q) == 0 {
		return rows, nil, err
	}
	var recipients, channels []string
	var asked []int
	for i, r := range rows {
		if _, ok := q.rule(r.Recipient, r.Kind); ok && !r.Urgent && r.TimeZone == "" {
			recipients, channels, asked = append(recipients, r.Recipient), append(channels, r.Channel), append(asked, i)
		}
	}
	byPair, err := contactZonesOf(tx, tenant, recipients, channels)
	if err != nil {
		return nil, nil, err
	}
	zones := make(map[int]string, len(byPair))
	for k, z := range byPair {
		zones[asked[k]] = z
	}
	out = append([]NewNotification(nil), rows...)
	for i, r := range out {
		rule, ok := q.rule(r.Recipient, r.Kind)
		if !ok || r.Urgent {
			continue
		}
		zone := r.TimeZone
		if zone == "" {
			zone = zones[i]
		}
		due, held, exp := holdOf(rule, zone, r.DueAt.UTC().Truncate(time.Microsecond), r.ExpiresAt)
		switch {
		case exp:
			expire = append(expire, i)
		case held:
			from := r.DueAt
			out[i].HeldFrom, out[i].DueAt = &from, due
		}
	}
	return out, expire, nil
}

// SetQuietHours writes one scope of tenant's send windows (none removes
// it) and, in the same transaction, moves every pending row of the tenant
// that is not urgent to the new rule: held to the next opening, released
// back to the time it was asked for, or settled expired when its expiry
// falls inside its hold. A move waiting on a send (a reschedule or update
// of a row in flight) is held or released the same way, and counted in
// Held or Released; one whose expiry falls inside its new hold expires
// the row when it applies.
func (l *Scheduling) SetQuietHours(ctx context.Context, tenant string, q QuietHours) (HoldResult, error) {
	if err := ValidateQuietHours(tenant, q); err != nil {
		return HoldResult{}, err
	}
	var res HoldResult
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		var err error
		if len(q.Windows) == 0 {
			_, err = tx.Exec(qDeleteQuietHours, tenant, q.Scope)
		} else {
			_, err = tx.Exec(qUpsertQuietHours, tenant, q.Scope, pq.Array(q.Windows), nullString(q.TimeZone), l.now())
		}
		if err != nil {
			return err
		}
		if res, err = l.rehold(tx, tenant, 0, "", ""); err != nil {
			return err
		}
		held, released, err := l.reholdIntents(tx, tenant, 0, "", "")
		res.Held, res.Released = res.Held+held, res.Released+released
		return err
	})
	return res, err
}

// QuietHoursOf reads every scope of tenant's send windows, as
// SetQuietHours wrote them, ordered by scope.
func (l *Reads) QuietHoursOf(ctx context.Context, tenant string) ([]QuietHours, error) {
	if err := ValidateTenant(tenant); err != nil {
		return nil, err
	}
	out := []QuietHours{}
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		res, err := tx.Query(qQuietHours, tenant)
		if err != nil {
			return err
		}
		defer res.Close()
		for res.Next() {
			var q QuietHours
			if err := res.Scan(&q.Scope, pq.Array(&q.Windows), &q.TimeZone); err != nil {
				return err
			}
			out = append(out, q)
		}
		return res.Err()
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out, nil
}

// heldRow is a pending row as rehold reads it (PendingToHold), or a move
// waiting on a send as reholdIntents does (IntentsToHold: asked, held and
// due are the intent's).
type heldRow struct {
	id                                  int64
	recipient, channel, kind, ref, zone string
	asked, due                          time.Time
	held                                bool
	expires                             sql.NullTime
}

// readHolds runs query (PendingToHold or IntentsToHold) for tenant's rows
// (all, one id, or one subject) and fills in the zone of each row that
// has none of its own from its recipient's contact.
func readHolds(tx *txn, query, tenant string, id int64, kind, ref string) ([]heldRow, error) {
	rs, err := tx.Query(query, tenant, id, kind, ref)
	if err != nil {
		return nil, err
	}
	var rows []heldRow
	for rs.Next() {
		var r heldRow
		if err := rs.Scan(&r.id, &r.recipient, &r.channel, &r.kind, &r.ref, &r.asked, &r.held, &r.due, &r.expires,
			&r.zone); err != nil {
			rs.Close()
			return nil, err
		}
		rows = append(rows, r)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, err
	}
	var recipients, channels []string
	var asked []int
	for i, r := range rows {
		if r.zone == "" {
			recipients, channels, asked = append(recipients, r.recipient), append(channels, r.channel), append(asked, i)
		}
	}
	byPair, err := contactZonesOf(tx, tenant, recipients, channels)
	if err != nil {
		return nil, err
	}
	for k, z := range byPair {
		rows[asked[k]].zone = z
	}
	return rows, nil
}

// reholdIntents holds the tenant's moves waiting on a send (all, one row's,
// or one subject's) for the quiet hours in force, as rehold holds pending
// rows: a move into quiet hours waits for the opening (intent_held_from
// keeps the time asked), one whose expiry falls inside that hold is
// recorded with it and expires the row when it applies (owed_apply_intent,
// sql/intents.sql), and one no window holds any more is released. It
// returns how many moves it held and released.
func (l *Scheduling) reholdIntents(tx *txn, tenant string, id int64, kind, ref string) (held, released int, err error) {
	q, err := loadQuiet(tx, tenant)
	if err != nil {
		return 0, 0, err
	}
	rows, err := readHolds(tx, qIntentsToHold, tenant, id, kind, ref)
	if err != nil || len(rows) == 0 {
		return 0, 0, err
	}
	var ids []int64
	var dues []time.Time
	var helds []sql.NullTime
	for _, r := range rows {
		due, hold := r.asked, false
		if rule, ok := q.rule(r.recipient, r.kind); ok {
			var exp bool
			due, hold, exp = holdOf(rule, r.zone, r.asked.UTC(), timePtr(r.expires))
			hold = hold || exp
		}
		if due.Equal(r.due) && hold == r.held {
			continue
		}
		ids, dues = append(ids, r.id), append(dues, due)
		helds = append(helds, sql.NullTime{Time: r.asked, Valid: hold})
		if hold {
			held++
		} else {
			released++
		}
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	_, err = tx.Exec(qMoveIntentHolds, tenant, pq.Array(ids), pq.Array(dues), nullTimes(helds), l.now())
	return held, released, err
}

// rehold moves the tenant's pending rows (all, one id, or one subject) to
// the quiet hours in force, as SetQuietHours describes.
func (l *Scheduling) rehold(tx *txn, tenant string, id int64, kind, ref string) (HoldResult, error) {
	var res HoldResult
	q, err := loadQuiet(tx, tenant)
	if err != nil {
		return res, err
	}
	rows, err := readHolds(tx, qPendingToHold, tenant, id, kind, ref)
	if err != nil {
		return res, err
	}
	// Each row's new (due, held) where it changes; two rows of one key
	// landing on one opening are one send: the earlier asked keeps it.
	sort.Slice(rows, func(i, j int) bool { return rows[i].asked.Before(rows[j].asked) })
	type key struct {
		recipient, kind, ref string
		due                  time.Time
	}
	taken := map[key]bool{}
	var ids []int64
	var dues []time.Time
	var helds []sql.NullTime
	var expired, merged []int64
	for _, r := range rows {
		due, held, exp := r.asked, false, false
		if rule, ok := q.rule(r.recipient, r.kind); ok {
			due, held, exp = holdOf(rule, r.zone, r.asked.UTC(), timePtr(r.expires))
		}
		if exp {
			expired = append(expired, r.id)
			continue
		}
		k := key{r.recipient, r.kind, r.ref, due.UTC()}
		if taken[k] {
			merged = append(merged, r.id)
			continue
		}
		taken[k] = true
		if due.Equal(r.due) && held == r.held {
			continue
		}
		ids, dues = append(ids, r.id), append(dues, due)
		helds = append(helds, sql.NullTime{Time: r.asked, Valid: held})
		if held {
			res.Held++
		} else {
			res.Released++
		}
	}
	if len(ids) > 0 {
		mv, err := tx.Query(qMoveHolds, tenant, pq.Array(ids), pq.Array(dues), nullTimes(helds), l.now())
		if err != nil {
			return res, err
		}
		moved := map[int64]bool{}
		for mv.Next() {
			var id int64
			if err := mv.Scan(&id); err != nil {
				mv.Close()
				return res, err
			}
			moved[id] = true
		}
		mv.Close()
		if err := mv.Err(); err != nil {
			return res, err
		}
		for i, id := range ids {
			if !moved[id] {
				merged = append(merged, id)
				if helds[i].Valid {
					res.Held--
				} else {
					res.Released--
				}
			}
		}
	}
	if len(expired) > 0 {
		if _, err := tx.Exec(qSettleHeld, tenant, pq.Array(expired), StateExpired, expiredInHold, l.now()); err != nil {
			return res, err
		}
	}
	if len(merged) > 0 {
		if _, err := tx.Exec(qSettleHeld, tenant, pq.Array(merged), StateCancelled,
			"held for quiet hours onto a row already scheduled at that opening: that row is the send", l.now()); err != nil {
			return res, err
		}
	}
	res.Expired, res.Merged = len(expired), len(merged)
	return res, nil
}

// nullTimes is a timestamptz[] with NULLs, as pq.Array cannot write one
// from sql.NullTime.
func nullTimes(ts []sql.NullTime) any {
	out := make([]sql.NullString, len(ts))
	for i, t := range ts {
		if t.Valid {
			out[i] = sql.NullString{String: t.Time.UTC().Format(time.RFC3339Nano), Valid: true}
		}
	}
	return pq.Array(out)
}
