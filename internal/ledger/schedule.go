package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lib/pq"
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
	// TimeZone is the recipient's IANA time zone, when the row was
	// scheduled in one (given, or the recipient's contact's default).
	TimeZone string `json:"time_zone,omitempty"`
	// DueLocal is the wall-clock time in TimeZone the row was scheduled
	// for, as asked (localtime.Layout); DueAt is the instant it resolved
	// to. Empty when the due time was given as an instant.
	DueLocal string `json:"due_local,omitempty"`
	// Local, on input, gives the due time or the expiry as wall-clock
	// times in TimeZone, or when TimeZone is empty in the zone of the
	// recipient's contact (owed_contacts.time_zone). Schedule resolves it
	// into DueAt, ExpiresAt and DueLocal; each time is given one way only.
	Local *Local `json:"-"`
	// Urgent rows are never held for quiet hours.
	Urgent bool `json:"urgent,omitempty"`
	// HeldFrom is the due time asked for, when quiet hours hold the row:
	// DueAt is then the window's opening (sql/quiet_hours.sql).
	HeldFrom *time.Time `json:"held_from,omitempty"`
	// DigestFrom is the due time asked for, when the row is in a digest:
	// DueAt is then the digest's send time (sql/digests.sql).
	DigestFrom *time.Time `json:"digest_from,omitempty"`
}

// Local is a row's times as the recipient's wall clock shows them
// (internal/localtime).
type Local struct {
	// Due and Expires are local dates and times (localtime.ParseCivil);
	// either may be empty, its instant then given as DueAt or ExpiresAt.
	Due, Expires string
	// Disambiguation chooses the instant of a local time the zone skips or
	// repeats (localtime.ParseDisambiguation); empty is compatible.
	Disambiguation string
}

// Scheduled reports what Schedule did with one input row, in input order.
type Scheduled struct {
	ID      int64 `json:"id"`
	Created bool  `json:"created"`
	// State is the row's state when it already existed.
	State State `json:"state"`
}

// Bounds on one statement of Schedule: a batch is inserted in chunks of at
// most this many rows and this many bytes of JSON, so a statement's size and
// the memory it takes on either side stay small however the batch was made.
const (
	scheduleChunkRows  = 250
	scheduleChunkBytes = 1 << 20
)

// scheduleInput is one element of qSchedule's JSON array: the row, its
// place in the batch, and either its own payload or the id of the shared
// payload (owed_event_payloads) it reads.
type scheduleInput struct {
	Idx int `json:"idx"`
	NewNotification
	// Payload hides the row's own in the JSON: its canonical form, or
	// nothing when the row reads the shared payload PayloadID.
	Payload   json.RawMessage `json:"payload,omitempty"`
	PayloadID int64           `json:"payload_id,omitempty"`
}

// sharedPayloads finds the payloads more than one row of a batch carries:
// shared lists each once, and of[i] is row i's index into shared, or -1
// when the row keeps its payload in place. The maps are only ever written
// once per distinct payload (a lookup by string(c) copies nothing), so a
// thousand rows of one 64 KB payload cost one copy, not a thousand.
func sharedPayloads(canon [][]byte) (shared [][]byte, of []int) {
	type use struct{ rows, at int }
	uses := map[string]*use{}
	for _, c := range canon {
		u := uses[string(c)]
		if u == nil {
			u = &use{at: -1}
			uses[string(c)] = u
		}
		u.rows++
	}
	of = make([]int, len(canon))
	for i, c := range canon {
		u := uses[string(c)]
		of[i] = -1
		if u.rows < 2 {
			continue
		}
		if u.at < 0 {
			u.at = len(shared)
			shared = append(shared, c)
		}
		of[i] = u.at
	}
	return shared, of
}

// The statements of shared payloads, beside their callers.
var (
	qInsertSharedPayload  = queries.Get("InsertSharedPayload")
	qDeleteSharedPayloads = queries.Get("DeleteSharedPayloads")
	qExpiryPastMax        = queries.Get("ExpiryPastMax")
)

// Schedule inserts rows for tenant idempotently: a row whose (recipient,
// kind, ref_id, due_at) already exists is reported, not inserted again. The
// batch is validated first; if any field is bad nothing is written. A
// payload several rows share (an event's) is stored once, and rows are
// inserted in chunks, all in one transaction.
func (l *Scheduling) Schedule(ctx context.Context, tenant string, rows []NewNotification) ([]Scheduled, error) {
	return l.schedule(ctx, tenant, rows, nil)
}

// schedule is Schedule, running then (when not nil) in the same
// transaction after the rows are written, with what was scheduled: a
// failure of then writes nothing at all.
func (l *Scheduling) schedule(ctx context.Context, tenant string, rows []NewNotification,
	then func(tx *txn, out []Scheduled) error) ([]Scheduled, error) {
	canon, err := validate(tenant, rows)
	if err != nil {
		return nil, err
	}
	shared, of := sharedPayloads(canon)
	out := make([]Scheduled, len(rows))
	in := make([]scheduleInput, len(rows))
	err = l.withTenant(ctx, tenant, func(tx *txn) error {
		rows, err := resolveRows(tx, tenant, rows)
		if err != nil {
			return err
		}
		rows, expire, err := holdRows(tx, tenant, rows)
		if err != nil {
			return err
		}
		rows, digests, err := l.digestRows(tx, tenant, rows, expire)
		if err != nil {
			return err
		}
		if digests != nil {
			// A digest's send time is held for quiet hours as its members'
			// due times were: the window may close outside a send window.
			var again []int
			if rows, again, err = holdRows(tx, tenant, rows); err != nil {
				return err
			}
			for _, i := range again {
				if !slices.Contains(expire, i) {
					expire = append(expire, i)
				}
			}
		}
		ids := make([]int64, len(shared))
		for k, p := range shared {
			if err := tx.QueryRow(qInsertSharedPayload, tenant, string(p), l.now()).Scan(&ids[k]); err != nil {
				return fmt.Errorf("store shared payload: %w", err)
			}
		}
		for i, r := range rows {
			in[i] = scheduleInput{Idx: i, NewNotification: r, Payload: canon[i]}
			in[i].DueAt = r.DueAt.UTC().Truncate(time.Microsecond)
			if r.ExpiresAt != nil {
				e := r.ExpiresAt.UTC().Truncate(time.Microsecond)
				in[i].ExpiresAt = &e
			}
			if of[i] >= 0 {
				in[i].Payload, in[i].PayloadID = nil, ids[of[i]]
			}
		}
		for start := 0; start < len(in); {
			doc, end, err := scheduleChunk(in, start)
			if err != nil {
				return err
			}
			if err := scheduleRows(tx, tenant, doc, l.now(), out); err != nil {
				return err
			}
			start = end
		}
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
		if err := nameDigests(tx, tenant, digests, out); err != nil {
			return fmt.Errorf("name the rows' digests: %w", err)
		}
		// A row whose expiry falls inside its hold is written, so its
		// replay finds it, and settled expired: it is never sent.
		var expired []int64
		for _, i := range expire {
			if out[i].Created {
				expired = append(expired, out[i].ID)
				out[i].State = StateExpired
			}
		}
		if len(expired) > 0 {
			if _, err := tx.Exec(qSettleHeld, tenant, pq.Array(expired), StateExpired, expiredInHold, l.now()); err != nil {
				return err
			}
		}
		// A replayed event creates no row: its shared payload is not kept.
		taken := make([]bool, len(shared))
		for i := range out {
			if of[i] >= 0 && out[i].Created {
				taken[of[i]] = true
			}
		}
		var unused []int64
		for k, ok := range taken {
			if !ok {
				unused = append(unused, ids[k])
			}
		}
		if len(unused) > 0 {
			if _, err := tx.Exec(qDeleteSharedPayloads, tenant, pq.Array(unused)); err != nil {
				return err
			}
		}
		if then != nil {
			return then(tx, out)
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

// resolveRows returns rows with every local time resolved to its instant
// (resolveLocal), reading the zone of a row that names none from the
// recipient's contacts, and checks the times resolved. Rows without a
// local time are returned as given.
func resolveRows(tx *txn, tenant string, rows []NewNotification) ([]NewNotification, error) {
	if !anyLocal(rows) {
		return rows, nil
	}
	var recipients, channels []string
	var asked []int
	for i, r := range rows {
		if r.Local != nil && r.TimeZone == "" {
			recipients, channels, asked = append(recipients, r.Recipient), append(channels, r.Channel), append(asked, i)
		}
	}
	zones := make(map[int]string, len(asked))
	if len(asked) > 0 {
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
			zones[asked[k-1]] = zone
		}
		if err := res.Err(); err != nil {
			return nil, err
		}
	}
	v := &ValidationError{}
	out := resolveLocal(v, rows, func(i int) (string, bool) { return zones[i], true })
	for i := range out {
		checkRowTimes(v, i, out[i])
	}
	if len(v.Fields) > 0 {
		return nil, v
	}
	return out, nil
}

func anyLocal(rows []NewNotification) bool {
	for _, r := range rows {
		if r.Local != nil {
			return true
		}
	}
	return false
}

// The statement that reads the recipients' default zones, beside its caller.
var qContactZones = queries.Get("ContactZones")

// scheduleChunk encodes in[start:end] as qSchedule's JSON array, ending the
// chunk at scheduleChunkRows rows or before scheduleChunkBytes (one row is
// always taken: a row is at most a payload and a few bounded strings).
func scheduleChunk(in []scheduleInput, start int) ([]byte, int, error) {
	doc := []byte{'['}
	end := start
	for end < len(in) && end-start < scheduleChunkRows {
		b, err := json.Marshal(in[end])
		if err != nil {
			return nil, 0, err
		}
		if end > start && len(doc)+len(b) > scheduleChunkBytes {
			break
		}
		if end > start {
			doc = append(doc, ',')
		}
		doc = append(doc, b...)
		end++
	}
	return append(doc, ']'), end, nil
}

// scheduleRows runs qSchedule on one chunk and records its answers in out
// by batch index.
func scheduleRows(tx *txn, tenant string, doc []byte, now any, out []Scheduled) error {
	res, err := tx.Query(qSchedule, string(doc), tenant, now)
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
	return res.Err()
}

// ChangeResult reports what Cancel or Reschedule did to one subject's rows.
type ChangeResult struct {
	// Changed counts open rows that were cancelled or moved.
	Changed int64 `json:"changed"`
	// InFlight counts rows a worker is sending right now: its send has
	// started (StartSends), so the change cannot stop it. A row claimed but
	// not yet started is changed at once and counted in Changed.
	InFlight int64 `json:"in_flight"`
	// Intents counts the rows in flight that now carry this change as an
	// intent, applied when their send ends (owed_apply_intent, sql/intents.sql):
	// a send handed back (no pace slot, a 429, a transient error) takes it,
	// so a cancelled row is never sent and a rescheduled one goes out at the
	// new due time; a send that delivers first stands, and a reschedule then
	// schedules a new row at the new time. A cancel gives every row in
	// flight its intent; a reschedule leaves out a row whose cancel is still
	// waiting, since the cancel came first and wins.
	Intents int64 `json:"intents"`
}

// Cancel settles every open row of (tenant, kind, ref) as cancelled, say
// when the ticket was closed, and records the cancel on every row a worker
// is sending (ChangeResult.Intents). Settled rows, delivered ones above all,
// are never changed.
func (l *Scheduling) Cancel(ctx context.Context, tenant, kind, ref string) (ChangeResult, error) {
	if err := ValidateCancel(tenant, kind, ref); err != nil {
		return ChangeResult{}, err
	}
	return l.changeSubject(ctx, tenant, kind, ref, nil, nil, qCancel, qRecordCancel)
}

// ErrConflict is returned when a reschedule would collide with a row already
// scheduled for the same recipient, kind, ref and new due time.
var ErrConflict = errors.New("ledger: a notification for this recipient, kind and ref_id is already scheduled at that due_at")

// Reschedule moves every open row of (tenant, kind, ref) to newDue (a
// snooze), and records the move on every row a worker is sending
// (ChangeResult.Intents). It changes nothing and returns ErrConflict when a
// row, open or in flight, would land on a due time its recipient already has
// a row for, and a *ValidationError naming due_at when a row's expiry,
// moved with it, would pass the last time the ledger holds (expiryGuard) or
// would not be after it: a move the row could never take, refused before it
// is recorded, so no batch that ends the row's send ever meets it.
func (l *Scheduling) Reschedule(ctx context.Context, tenant, kind, ref string, newDue time.Time) (ChangeResult, error) {
	if err := ValidateReschedule(tenant, kind, ref, newDue); err != nil {
		return ChangeResult{}, err
	}
	due := newDue.UTC().Truncate(time.Microsecond)
	// The moved rows take the quiet hours in force at their new time, and
	// so do the moves recorded on rows in flight, which take them when
	// their send is handed back.
	rehold := func(tx *txn) error {
		if _, err := l.rehold(tx, tenant, 0, kind, ref); err != nil {
			return err
		}
		_, _, err := l.reholdIntents(tx, tenant, 0, kind, ref)
		return err
	}
	res, err := l.changeSubject(ctx, tenant, kind, ref, expiryGuard(due), rehold, qReschedule, qRecordReschedule, due)
	var pqErr *pq.Error
	switch {
	case errors.As(err, &pqErr) && pqErr.Code == "23505":
		return ChangeResult{}, ErrConflict
	case errors.As(err, &pqErr) && pqErr.Code == "23514":
		// A check of the moved row or of the recorded intent: the due time
		// is in range (ValidateReschedule), so it is the expiry's.
		v := &ValidationError{}
		v.add(-1, "due_at", "%s leaves no room for the rows' expiry, which moves with the due time and must stay "+
			"after it (no later than 9999-12-31T23:59:59.999999Z): choose an earlier due_at", due.Format(time.RFC3339Nano))
		return ChangeResult{}, v
	}
	return res, err
}

// expiryGuard refuses, as a ValidationError naming due_at, a move of the
// subject to due that would carry an expiry past MaxTime: the expiry would
// be clamped (the window the notification is worth sending in cut short),
// or land on or before due, which no row may hold. The message gives the
// latest due time that keeps every expiry.
func expiryGuard(due time.Time) func(*txn, []any) error {
	return func(tx *txn, args []any) error {
		var n int64
		var latest sql.NullTime
		if err := tx.QueryRow(qExpiryPastMax, args...).Scan(&n, &latest); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		v := &ValidationError{}
		v.add(-1, "due_at", "%s would move the expiry of %d row(s) past %s, the last instant the ledger holds "+
			"(an expiry moves with its due time): the latest due_at this subject can take is %s",
			due.Format(time.RFC3339Nano), n, MaxTime.Format(time.RFC3339Nano), latest.Time.UTC().Format(time.RFC3339Nano))
		return v
	}
}

// changeSubject runs guard (nil for none; a refusal it returns ends the
// change), then change (qCancel or qReschedule: $1 to $3 name the subject,
// $4 is now, extra follow) on the open rows, then intent (its qRecord…
// statement, same arguments) on the rows in flight, then after (when not
// nil), and counts what is in flight, all at the one instant of its
// transaction. after runs once both are written, so intent's check for a
// clash sees every row where the change put it, as without quiet hours. change locks every
// unsettled row of the subject first, so no worker's release or settle
// slips between the two statements. A clash the intent statement reports
// rolls the whole change back as ErrConflict.
func (l *Scheduling) changeSubject(ctx context.Context, tenant, kind, ref string, guard func(*txn, []any) error,
	after func(*txn) error, change, intent string, extra ...any) (ChangeResult, error) {
	var res ChangeResult
	now := l.now()
	args := append([]any{tenant, kind, ref, now}, extra...)
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		if guard != nil {
			if err := guard(tx, args); err != nil {
				return err
			}
		}
		r, err := tx.Exec(change, args...)
		if err != nil {
			return err
		}
		if res.Changed, err = r.RowsAffected(); err != nil {
			return err
		}
		var clash bool
		if err := tx.QueryRow(intent, args...).Scan(&res.Intents, &clash); err != nil {
			return err
		}
		if clash {
			return ErrConflict
		}
		if after != nil {
			if err := after(tx); err != nil {
				return err
			}
		}
		return tx.QueryRow(qCountInFlight, tenant, kind, ref, now).Scan(&res.InFlight)
	})
	if err != nil {
		return ChangeResult{}, err
	}
	return res, nil
}

// The intent statements, beside the calls that run them. Each answers how
// many rows in flight took the intent and whether a reschedule would clash.
// A row in flight is one a live worker is sending (the rows qCountInFlight
// counts; the change statement already handled one whose claim ran out).
// The intent waits on the row until it leaves sending: the trigger
// owed_apply_intent (sql/intents.sql) applies or resolves it
// then, and a new claim of the row keeps it.
var (
	qRecordCancel     = queries.Get("RecordCancel")
	qRecordReschedule = queries.Get("RecordReschedule")
)
