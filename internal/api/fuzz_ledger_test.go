package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
)

// The fuzz targets below send what they are given through the real API to
// a real ledger (scripts/with-postgres.sh), so they find what the decoders'
// own targets cannot: an input a decoder accepts and the database then
// refuses, a 500 (the list cursor that held a time PostgreSQL cannot
// compare, the reschedule whose expiry could not be stored). Every exchange
// is also checked against the contract. Their arguments are the query
// parameters' and times' own parts (a cursor's due time and id as int64s,
// a time as Unix seconds and an offset), so the fuzzer reaches the ends of
// each range quickly. Run each alone, e.g.
//
//	scripts/with-postgres.sh go test ./internal/api -run '^$' -fuzz '^FuzzListCursor$' -fuzztime 60s

// fuzzAPI is a bundle for a fuzz target: no parallel tests, no logs kept.
func fuzzAPI(f *testing.F) *bundle {
	b := newBundle(f)
	b.handler = New(Options{Ledger: b.ledger, Tokens: b.tokens, ServiceToken: serviceToken, Log: zerolog.Nop(),
		Clock: b.clk})
	return b
}

// notServerError fails t on a 5xx.
func notServerError(t *testing.T, what string, r response) {
	t.Helper()
	if r.status >= 500 {
		t.Fatalf("%s: status %d: %s", what, r.status, r.body)
	}
}

// rawCursor is a cursor's text for any due time and id, including those
// no page could end at.
func rawCursor(dueMicros, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1." + strconv.FormatInt(dueMicros, 10) + "." + strconv.FormatInt(id, 10)))
}

func FuzzListQuery(f *testing.F) {
	b := fuzzAPI(f)
	for _, s := range findSeeds {
		f.Add(s)
	}
	f.Add("cursor=djEuLTkyMjMzNzIwMzY4NTQ3NzU4MDguMQ")
	f.Add("limit=1&cursor=" + rawCursor(253402300799999999, 1))
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		_, e := decodeFind(q, acmeToken)
		r := b.do(t, http.MethodGet, "/v1/notifications?"+q.Encode(), b.acme, nil)
		notServerError(t, query, r)
		if e == nil && r.status != http.StatusOK {
			t.Fatalf("%q: the decoder accepted it, the API answered %d: %s", query, r.status, r.body)
		}
	})
}

func FuzzListCursor(f *testing.F) {
	b := fuzzAPI(f)
	// Rows at both ends of the ledger's times and between, for the cursor
	// to be compared with.
	var rows []ledger.NewNotification
	for i, at := range []time.Time{ledger.MinTime, b.clk.Now(), ledger.MaxTime} {
		rows = append(rows, ledger.NewNotification{Recipient: fmt.Sprintf("+1555000%d", i), Channel: "sms",
			Kind: "k", RefID: "r", DueAt: at, Payload: []byte(`{"text":"hi"}`)})
	}
	if _, err := b.ledger.Schedule(ctx, "acme", rows); err != nil {
		f.Fatal(err)
	}
	for _, s := range []struct {
		due, id int64
		limit   int
	}{{1772366400000000, 1, 10}, {0, 1, 1}, {-62135596800000000, 1, 500}, {253402300799999999, 1 << 62, 2}} {
		f.Add(s.due, s.id, s.limit)
	}
	f.Fuzz(func(t *testing.T, dueMicros, id int64, limit int) {
		q := url.Values{"cursor": {rawCursor(dueMicros, id)}, "limit": {strconv.Itoa(limit)}}
		_, e := decodeFind(q, acmeToken)
		r := b.do(t, http.MethodGet, "/v1/notifications?"+q.Encode(), b.acme, nil)
		notServerError(t, q.Encode(), r)
		if e == nil && r.status != http.StatusOK {
			t.Fatalf("%s: the decoder accepted it, the API answered %d: %s", q.Encode(), r.status, r.body)
		}
	})
}

func FuzzGetID(f *testing.F) {
	b := fuzzAPI(f)
	for _, s := range getSeeds {
		f.Add(s[0], s[1])
	}
	f.Add("9223372036854775807", "")
	f.Add("9223372036854775808", "tenant=acme")
	f.Fuzz(func(t *testing.T, id, query string) {
		q, err := url.ParseQuery(query)
		if err != nil || id == "" {
			return
		}
		r := b.do(t, http.MethodGet, "/v1/notifications/"+url.PathEscape(id)+"?"+q.Encode(), b.acme, nil)
		notServerError(t, id+"?"+query, r)
	})
}

// FuzzRescheduleTime moves a subject of two rows with expiries, one of
// them in flight (claimed as a worker claims it), to a fuzzed time: as
// due_at, counted in seconds from the Unix epoch, back from the ledger's
// last instant or on from its first (from 0, 1, 2), with nanoseconds and an
// offset in minutes; or as delay_seconds. The API never answers 5xx, and
// whatever it accepted, the send in flight still ends: its release, which
// applies a recorded reschedule, never fails.
func FuzzRescheduleTime(f *testing.F) {
	b := fuzzAPI(f)
	var n atomic.Int64
	for _, s := range []struct {
		from      uint8
		sec, nsec int64
		offset    int
		delay     int64
		useDelay  bool
	}{
		{0, 1772460000, 0, 0, 0, false},
		{1, 366 * 86400, 0, 0, 0, false},
		{2, 366 * 86400, 0, 60, 0, false},
		{0, 0, 0, 0, 3600, true},
		{0, 0, 0, 0, 31622400, true},
	} {
		f.Add(s.from, s.sec, s.nsec, s.offset, s.delay, s.useDelay)
	}
	now := b.clk.Now()
	f.Fuzz(func(t *testing.T, from uint8, sec, nsec int64, offset int, delay int64, useDelay bool) {
		ref := fmt.Sprintf("R-%d", n.Add(1))
		var ns []map[string]any
		for _, recipient := range []string{"+15550001", "+15550002"} {
			row := note(recipient, ref, now)
			row["expires_at"] = now.Add(time.Hour).Format(time.RFC3339)
			ns = append(ns, row)
		}
		var s scheduleResult
		r := b.do(t, http.MethodPost, "/v1/notifications", b.acme, batch(ns...))
		expect(t, r, http.StatusOK)
		r.data(t, &s)
		c, err := b.ledger.ClaimForSend(ctx, "acme", s.Notifications[1].ID, ledger.ClaimParams{DueAt: now, LeaseFor: time.Minute})
		if err != nil || c.Outcome != ledger.ClaimSend {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		body := map[string]any{"kind": "follow_up", "ref_id": ref}
		if useDelay {
			body["delay_seconds"] = delay
		} else {
			at := time.Unix(sec, nsec%1_000_000_000)
			switch from % 3 {
			case 1:
				at = ledger.MaxTime.Add(-time.Duration(sec%(1<<33)) * time.Second).Add(time.Duration(nsec % 1_000_000_000))
			case 2:
				at = ledger.MinTime.Add(time.Duration(sec%(1<<33)) * time.Second).Add(time.Duration(nsec % 1_000_000_000))
			}
			body["due_at"] = at.In(time.FixedZone("", (offset%1440)*60)).Format(time.RFC3339Nano)
		}
		notServerError(t, fmt.Sprint(body), b.do(t, http.MethodPost, "/v1/notifications/reschedule", b.acme, body))
		if err := b.ledger.ReleaseClaim(ctx, c.Hold, time.Second, time.Minute, "fuzz", nil, false); err != nil {
			t.Fatalf("%v: the release of the row in flight failed: %v", body, err)
		}
	})
}
