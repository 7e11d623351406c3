package receipt

import (
	"net/url"
	"testing"

	"github.com/owedhq/owed/internal/ledger"
)

// Every parser reads untrusted bodies (the signature is checked first, but
// a provider's body is still not ours). The fuzzers check that a parser
// never panics and that whatever it returns is a receipt the ledger takes.
// Their seeds run as regular tests.

func checkBatch(t *testing.T, b Batch, err error) {
	t.Helper()
	if err != nil {
		if len(b.Receipts) != 0 {
			t.Fatalf("an error (%v) with receipts %+v", err, b.Receipts)
		}
		return
	}
	for _, r := range b.Receipts {
		if verr := r.Validate(); verr != nil {
			t.Fatalf("parsed a receipt the ledger refuses: %+v: %v", r, verr)
		}
		if r.OccurredAt != nil && (r.OccurredAt.Year() < 1 || r.OccurredAt.Year() > 10000) {
			t.Fatalf("parsed an out-of-range time: %v", r.OccurredAt)
		}
	}
	if b.Ignored < 0 {
		t.Fatalf("ignored %d", b.Ignored)
	}
}

func FuzzTwilio(f *testing.F) {
	for _, s := range []string{
		"MessageSid=SM1&MessageStatus=delivered&AccountSid=AC1&From=%2B15550001&To=%2B15550002&ApiVersion=2010-04-01",
		"MessageSid=SM1&MessageStatus=undelivered&ErrorCode=30003",
		"SmsSid=SM2&SmsStatus=failed&MessageStatus=failed&ErrorCode=30007",
		"MessageStatus=delivered",
		"MessageSid=%ZZ&MessageStatus=sent",
		"MessageSid=SM1&MessageStatus=queued",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		form, err := url.ParseQuery(body)
		if err != nil {
			return
		}
		b, err := ParseTwilio(form)
		checkBatch(t, b, err)
		if err == nil && len(b.Receipts)+b.Ignored != 1 {
			t.Fatalf("one callback is one receipt or one ignored event: %+v", b)
		}
	})
}

func FuzzSendGrid(f *testing.F) {
	for _, s := range []string{
		`[{"event":"delivered","sg_message_id":"m1.filter0001.1","timestamp":1700000060,"response":"250 OK"}]`,
		`[{"event":"bounce","sg_message_id":"m2.f","timestamp":1700000070,"type":"bounce","status":"5.1.1"},{"event":"open"}]`,
		`[{"event":"dropped","sg_message_id":"m3","timestamp":"1700000080","reason":"Bounced Address"}]`,
		`[{"event":"deferred","sg_message_id":"m4","timestamp":1e30}]`,
		`[{"event":"delivered","sg_message_id":".x","timestamp":-1}]`,
		`[1, "x", null, {}]`,
		`{}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseSendGrid(body)
		checkBatch(t, b, err)
	})
}

func FuzzPostmark(f *testing.F) {
	for _, s := range []string{
		`{"RecordType":"Delivery","MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","DeliveredAt":"2014-08-01T13:28:10.2735393-04:00"}`,
		`{"RecordType":"Bounce","Type":"HardBounce","TypeCode":1,"MessageID":"m","BouncedAt":"2014-08-01T13:28:10Z"}`,
		`{"RecordType":"Bounce","Type":"Transient","MessageID":"m","BouncedAt":"0000-01-01T00:00:00Z"}`,
		`{"RecordType":"Open","MessageID":"m"}`,
		`{"RecordType":"Delivery"}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParsePostmark(body)
		checkBatch(t, b, err)
	})
}

func FuzzWebhook(f *testing.F) {
	for _, s := range []string{
		`{"message_id":"msg-1","status":"delivered","occurred_at":"2026-03-01T12:00:00Z"}`,
		`{"message_id":"msg-1","status":"bounced","occurred_at":"2026-03-01T12:00:00+02:00","code":"550 5.1.1"}`,
		`{"message_id":"msg-1","status":"failed"}`,
		`{"message_id":"","status":"failed"}`,
		`{"message_id":"m","status":"delivered","occurred_at":"9999-12-31T23:59:59-23:59"}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseWebhook(body)
		checkBatch(t, b, err)
		for _, r := range b.Receipts {
			if r.Status != ledger.ReceiptDelivered && r.Status != ledger.ReceiptBounced && r.Status != ledger.ReceiptFailed {
				t.Fatalf("a webhook receipt of status %q", r.Status)
			}
		}
	})
}
