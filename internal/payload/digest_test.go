package payload

import (
	"encoding/json"
	"testing"
)

// A digest's message per channel, as docs/api.md ("Digests") shows it.
func TestDigestPerChannel(t *testing.T) {
	items := []DigestItem{
		{ID: 1, Kind: "follow_up", RefID: "T-1", Content: Content{Subject: "Ticket 1", Text: "Any news on 1?"}},
		{ID: 2, Kind: "follow_up", RefID: "T-2", Content: Content{Subject: "Ticket 2", Text: "Any news on 2?", HTML: "<b>2</b>"}},
	}
	if got := Digest(ChannelSMS, 1, items); got.Text != "• Any news on 1?\n• Any news on 2?" || got.Subject != "" {
		t.Errorf("sms: %+v", got)
	}
	email := Digest(ChannelEmail, 1, items)
	if email.Subject != "2 notifications" || email.Text != "Ticket 1\nAny news on 1?\n\nTicket 2\nAny news on 2?" ||
		email.HTML != "<section><p>Ticket 1<br>Any news on 1?</p></section><section><b>2</b></section>" {
		t.Errorf("email: %+v", email)
	}
	if err := channels[ChannelEmail](email); err != nil {
		t.Errorf("the email digest breaks the channel's rules: %v", err)
	}
	if got := Digest(ChannelEmail, 1, items[:1]); got.HTML != "" {
		t.Errorf("an email digest without HTML members has HTML %q", got.HTML)
	}
	hook := Digest(ChannelWebhook, 7, items)
	var body struct {
		Digest struct {
			ID      int64        `json:"id"`
			Count   int          `json:"count"`
			Members []DigestItem `json:"members"`
		} `json:"digest"`
	}
	if err := json.Unmarshal(hook.Data, &body); err != nil || body.Digest.ID != 7 || body.Digest.Count != 2 ||
		len(body.Digest.Members) != 2 || body.Digest.Members[1].Content.HTML != "<b>2</b>" || hook.Text != "2 notifications" {
		t.Errorf("webhook: %s %v", hook.Data, err)
	}
}
