package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// PUT /v1/digests declares a kind digestible: two follow-ups to one
// recipient within the window share one digest, due as it closes, which
// GET /v1/notifications/{id} shows; GET /v1/digests lists the setting, a
// window of "0" turns it off, and a tenant sees only its own settings.
func TestDigestsThroughTheAPI(t *testing.T) {
	b := setup(t)
	r := b.do(t, "PUT", "/v1/digests", b.acme, map[string]any{"kind": "follow_up", "window": "10m"})
	expect(t, r, http.StatusOK)
	var set struct {
		Digest     digestView `json:"digest"`
		Undigested int        `json:"undigested"`
	}
	r.data(t, &set)
	if set.Digest != (digestView{Kind: "follow_up", Window: "10m0s"}) || set.Undigested != 0 {
		t.Fatalf("answer %+v, want follow_up in windows of 10m", set)
	}
	at := b.clk.Now().Add(time.Hour)
	r = b.do(t, "POST", "/v1/notifications", b.acme, batch(note("+15550001", "T-1", at),
		note("+15550001", "T-2", at.Add(time.Minute))))
	expect(t, r, http.StatusOK)
	var sched scheduleResult
	r.data(t, &sched)
	for i, n := range sched.Notifications {
		var d detailResponse
		b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", n.ID), b.acme, nil).data(t, &d)
		if d.DigestID != sched.Notifications[0].ID || !d.DueAt.Equal(at.Add(10*time.Minute)) || d.DigestFrom == nil {
			t.Errorf("member %d: digest %d due %s from %v; want digest %d due as the window closes",
				i, d.DigestID, d.DueAt, d.DigestFrom, sched.Notifications[0].ID)
		}
	}

	var list []digestView
	b.do(t, "GET", "/v1/digests", b.acme, nil).data(t, &list)
	if len(list) != 1 || list[0] != (digestView{Kind: "follow_up", Window: "10m0s"}) {
		t.Errorf("acme's digests: %+v", list)
	}
	b.do(t, "GET", "/v1/digests", b.globex, nil).data(t, &list)
	if len(list) != 0 {
		t.Errorf("globex sees acme's digests: %+v", list)
	}

	for _, bad := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"kind": "follow_up"}, "window"},
		{map[string]any{"kind": "follow_up", "window": "ten minutes"}, "window"},
		{map[string]any{"kind": "follow_up", "window": "48h"}, "window"},
		{map[string]any{"kind": "", "window": "10m"}, "kind"},
	} {
		expectField(t, b.do(t, "PUT", "/v1/digests", b.acme, bad.body), http.StatusBadRequest, bad.field)
	}
	expectField(t, b.do(t, "GET", "/v1/digests?kind=x", b.acme, nil), http.StatusBadRequest, "kind")
	expectField(t, b.do(t, "GET", "/v1/digests?tenant=globex", b.acme, nil), http.StatusForbidden, "tenant")
	expectField(t, b.do(t, "GET", "/v1/digests", serviceToken, nil), http.StatusBadRequest, "tenant")
	if r := b.do(t, "PUT", "/v1/digests", b.acme, `{"kind":`); r.status != http.StatusBadRequest ||
		r.apiErr(t).Code != codeMalformedJSON {
		t.Errorf("malformed: %d %s", r.status, r.body)
	}
	if r := b.do(t, "GET", "/v1/digests", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("GET /v1/digests without a token: %d %s", r.status, r.body)
	}

	r = b.do(t, "PUT", "/v1/digests", b.acme, map[string]any{"kind": "follow_up", "window": "0"})
	expect(t, r, http.StatusOK)
	r.data(t, &set)
	if set.Undigested != 2 {
		t.Errorf("turning digests off undigested %d rows, want 2", set.Undigested)
	}
}
