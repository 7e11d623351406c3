package payload

import (
	"encoding/json"
	"fmt"
	htmlpkg "html"
	"strings"
)

// DigestItem is one member of a digest as its message lists it.
type DigestItem struct {
	ID      int64   `json:"id"`
	Kind    string  `json:"kind"`
	RefID   string  `json:"ref_id"`
	Content Content `json:"content"`
}

// digestBody is the data a webhook digest carries (docs/api.md, "Digests").
type digestBody struct {
	Digest struct {
		ID      int64        `json:"id"`
		Count   int          `json:"count"`
		Members []DigestItem `json:"members"`
	} `json:"digest"`
}

// Digest renders the one message that lists a digest's members on channel
// (docs/api.md, "Digests"): a webhook receives JSON listing every member
// with its content; email a subject counting them and a text with each
// member's subject and text in turn (and, when a member has HTML, an HTML
// part with every member's, the others' text escaped); sms,
// telegram and slack a text with one line per member. Members are listed
// in the order given.
func Digest(channel string, id int64, items []DigestItem) Content {
	if channel == ChannelWebhook {
		var b digestBody
		b.Digest.ID, b.Digest.Count, b.Digest.Members = id, len(items), items
		// A DigestItem always marshals: its Data is JSON the ledger stored.
		data, _ := json.Marshal(b)
		return Content{Data: data, Text: fmt.Sprintf("%d notifications", len(items))}
	}
	var text, html strings.Builder
	anyHTML := false
	for i, it := range items {
		line := strings.TrimSpace(it.Content.Text)
		if channel == ChannelEmail {
			if s := strings.TrimSpace(it.Content.Subject); s != "" {
				line = s + "\n" + line
			}
			if i > 0 {
				text.WriteString("\n\n")
			}
			text.WriteString(line)
			part, hasHTML := it.Content.HTML, it.Content.HTML != ""
			if !hasHTML {
				part = "<p>" + strings.ReplaceAll(htmlpkg.EscapeString(line), "\n", "<br>") + "</p>"
			}
			anyHTML = anyHTML || hasHTML
			html.WriteString("<section>" + part + "</section>")
			continue
		}
		if i > 0 {
			text.WriteString("\n")
		}
		text.WriteString("• " + line)
	}
	c := Content{Text: text.String()}
	if channel == ChannelEmail {
		c.Subject = fmt.Sprintf("%d notifications", len(items))
		if anyHTML {
			c.HTML = html.String()
		}
	}
	return c
}
