package emulator

import (
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/queue/wire"
)

// TestDecodeNamesJSONFields checks that a wrong type is reported under the
// field's JSON name, also for the queue every body embeds (wire.QueueRef).
func TestDecodeNamesJSONFields(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"queue":1}`:                   "queue: ",
		`{"queue":"q","message_ids":1}`: "message_ids: ",
		`{"QueueRef":{}}`:               `"QueueRef": `,
	} {
		var req wire.AckRequest
		aerr := decodeJSON(strings.NewReader(body), &req)
		if aerr == nil || !strings.HasPrefix(aerr.msg, want) {
			t.Errorf("decode %s: %v, want a message starting %q", body, aerr, want)
		}
	}
	var batch wire.PublishBatchRequest
	if aerr := decodeJSON(strings.NewReader(`{"queue":"q","messages":[{"delay_seconds":"x"}]}`), &batch); aerr == nil || !strings.HasPrefix(aerr.msg, "messages.delay_seconds: ") {
		t.Errorf("decode a batch entry: %v, want messages.delay_seconds named", aerr)
	}
}
