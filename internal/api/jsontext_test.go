package api

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// Issue 29 (7): invalid UTF-8 and lone surrogates in a JSON body were
// stored as U+FFFD and answered 200. Each is a 400 naming the field that
// holds it, wherever it is: an identifier, a payload's text, deep in a
// webhook's data, an object key. A surrogate pair, an escaped backslash
// before "ud800" and text outside the BMP sent as itself are text, and pass.
func TestBodyTextMustBeUTF8(t *testing.T) {
	b := setup(t)
	sched := func(recipient, payload string) string {
		return `{"notifications":[{"recipient":"` + recipient + `","channel":"webhook","kind":"k","ref_id":"r",` +
			`"due_at":"2026-03-01T12:00:00Z","payload":` + payload + `}]}`
	}
	cases := []struct {
		name, path, body string
		field            string
	}{
		{"invalid UTF-8 in a recipient", "/v1/notifications", sched("a\xffb", `{"text":"hi"}`), "notifications[0].recipient"},
		{"invalid UTF-8 in a payload's text", "/v1/notifications", sched("a", "{\"text\":\"h\xc3i\"}"), "notifications[0].payload.text"},
		{"a lone high surrogate", "/v1/notifications", sched("a", `{"text":"lone \ud800 surrogate"}`), "notifications[0].payload.text"},
		{"a lone low surrogate", "/v1/notifications", sched("a", `{"text":"\uDC00"}`), "notifications[0].payload.text"},
		{"a high surrogate before a non-surrogate", "/v1/notifications", sched("a", `{"text":"\ud83d\u0041"}`), "notifications[0].payload.text"},
		{"a high surrogate at the end", "/v1/notifications", sched("a", `{"text":"x\ud83d"}`), "notifications[0].payload.text"},
		{"deep in data", "/v1/notifications", sched("a", `{"data":{"list":[1,{"k":"ok"},["x","\udfff"]]}}`), "notifications[0].payload.data.list[2][1]"},
		{"an object key", "/v1/notifications", sched("a", `{"data":{"k\ud800":1}}`), "notifications[0].payload.data"},
		{"a top-level key", "/v1/notifications", "{\"notifications\xff\":[]}", "body"},
		{"an event's kind", "/v1/events", `{"kind":"k\ud800","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"2026-03-01T12:00:00Z","recipients":[{"recipient":"a"}]}`, "kind"},
		{"an event recipient", "/v1/events", `{"kind":"k","ref_id":"r","channel":"sms","payload":{"text":"hi"},"occurred_at":"2026-03-01T12:00:00Z","recipients":[{"recipient":"a"},{"recipient":"` + "\xed\xa0\x80" + `"}]}`, "recipients[1].recipient"},
		{"a cancel's ref_id", "/v1/notifications/cancel", `{"kind":"k","ref_id":"\ud800"}`, "ref_id"},
		{"a reschedule's due_at", "/v1/notifications/reschedule", "{\"kind\":\"k\",\"ref_id\":\"r\",\"due_at\":\"2026\xff\"}", "due_at"},
	}
	for _, c := range cases {
		r := b.do(t, http.MethodPost, c.path, b.acme, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400 naming %s; body %s", c.name, r.status, c.field, r.body)
			continue
		}
		if e := r.apiErr(t); e.Field != c.field || e.Code != codeInvalidField {
			t.Errorf("%s: %s %q, want invalid_field naming %q (%s)", c.name, e.Code, e.Field, c.field, e.Message)
		}
	}
	if n := b.count(t, "acme"); n != 0 {
		t.Fatalf("%d rows written by refused requests", n)
	}
	for _, text := range []string{`pair \ud83d\ude00`, `escaped \\ud800`, "itself \U0001F600", `\\\ud83d\udE00`} {
		r := b.do(t, http.MethodPost, "/v1/notifications", b.acme, sched("a", `{"text":"`+text+`"}`))
		expect(t, r, http.StatusOK)
	}
}

func TestFieldPathOfAStringInTheBody(t *testing.T) {
	for body, want := range map[string]string{
		`"\ud800"`:                                    "body",
		`["\ud800"]`:                                  "[0]",
		`[1, [2, 3], {"a": "\ud800"}]`:                "[2].a",
		`{"a": {"b": [[], "x", "\ud800"]}}`:           "a.b[2]",
		`{"a": 1, "b": {"c": true}, "d": ["\ud800"]}`: "d[0]",
	} {
		e := checkText([]byte(body))
		if e == nil || e.Field != want || !strings.Contains(e.Message, "lone surrogate") {
			t.Errorf("%s: %+v, want the field %q", body, e, want)
		}
	}
}

// Issue 29 (7): control characters were accepted in kind, recipient and
// ref_id. Every identifier field refuses them, naming the field; a
// payload's text keeps its newlines and tabs.
func TestIdentifiersRefuseControlCharacters(t *testing.T) {
	b := setup(t)
	one := func(field, value string) map[string]any {
		n := note("+15550001", "T-1", b.clk.Now())
		n[field] = value
		return batch(n)
	}
	event := func(field string, value any) map[string]any {
		e := map[string]any{"kind": "shipment", "ref_id": "S-1", "channel": "sms", "payload": map[string]any{"text": "hi"},
			"occurred_at": b.clk.Now().Format(time.RFC3339), "recipients": []map[string]any{{"recipient": "+15550001"}}}
		e[field] = value
		return e
	}
	cases := []struct {
		path  string
		token string
		body  any
		field string
	}{
		{"/v1/notifications", b.acme, one("kind", "follow_up\n"), "notifications[0].kind"},
		{"/v1/notifications", b.acme, one("recipient", "+1555\x1b[2J"), "notifications[0].recipient"},
		{"/v1/notifications", b.acme, one("ref_id", "T-1\u0085"), "notifications[0].ref_id"},
		{"/v1/notifications", b.acme, one("ref_id", "T\x7f1"), "notifications[0].ref_id"},
		{"/v1/notifications", b.acme, one("channel", "sms\t"), "notifications[0].channel"},
		{"/v1/events", b.acme, event("kind", "ship\rment"), "kind"},
		{"/v1/events", b.acme, event("ref_id", "\x00S-1"), "ref_id"},
		{"/v1/events", b.acme, event("recipients", []map[string]any{{"recipient": "+1"}, {"recipient": "a\u2028\nb"}}), "recipients[1].recipient"},
		{"/v1/notifications/cancel", b.acme, map[string]any{"kind": "follow_up", "ref_id": "T-1\n"}, "ref_id"},
		{"/v1/notifications/reschedule", b.acme, map[string]any{"kind": "follow\tup", "ref_id": "T-1", "delay_seconds": 60}, "kind"},
		{"/v1/notifications/cancel", serviceToken, map[string]any{"tenant_id": "ac\nme", "kind": "k", "ref_id": "T-1"}, "tenant_id"},
	}
	for _, c := range cases {
		r := b.do(t, http.MethodPost, c.path, c.token, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %v: status %d, want 400 naming %s; body %s", c.path, c.body, r.status, c.field, r.body)
			continue
		}
		if e := r.apiErr(t); e.Field != c.field {
			t.Errorf("%s %v: field %q, want %q (%s)", c.path, c.body, e.Field, c.field, e.Message)
		}
	}
	if n := b.count(t, "acme"); n != 0 {
		t.Fatalf("%d rows written by refused requests", n)
	}
	n := note("+15550001", "T-1", b.clk.Now())
	n["payload"] = map[string]any{"text": "line one\nline two\tand a tab"}
	expect(t, b.do(t, http.MethodPost, "/v1/notifications", b.acme, batch(n)), http.StatusOK)
}
