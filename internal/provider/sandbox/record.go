package sandbox

import (
	"strconv"
	"time"

	"github.com/owedhq/owed/internal/provider/webhook"
)

// Send is one accepted send, as first accepted.
type Send struct {
	Key            string    `json:"key"`
	MessageID      string    `json:"message_id"`
	Tenant         string    `json:"tenant"`
	NotificationID int64     `json:"notification_id"`
	Recipient      string    `json:"recipient"`
	Channel        string    `json:"channel"`
	Kind           string    `json:"kind"`
	AcceptedAt     time.Time `json:"accepted_at"`
	// Duplicates counts later sends with the same key, each accepted again
	// with the same message id.
	Duplicates int `json:"duplicates"`
}

// SendQuery filters Sends; empty fields match everything.
type SendQuery struct {
	Key       string
	Tenant    string
	Recipient string
	// Limit bounds the answer: DefaultSendsLimit when zero, at most
	// MaxSendsLimit.
	Limit int
}

// Stats are the sandbox's counters since start or the last reset.
type Stats struct {
	// Accepted counts every 2xx answer, duplicates included.
	Accepted int64 `json:"accepted"`
	// Duplicates counts accepted sends whose idempotency key had been
	// accepted before. Owed's at-most-once invariant wants it at zero.
	Duplicates int64 `json:"duplicates"`
	// DistinctKeys counts idempotency keys accepted at least once.
	DistinctKeys int64 `json:"distinct_keys"`
	// RateLimited counts 429s from the rate limit (storms are in Faults).
	RateLimited  int64 `json:"rate_limited"`
	Unauthorized int64 `json:"unauthorized"`
	BadRequests  int64 `json:"bad_requests"`
	// Faults counts injected faults by kind: error, timeout, storm,
	// permanent.
	Faults map[string]int64 `json:"faults"`
	// PerMinute is accepted sends per wall-clock minute, oldest first,
	// ending with the current minute.
	PerMinute []MinuteCount `json:"per_minute"`
	Rate      string        `json:"rate"`
	Burst     int           `json:"burst"`
}

// MinuteCount is the number of sends accepted in one minute.
type MinuteCount struct {
	Minute   time.Time `json:"minute"`
	Accepted int64     `json:"accepted"`
}

// recorder holds the sends and counters. It is not safe for concurrent use;
// the Server's mutex guards it.
type recorder struct {
	maxSends int
	byKey    map[string]*Send
	// order is the keys in acceptance order, so the oldest can be forgotten
	// once maxSends is reached.
	order []string
	seq   int64

	accepted, duplicates, distinct int64
	rateLimited, unauthorized      int64
	badRequests                    int64
	faults                         map[string]int64
	// minutes is a ring of per-minute counts indexed by unix minute modulo
	// its length.
	minutes []MinuteCount
}

func newRecorder(maxSends, statsMinutes int) *recorder {
	return &recorder{maxSends: maxSends, byKey: make(map[string]*Send),
		faults:  map[string]int64{FaultError: 0, FaultTimeout: 0, FaultStorm: 0, FaultPermanent: 0},
		minutes: make([]MinuteCount, statsMinutes)}
}

// accept records a send and returns its record and whether its key had been
// accepted before. A duplicate answers with the first send's message id, as
// a provider honouring idempotency keys does.
func (r *recorder) accept(key string, p webhook.Payload, now time.Time) (Send, bool) {
	r.accepted++
	r.countMinute(now)
	if s, ok := r.byKey[key]; ok {
		r.duplicates++
		s.Duplicates++
		return *s, true
	}
	r.distinct++
	r.seq++
	s := &Send{Key: key, MessageID: "sbx_" + strconv.FormatInt(r.seq, 10), Tenant: p.Data.Tenant, NotificationID: p.Data.NotificationID,
		Recipient: p.Data.Recipient, Channel: p.Data.Channel, Kind: p.Type, AcceptedAt: now.UTC()}
	r.byKey[key] = s
	r.order = append(r.order, key)
	if len(r.order) > r.maxSends {
		delete(r.byKey, r.order[0])
		r.order = r.order[1:]
	}
	return *s, false
}

func (r *recorder) countMinute(now time.Time) {
	m := now.UTC().Truncate(time.Minute)
	i := int((m.Unix() / 60) % int64(len(r.minutes)))
	if !r.minutes[i].Minute.Equal(m) {
		r.minutes[i] = MinuteCount{Minute: m}
	}
	r.minutes[i].Accepted++
}

func (r *recorder) stats(now time.Time) Stats {
	st := Stats{Accepted: r.accepted, Duplicates: r.duplicates, DistinctKeys: r.distinct,
		RateLimited: r.rateLimited, Unauthorized: r.unauthorized, BadRequests: r.badRequests,
		Faults: make(map[string]int64, len(r.faults)), PerMinute: make([]MinuteCount, 0, len(r.minutes))}
	for k, v := range r.faults {
		st.Faults[k] = v
	}
	cur := now.UTC().Truncate(time.Minute)
	for back := len(r.minutes) - 1; back >= 0; back-- {
		m := cur.Add(-time.Duration(back) * time.Minute)
		c := MinuteCount{Minute: m}
		if b := r.minutes[int((m.Unix()/60)%int64(len(r.minutes)))]; b.Minute.Equal(m) {
			c.Accepted = b.Accepted
		}
		st.PerMinute = append(st.PerMinute, c)
	}
	return st
}

func (r *recorder) find(q SendQuery) []Send {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultSendsLimit
	}
	limit = min(limit, MaxSendsLimit)
	var out []Send
	if q.Key != "" {
		if s, ok := r.byKey[q.Key]; ok && matches(s, q) {
			out = append(out, *s)
		}
		return out
	}
	for i := len(r.order) - 1; i >= 0 && len(out) < limit; i-- {
		if s := r.byKey[r.order[i]]; matches(s, q) {
			out = append(out, *s)
		}
	}
	return out
}

func matches(s *Send, q SendQuery) bool {
	return (q.Tenant == "" || s.Tenant == q.Tenant) && (q.Recipient == "" || s.Recipient == q.Recipient)
}
