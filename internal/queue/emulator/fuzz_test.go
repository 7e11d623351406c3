package emulator

import (
	"net/http"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/queue/wire"
)

// FuzzPublishBatchRequest feeds arbitrary bodies to the publish_batch
// decoder. Whatever comes in, it must not panic; a rejected body must be a
// 400 or 413 naming a field; an accepted one must have one result slot per
// entry, at most MaxBatch entries, and only entries that pass the limits
// reach the store. The f.Add seeds run as a regular test.
func FuzzPublishBatchRequest(f *testing.F) {
	for _, s := range []string{
		``,
		`{}`,
		`null`,
		`[]`,
		`{"queue":"q","messages":[]}`,
		`{"queue":"q","messages":[{"payload":{"a":1},"idempotency_key":"k"}]}`,
		`{"queue":"q","messages":[{"payload":1,"idempotency_key":"k"},{"payload":2,"idempotency_key":"k"}]}`,
		`{"queue":"q","messages":[{"payload":null,"idempotency_key":"k","delay_seconds":-4}]}`,
		`{"queue":"q","messages":[{"payload":"x","idempotency_key":"","delay_seconds":99999999}]}`,
		`{"queue":"q","messages":[{"payload":"x","idempotency_key":"k","extra":true}]}`,
		`{"queue":"q","messages":[{"payload":"x","idempotency_key":"k"}]} trailing`,
		`{"queue":1}`,
		`{"queue":"q","messages":{"payload":1}}`,
		`{"queue":"q","messages":[{"payload":"\u0000","idempotency_key":"\u0000"}]}`,
		`{"queue":"q","messages":[{"payload":` + strings.Repeat("[", 2000) + `}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, results, entries, index, dups, aerr := parsePublishBatch(strings.NewReader(string(body)))
		if aerr != nil {
			if aerr.status != http.StatusBadRequest && aerr.status != http.StatusRequestEntityTooLarge {
				t.Fatalf("rejected with HTTP %d: %s", aerr.status, aerr.msg)
			}
			if !strings.Contains(aerr.msg, ": ") {
				t.Fatalf("message %q does not name a field", aerr.msg)
			}
			return
		}
		if len(results) < 1 || len(results) > wire.MaxBatch {
			t.Fatalf("accepted %d entries", len(results))
		}
		if len(entries) != len(index) || len(entries)+len(dups) > len(results) {
			t.Fatalf("%d entries, %d indexes, %d repeats for %d results", len(entries), len(index), len(dups), len(results))
		}
		keys := map[string]bool{}
		for _, e := range entries {
			if e.key == "" || len(e.payload) == 0 || len(e.payload) > wire.MaxPayloadBytes || e.delay < 0 || e.delay > wire.MaxDelaySeconds {
				t.Fatalf("an invalid entry reached the store: key=%q payload=%d bytes delay=%d", e.key, len(e.payload), e.delay)
			}
			if keys[e.key] {
				t.Fatalf("key %q would be stored twice in one statement", e.key)
			}
			keys[e.key] = true
		}
		for i, r := range results {
			if r.Status == wire.StatusFailed && r.Reason == "" {
				t.Fatalf("entry %d failed without a reason", i)
			}
		}
	})
}
