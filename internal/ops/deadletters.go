package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

// DeadLetterPageMax is the page size the whole dead-letter list is read
// with (ListDeadLetters with allPages); each backend caps it at its own
// limit.
const DeadLetterPageMax = 1000

// DeadLetterIDPrefix begins every dead letter's id as operators see it
// (dl_49): the queue's own ids are small integers on some backends, and
// "dead letter 49" beside "row 52" was mistaken for a notification's id.
// The prefix is added when the dead letters are read (ListDeadLetters) and
// taken off before the queue is asked to remove one, so the console and
// owedctl only ever show and accept the prefixed form.
const DeadLetterIDPrefix = "dl_"

// ParseDeadLetterID checks that s is a dead letter's id as operators see
// it. A bare id is refused, naming the form to use, since it is as likely
// a notification's.
func ParseDeadLetterID(s string) (string, error) {
	if rest, ok := strings.CutPrefix(s, DeadLetterIDPrefix); ok && rest != "" {
		return s, nil
	}
	return "", fmt.Errorf("%q is not a dead-letter id: dead-letter ids begin %s (%s%s, as dlq list prints them); a notification's id is not one",
		s, DeadLetterIDPrefix, DeadLetterIDPrefix, s)
}

// queueIDs are ids without the prefix, as the queue names its dead letters.
func queueIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strings.TrimPrefix(id, DeadLetterIDPrefix)
	}
	return out
}

// ListDeadLetters reads one page of up to limit dead letters from cursor,
// or with allPages every page from there on; each id carries
// DeadLetterIDPrefix.
func ListDeadLetters(ctx context.Context, q queue.Queue, limit int, cursor string, allPages bool) ([]queue.DeadLetter, string, error) {
	var list []queue.DeadLetter
	for {
		page, next, err := q.DeadLetters(ctx, limit, cursor)
		if err != nil {
			return nil, "", err
		}
		for i := range page {
			page[i].ID = DeadLetterIDPrefix + page[i].ID
		}
		list, cursor = append(list, page...), next
		if !allPages || next == "" {
			return list, next, nil
		}
	}
}

// DeadLetterView is a dead letter as JSON shows it: the body as JSON when
// it is JSON (owed's envelope), as a string otherwise.
type DeadLetterView struct {
	ID             string    `json:"id"`
	Key            string    `json:"key"`
	Reason         string    `json:"reason"`
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	Body           any       `json:"body"`
}

// View is d as JSON shows it.
func View(d queue.DeadLetter) DeadLetterView {
	v := DeadLetterView{ID: d.ID, Key: d.Key, Reason: d.Reason, DeadLetteredAt: d.DeadLetteredAt, Body: string(d.Body)}
	if json.Valid(d.Body) {
		v.Body = json.RawMessage(d.Body)
	}
	return v
}

// Views is View of each.
func Views(list []queue.DeadLetter) []DeadLetterView {
	out := make([]DeadLetterView, len(list))
	for i, d := range list {
		out[i] = View(d)
	}
	return out
}

// Described is a dead letter with the ledger row its envelope names, when
// it names one: the tenant and kind the filters match on.
type Described struct {
	queue.DeadLetter
	// Envelope is the decoded body; Undecodable says why it is not owed's
	// message when it could not be decoded.
	Envelope    envelope.Envelope
	Undecodable string
	// Row is the ledger row the envelope names; nil when it names none.
	Row *ledger.Notification
}

// Describe decodes each dead letter's envelope and reads the rows they
// name (ledger.RowsAny: each in its own tenant's scope).
func Describe(ctx context.Context, l ledger.HasReads, list []queue.DeadLetter) ([]Described, error) {
	out := make([]Described, len(list))
	var ids []int64
	for i, d := range list {
		out[i].DeadLetter = d
		env, err := envelope.Decode(d.Body)
		if err != nil {
			out[i].Undecodable = err.Error()
			continue
		}
		out[i].Envelope = env
		ids = append(ids, env.ID)
	}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := l.ReadsRole().RowsAny(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read the dead letters' rows: %w", err)
	}
	for i := range out {
		if n, ok := rows[out[i].Envelope.ID]; ok && out[i].Undecodable == "" {
			out[i].Row = &n
		}
	}
	return out, nil
}

// DeadLetterFilter selects dead letters; empty fields match everything.
type DeadLetterFilter struct {
	// Tenant and Kind match the row the envelope names (a dead letter that
	// is not owed's message matches neither).
	Tenant, Kind string
	// Reason matches a dead letter whose reason contains it, ignoring case.
	Reason string
	// OlderThan matches a dead letter dead-lettered at least this long ago.
	OlderThan time.Duration
}

// Empty says the filter matches every dead letter.
func (f DeadLetterFilter) Empty() bool { return f == DeadLetterFilter{} }

// String is the filter as the audit trail records it.
func (f DeadLetterFilter) String() string {
	var parts []string
	for _, p := range [][2]string{{"tenant", f.Tenant}, {"kind", f.Kind}, {"reason", f.Reason}} {
		if p[1] != "" {
			parts = append(parts, p[0]+"="+p[1])
		}
	}
	if f.OlderThan > 0 {
		parts = append(parts, "older_than="+f.OlderThan.String())
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

// DeadLetterTarget is what a redrive or delete names, as the audit trail
// records it: the dead letters' ids when it names some, else its filter.
func DeadLetterTarget(ids []string, f DeadLetterFilter) string {
	if len(ids) > 0 {
		return "ids=" + strings.Join(ids, ",")
	}
	return "filter: " + f.String()
}

// Match says whether d passes the filter at now.
func (f DeadLetterFilter) Match(d Described, now time.Time) bool {
	if (f.Tenant != "" || f.Kind != "") && d.Row == nil {
		return false
	}
	switch {
	case f.Tenant != "" && d.Row.Tenant != f.Tenant,
		f.Kind != "" && d.Row.Kind != f.Kind,
		f.Reason != "" && !strings.Contains(strings.ToLower(d.Reason), strings.ToLower(f.Reason)),
		f.OlderThan > 0 && now.Sub(d.DeadLetteredAt) < f.OlderThan:
		return false
	}
	return true
}

// FindDeadLetters reads every dead letter, describes them and keeps those
// f matches at now.
func FindDeadLetters(ctx context.Context, q queue.Queue, l ledger.HasReads, f DeadLetterFilter, now time.Time) ([]Described, error) {
	all, _, err := ListDeadLetters(ctx, q, DeadLetterPageMax, "", true)
	if err != nil {
		return nil, fmt.Errorf("list the dead letters: %w", err)
	}
	described, err := Describe(ctx, l, all)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(described, func(d Described) bool { return !f.Match(d, now) }), nil
}

// Plain returns the queue's dead letters of described.
func Plain(described []Described) []queue.DeadLetter {
	out := make([]queue.DeadLetter, len(described))
	for i, d := range described {
		out[i] = d.DeadLetter
	}
	return out
}

// SelectDeadLetters keeps the dead letters of all whose ids are in ids (all
// of them with every) and names, as kept, each id that is none of them.
func SelectDeadLetters(all []queue.DeadLetter, ids []string, every bool, target string) ([]queue.DeadLetter, []KeptDeadLetter) {
	list := []queue.DeadLetter{}
	for _, d := range all {
		if every || slices.Contains(ids, d.ID) {
			list = append(list, d)
		}
	}
	var kept []KeptDeadLetter
	for _, id := range ids {
		if !slices.ContainsFunc(list, func(d queue.DeadLetter) bool { return d.ID == id }) {
			kept = append(kept, KeptDeadLetter{DeadLetter: id, Reason: "not a dead letter of " + target})
		}
	}
	return list, kept
}

// RedriveResult is what a redrive did.
type RedriveResult struct {
	// Redriven counts the dead letters whose rows the ledger reopened; those
	// dead letters are removed, since the next sweep publishes afresh.
	Redriven int               `json:"redriven"`
	Rows     []ledger.Redriven `json:"rows,omitempty"`
	// Kept are the dead letters left where they are, with the reason.
	Kept []KeptDeadLetter `json:"kept,omitempty"`
}

// KeptDeadLetter is a dead letter a redrive left alone, and why.
type KeptDeadLetter struct {
	DeadLetter string `json:"dead_letter"`
	Reason     string `json:"reason"`
	// Permanent is set when its row's last attempt failed permanently: a
	// forced redrive reopens it (ledger.Redriven.Permanent).
	Permanent bool `json:"permanent,omitempty"`
}

// RedriveDeadLetters is the operator's redrive: a ledger transition, not a
// queue move. The ledger writes by's audit line (Count: the rows reopened)
// in the transaction that reopens the rows; force reopens rows whose last
// attempt failed permanently too (ledger.RedriveAny). Each dead letter's envelope names its row; the ledger reopens
// the rows that failed (and only those), giving each a new queue
// generation, and the dead letters of reopened rows are deleted because the
// next sweep publishes fresh messages for them. Moving the old message back
// instead would be refused by the worker (the row is still failed until
// reopened), and a dead letter whose row is not failed is kept for the
// operator to look at.
func RedriveDeadLetters(ctx context.Context, q queue.Queue, l ledger.HasActions, list []queue.DeadLetter,
	by ledger.OperatorAction, force bool) (RedriveResult, error) {
	var res RedriveResult
	byRow := map[int64][]string{}
	var rows []int64
	for _, d := range list {
		env, err := envelope.Decode(d.Body)
		if err != nil {
			res.Kept = append(res.Kept, KeptDeadLetter{DeadLetter: d.ID, Reason: fmt.Sprintf("not an owed message (%v); inspect it with dlq show, remove it with dlq delete", err)})
			continue
		}
		if _, seen := byRow[env.ID]; !seen {
			rows = append(rows, env.ID)
		}
		byRow[env.ID] = append(byRow[env.ID], d.ID)
	}
	by.Action = "dlq_redrive"
	if len(rows) == 0 {
		// Nothing to reopen is still an operator's write asked for.
		_, err := l.ActionsRole().RecordOperatorAction(ctx, by)
		return res, err
	}
	answers, err := l.ActionsRole().RedriveAny(ctx, by, force, rows...)
	if err != nil {
		return res, fmt.Errorf("reopen the rows: %w", err)
	}
	res.Rows = answers
	var drop []string
	for _, a := range answers {
		if !a.Reopened {
			for _, id := range byRow[a.ID] {
				res.Kept = append(res.Kept, KeptDeadLetter{id, fmt.Sprintf("row %d: %s", a.ID, a.Reason), a.Permanent && !a.Reopened})
			}
			continue
		}
		drop = append(drop, byRow[a.ID]...)
	}
	if len(drop) > 0 {
		// A dead letter that outlives this call (the delete failed) is
		// harmless: if it is ever moved back, the ledger's claim still
		// decides, so of it and the sweep's fresh message one sends.
		if _, err := q.DeleteDeadLetters(ctx, queueIDs(drop)...); err != nil {
			return res, fmt.Errorf("rows reopened, but removing their dead letters failed (remove them with dlq delete): %w", err)
		}
	}
	res.Redriven = len(drop)
	return res, nil
}

// DeleteDeadLetters removes the dead letters of list for good and answers
// how many the queue removed. by's audit line (Count: len(list)) is
// written first, and nothing is removed when it cannot be: the queue is
// not the database, so the two cannot commit together, and a line for a
// removal that then failed is the lesser wrong than a removal without one.
func DeleteDeadLetters(ctx context.Context, q queue.Queue, l ledger.HasActions, list []queue.DeadLetter, by ledger.OperatorAction) (int, error) {
	if len(list) == 0 {
		return 0, nil
	}
	ids := make([]string, len(list))
	for i, d := range list {
		ids[i] = d.ID
	}
	by.Action, by.Count = "dlq_delete", len(list)
	if _, err := l.ActionsRole().RecordOperatorAction(ctx, by); err != nil {
		return 0, fmt.Errorf("record the audit line (nothing was deleted): %w", err)
	}
	return q.DeleteDeadLetters(ctx, queueIDs(ids)...)
}
