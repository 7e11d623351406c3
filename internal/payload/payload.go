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

// MaxPayloadBytes bounds a row's payload; the ledger enforces the same limit.
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
	var m Content
	check, ok := channels[channel]
	if !ok {
		return m, fmt.Errorf("channel: %q is not one of %s", channel, strings.Join(Channels(), ", "))
	}
	if len(raw) > MaxPayloadBytes {
		return m, fmt.Errorf("payload: %d bytes exceeds the limit of %d", len(raw), MaxPayloadBytes)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return m, fmt.Errorf("payload: required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("payload: %v", err)
	}
	if dec.More() {
		return m, fmt.Errorf("payload: trailing data after the JSON object")
	}
	if len(m.Data) > 0 && channel != ChannelWebhook {
		return m, fmt.Errorf("data: only the %q channel takes data", ChannelWebhook)
	}
	if err := check(m); err != nil {
		return m, err
	}
	return m, nil
}
