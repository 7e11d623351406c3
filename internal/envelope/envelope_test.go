package envelope

import (
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	in := Envelope{Tenant: "acme", ID: 42, DueAt: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.FixedZone("x", 3600)), Key: "owed-42-1",
		Digest: 41}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Tenant != in.Tenant || out.ID != in.ID || !out.DueAt.Equal(in.DueAt) || out.Key != in.Key || out.V != Version ||
		out.Digest != in.Digest {
		t.Errorf("round trip: %+v != %+v", out, in)
	}
}

func TestDecodeRejects(t *testing.T) {
	for body, want := range map[string]string{
		``:        "not valid JSON",
		`[]`:      "not valid JSON",
		`{"v":2}`: "v=2 is not supported",
		`{"v":1,"tenant_id":"a","id":0,"due_at":"2026-01-01T00:00:00Z","key":"k"}`:                                "id must be a positive",
		`{"v":1,"tenant_id":"","id":1,"due_at":"2026-01-01T00:00:00Z","key":"k"}`:                                 "tenant_id is required",
		`{"v":1,"tenant_id":"` + strings.Repeat("t", 129) + `","id":1,"due_at":"2026-01-01T00:00:00Z","key":"k"}`: "tenant_id must be at most",
		`{"v":1,"tenant_id":"a","id":1,"key":"k"}`:                                                                "due_at is required",
		`{"v":1,"tenant_id":"a","id":1,"due_at":"2026-01-01T00:00:00Z","key":""}`:                                 "key must be",
		`{"v":1,"tenant_id":"a","id":1,"due_at":"2026-01-01T00:00:00Z","key":"k","x":1}`:                          "unknown field",
		`{"v":1,"tenant_id":"a","id":1,"due_at":"2026-01-01T00:00:00Z","key":"k","digest":-1}`:                    "digest must be",
		`{"v":1,"tenant_id":"a","id":1,"due_at":"2026-01-01T00:00:00Z","key":"k"} {}`:                             "trailing data",
		`{"v":1,"tenant_id":"a","id":"1","due_at":"2026-01-01T00:00:00Z","key":"k"}`:                              "not valid JSON",
		`{"v":1,"tenant_id":"a","id":1,"due_at":"yesterday","key":"k"}`:                                           "not valid JSON",
		`{"v":1,"tenant_id":"a","id":1,"due_at":"9999-12-31T23:30:00-01:00","key":"k"}`:                           "outside the years",
		`{"v":1,"tenant_id":"a\u0000b","id":1,"due_at":"2026-01-01T00:00:00Z","key":"k"}`:                         "control characters or NUL",
		`{"v":1,"tenant_id":"a","id":1,"due_at":"2026-01-01T00:00:00Z","key":"` + strings.Repeat("k", 300) + `"}`: "key must be",
	} {
		_, err := Decode([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%.60q) = %v, want an error containing %q", body, err, want)
		}
	}
}

// FuzzDecode feeds arbitrary queue payloads to the worker's decoder: it must
// never panic, and whatever it accepts must encode back to an equal envelope.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"tenant_id":"acme","id":7,"due_at":"2026-01-01T00:00:00Z","key":"owed-7-1"}`))
	f.Add([]byte(`{"v":1,"tenant_id":"acme","id":-7,"due_at":"0001-01-01T00:00:00Z","key":""}`))
	f.Add([]byte(`{"v":1e400}`))
	f.Add([]byte(`null`))
	// A due time that an offset carries past year 9999 in UTC: accepted, it
	// could not be encoded again.
	f.Add([]byte(`{"v":1,"tenant_id":"acme","id":7,"due_at":"9999-12-31T23:30:00-01:00","key":"owed-7-1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(e)
		if err != nil {
			t.Fatalf("accepted envelope does not encode: %v", err)
		}
		e2, err := Decode(again)
		if err != nil || e2.ID != e.ID || e2.Tenant != e.Tenant || !e2.DueAt.Equal(e.DueAt) || e2.Key != e.Key ||
			e2.Digest != e.Digest {
			t.Fatalf("re-decode: %+v %v, want %+v", e2, err, e)
		}
	})
}
