package ledger

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/owedhq/owed/internal/localtime"
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
	case strings.IndexByte(value, 0) >= 0:
		// PostgreSQL's text cannot hold NUL at all.
		v.add(idx, field, "must not contain NUL (\\u0000)")
	case !utf8.ValidString(value):
		v.add(idx, field, "must be valid UTF-8")
	default:
		if i := strings.IndexFunc(value, unicode.IsControl); i >= 0 {
			// An identifier is matched, logged and shown to operators: a
			// newline or an escape sequence in one forges log lines and
			// rewrites terminals.
			r, _ := utf8.DecodeRuneInString(value[i:])
			v.add(idx, field, "must not contain control characters (U+0000 to U+001F, U+007F to U+009F): "+
				"%U at byte %d", r, i)
		}
	}
}

// The range of a ledger time: the years 1 to 9999 in UTC, at the
// microsecond PostgreSQL keeps, but for its very first instant. It is what
// a row's time can hold all the way to the queue and back (the envelope,
// the worker's claim and the API write it as RFC 3339 JSON, which has
// four-digit years; Go and timestamptz both round-trip every instant of
// it). 0001-01-01T00:00:00Z is Go's zero time and .NET's DateTime.MinValue,
// a time that was never set, which the ledger reads as missing. Finer
// digits than a microsecond are truncated when stored, and are judged
// truncated here. The statements that keep a computed time inside the
// range write MaxTime as the fragment maxTime (sql/queries.sql).
var (
	MinTime = time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC)
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// TimeRange names the accepted range in error messages.
const TimeRange = "0001-01-01T00:00:00.000001Z to 9999-12-31T23:59:59.999999Z"

// InRange reports whether t, truncated to the microsecond, lies within
// MinTime and MaxTime. An RFC 3339 offset can carry a time written as
// 9999-12-31 past that in UTC.
func InRange(t time.Time) bool {
	t = t.Truncate(time.Microsecond)
	return !t.Before(MinTime) && !t.After(MaxTime)
}

// checkTime refuses a time outside the ledger's range (InRange).
func checkTime(v *ValidationError, idx int, field string, t time.Time) {
	if !InRange(t) {
		v.add(idx, field, "%s is outside %s (UTC)", t.Format(time.RFC3339Nano), TimeRange)
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
	_, err := validate(tenant, rows)
	return err
}

// validate is Validate that also returns each row's payload in the form
// the ledger stores (payload.Canonical). Rows of one event carry the same
// payload, so each distinct payload is parsed once.
func validate(tenant string, rows []NewNotification) ([][]byte, error) {
	v := &ValidationError{}
	checkTenant(v, tenant)
	switch {
	case len(rows) == 0:
		v.add(-1, "notifications", "at least one row is required")
	case len(rows) > MaxScheduleBatch:
		v.add(-1, "notifications", "%d rows exceeds the batch limit of %d", len(rows), MaxScheduleBatch)
	}
	type parsed struct {
		canon []byte
		err   error
	}
	seen := map[string]map[string]parsed{}
	canon := make([][]byte, len(rows))
	resolved := resolveLocal(v, rows, func(int) (string, bool) { return "", false })
	for i, r := range rows {
		checkText(v, i, "recipient", r.Recipient, maxRecipientLen)
		checkText(v, i, "kind", r.Kind, maxKindLen)
		checkText(v, i, "ref_id", r.RefID, maxRefLen)
		// A row whose zone is its contact's is resolved, and its times
		// checked, when Schedule has read the contact (resolveRows).
		if r := resolved[i]; r.Local == nil || r.TimeZone != "" {
			checkRowTimes(v, i, r)
		}
		if strings.TrimSpace(r.Channel) == "" {
			v.add(i, "channel", "required: one of %s", strings.Join(payload.Channels(), ", "))
			continue
		}
		byRaw := seen[r.Channel]
		if byRaw == nil {
			byRaw = map[string]parsed{}
			seen[r.Channel] = byRaw
		}
		p, ok := byRaw[string(r.Payload)]
		if !ok {
			_, p.canon, p.err = payload.ParseCanonical(r.Channel, r.Payload)
			byRaw[string(r.Payload)] = p
		}
		canon[i] = p.canon
		if p.err != nil {
			addPayloadError(v, i, p.err)
		}
	}
	return canon, v.orNil()
}

// addPayloadError adds payload.ParseCanonical's err to v under the field
// it names (channel, payload, subject, text…), as the row's JSON spells it.
func addPayloadError(v *ValidationError, i int, err error) {
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

// checkRowTimes checks a row's due time and expiry, once resolved.
func checkRowTimes(v *ValidationError, i int, r NewNotification) {
	due, expires := "due_at", "expires_at"
	if r.Local != nil && r.Local.Due != "" {
		due = "due_local"
	}
	if r.Local != nil && r.Local.Expires != "" {
		expires = "expires_local"
	}
	if r.DueAt.IsZero() {
		if r.Local == nil || r.Local.Due == "" {
			v.add(i, "due_at", "required (RFC 3339 time), or due_local with a time_zone")
		}
		return
	}
	checkTime(v, i, due, r.DueAt)
	if r.ExpiresAt != nil {
		checkTime(v, i, expires, *r.ExpiresAt)
		if !r.ExpiresAt.After(r.DueAt) {
			v.add(i, expires, "%s is not after the due time %s", r.ExpiresAt.UTC().Format(time.RFC3339),
				r.DueAt.UTC().Format(time.RFC3339))
		}
	}
}

// resolveLocal returns rows with each local time resolved
// (localtime.Resolve) into DueAt or ExpiresAt and the local due time
// recorded in DueLocal: a copy, rows itself is left alone. A row without a
// TimeZone of its own takes contactZone(i) when that is known; a row whose
// zone is not known yet (Validate, before the contacts are read) is left
// unresolved. Every field in error is added to v.
func resolveLocal(v *ValidationError, rows []NewNotification, contactZone func(i int) (string, bool)) []NewNotification {
	out, copied := rows, false
	for i, r := range rows {
		if r.Local == nil {
			if r.TimeZone != "" {
				if _, err := localtime.LoadZone(r.TimeZone); err != nil {
					v.add(i, "time_zone", "%v", err)
				}
			}
			continue
		}
		if !copied {
			out, copied = append([]NewNotification(nil), rows...), true
		}
		l := *r.Local
		d, err := localtime.ParseDisambiguation(l.Disambiguation)
		if err != nil {
			v.add(i, "disambiguation", "%v", err)
		}
		var due, expires time.Time
		hasDue, hasExpires := false, false
		switch {
		case l.Due == "" && l.Expires == "":
			v.add(i, "due_local", "required with disambiguation: the local time to resolve")
		case l.Due != "" && !r.DueAt.IsZero():
			v.add(i, "due_local", "give due_at or due_local, not both")
		case l.Expires != "" && r.ExpiresAt != nil:
			v.add(i, "expires_local", "give expires_at or expires_local, not both")
		}
		if l.Due != "" {
			if due, err = localtime.ParseCivil(l.Due); err != nil {
				v.add(i, "due_local", "%v", err)
			}
			hasDue = err == nil
		}
		if l.Expires != "" {
			if expires, err = localtime.ParseCivil(l.Expires); err != nil {
				v.add(i, "expires_local", "%v", err)
			}
			hasExpires = err == nil
		}
		zone, whose := r.TimeZone, ""
		if zone == "" {
			var known bool
			if zone, known = contactZone(i); !known {
				continue
			}
			if zone == "" {
				v.add(i, "time_zone", "required with a local time: name the recipient's IANA zone (like "+
					"Europe/Berlin), or set time_zone on the recipient's contact")
				continue
			}
			whose = "the recipient's contact's zone "
		}
		loc, err := localtime.LoadZone(zone)
		if err != nil {
			v.add(i, "time_zone", "%s%v", whose, err)
			continue
		}
		n := &out[i]
		n.TimeZone = zone
		if hasDue {
			if n.DueAt, err = localtime.Resolve(due, loc, d); err != nil {
				v.add(i, "due_local", "%v", err)
			}
			n.DueLocal = localtime.FormatCivil(due)
		}
		if hasExpires {
			at, err := localtime.Resolve(expires, loc, d)
			if err != nil {
				v.add(i, "expires_local", "%v", err)
			}
			n.ExpiresAt = &at
		}
	}
	return out
}

func validateSubject(tenant, kind, ref string) *ValidationError {
	v := &ValidationError{}
	checkTenant(v, tenant)
	checkText(v, -1, "kind", kind, maxKindLen)
	checkText(v, -1, "ref_id", ref, maxRefLen)
	return v
}

// ValidateCancel checks what Cancel checks, without writing anything.
func ValidateCancel(tenant, kind, ref string) error {
	return validateSubject(tenant, kind, ref).orNil()
}

// ValidateReschedule checks what Reschedule checks, without writing
// anything.
func ValidateReschedule(tenant, kind, ref string, newDue time.Time) error {
	v := validateSubject(tenant, kind, ref)
	if newDue.IsZero() {
		v.add(-1, "due_at", "required (RFC 3339 time)")
	} else {
		checkTime(v, -1, "due_at", newDue)
	}
	return v.orNil()
}
