// Package payload defines the rendered notification a ledger row carries in
// its payload, and the per-channel rules it must satisfy. The rules are
// checked when a row is scheduled, so a worker never discovers at send time
// that an email has no subject.
package payload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Channels a row may be scheduled on. Which provider carries each channel is
// the worker's configuration.
const (
	ChannelEmail    = "email"
	ChannelSMS      = "sms"
	ChannelTelegram = "telegram"
	ChannelSlack    = "slack"
	ChannelWebhook  = "webhook"
)

// MaxPayloadBytes bounds a row's payload in its Canonical form, which is how
// the database measures it: octet_length(payload::text) <= 65536.
const MaxPayloadBytes = 64 << 10

// Content is the rendered content of one notification: what its payload
// column holds.
type Content struct {
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text,omitempty"`
	HTML    string `json:"html,omitempty"`
	// Data is the JSON body a webhook receives (the webhook channel only).
	Data json.RawMessage `json:"data,omitempty"`
	// Extras are channel-specific options (say, Telegram's parse_mode).
	Extras map[string]string `json:"extras,omitempty"`
}

var channels = map[string]func(Content) error{
	ChannelEmail: func(m Content) error {
		if strings.TrimSpace(m.Subject) == "" {
			return fmt.Errorf("subject: required for channel %q", ChannelEmail)
		}
		if strings.TrimSpace(m.Text) == "" && strings.TrimSpace(m.HTML) == "" {
			return fmt.Errorf("text: required for channel %q (or html)", ChannelEmail)
		}
		return nil
	},
	ChannelSMS:      needText(ChannelSMS),
	ChannelTelegram: needText(ChannelTelegram),
	ChannelSlack:    needText(ChannelSlack),
	ChannelWebhook: func(m Content) error {
		if len(m.Data) == 0 && m.Text == "" {
			return fmt.Errorf("data: required for channel %q (or text)", ChannelWebhook)
		}
		return nil
	},
}

func needText(ch string) func(Content) error {
	return func(m Content) error {
		if strings.TrimSpace(m.Text) == "" {
			return fmt.Errorf("text: required for channel %q", ch)
		}
		return nil
	}
}

// Channels returns the accepted channel names, sorted.
func Channels() []string {
	out := make([]string, 0, len(channels))
	for c := range channels {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Parse decodes a payload for channel and checks the channel's rules. The
// error names the offending field. Unknown fields are rejected so a typo
// ("subjct") fails at scheduling rather than sending an email without one.
func Parse(channel string, raw []byte) (Content, error) {
	m, _, err := ParseCanonical(channel, raw)
	return m, err
}

// ParseCanonical is Parse that also returns the payload in Canonical form,
// the bytes the ledger stores. The size limit applies to that form, as the
// database's check does.
func ParseCanonical(channel string, raw []byte) (Content, []byte, error) {
	var m Content
	check, ok := channels[channel]
	if !ok {
		return m, nil, fmt.Errorf("channel: %q is not one of %s", channel, strings.Join(Channels(), ", "))
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return m, nil, fmt.Errorf("payload: required")
	}
	canon, err := Canonical(raw)
	if err != nil {
		return m, nil, err
	}
	if len(canon) > MaxPayloadBytes {
		return m, nil, fmt.Errorf("payload: %d bytes as stored exceeds the limit of %d", len(canon), MaxPayloadBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, nil, fmt.Errorf("payload: %v", err)
	}
	if len(m.Data) > 0 && channel != ChannelWebhook {
		return m, nil, fmt.Errorf("data: only the %q channel takes data", ChannelWebhook)
	}
	if err := check(m); err != nil {
		return m, nil, err
	}
	return m, canon, nil
}
