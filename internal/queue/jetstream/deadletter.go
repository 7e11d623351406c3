package jetstream

import (
	"context"
	"fmt"
	"strconv"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/owedhq/owed/internal/queue"
)

const (
	// DefaultDeadLetterPage is the page size of a DeadLetters call that
	// names none.
	DefaultDeadLetterPage = 100
	// MaxDeadLetterPage bounds one page: each dead letter is one request.
	MaxDeadLetterPage = 1000
)

// DeadLetter publishes a copy of d to the dead-letter stream with the
// reason, then acks d. The copy's Nats-Msg-Id is d's receipt, so a retry of
// the same call within the duplicate window does not copy twice, while a
// later dead-lettering of the same message (after a redrive) is kept.
func (c *Client) DeadLetter(ctx context.Context, d queue.Delivery, reason string) error {
	if err := c.ownReceipt(d.Receipt); err != nil {
		return err
	}
	msg := message(c.cfg.DeadLetterSubject, d.ID, d.Key, d.Body)
	msg.Header.Set(HeaderReason, reason)
	if _, err := c.js.PublishMsg(ctx, msg,
		natsjs.WithExpectStream(c.cfg.DeadLetterStream),
		natsjs.WithMsgID("owed-dead-letter "+d.Receipt)); err != nil {
		return fmt.Errorf("jetstream: dead-letter %s: %w", d.ID, err)
	}
	return c.Ack(ctx, d.Receipt)
}

// DeadLetters lists dead letters in the order they arrived. A dead letter's
// id is its sequence in the dead-letter stream; the cursor is the sequence
// to continue from.
func (c *Client) DeadLetters(ctx context.Context, limit int, cursor string) ([]queue.DeadLetter, string, error) {
	if limit <= 0 {
		limit = DefaultDeadLetterPage
	}
	limit = min(limit, MaxDeadLetterPage)
	seq := uint64(1)
	if cursor != "" {
		var err error
		if seq, err = strconv.ParseUint(cursor, 10, 64); err != nil || seq == 0 {
			return nil, "", fmt.Errorf("jetstream: dead-letter cursor %q is not one DeadLetters returned", cursor)
		}
	}
	var out []queue.DeadLetter
	for len(out) < limit {
		m, err := c.dead.GetMsg(ctx, seq, natsjs.WithGetMsgSubject(c.cfg.DeadLetterSubject))
		if notFound(err) {
			return out, "", nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("jetstream: list dead letters: %w", err)
		}
		out = append(out, queue.DeadLetter{
			ID:             strconv.FormatUint(m.Sequence, 10),
			Key:            m.Header.Get(HeaderKey),
			Reason:         m.Header.Get(HeaderReason),
			Body:           m.Data,
			DeadLetteredAt: m.Time.UTC(),
		})
		seq = m.Sequence + 1
	}
	return out, strconv.FormatUint(seq, 10), nil
}

// Redrive publishes each named dead letter to the queue again and deletes
// it from the dead-letter stream. The republish's Nats-Msg-Id names the
// dead letter, so a retry after a failed delete does not queue it twice
// within the duplicate window; its Key is not reused, because the original
// publish under that key may still be inside the window.
func (c *Client) Redrive(ctx context.Context, ids ...string) (int, error) {
	return c.takeDeadLetters(ctx, ids, func(id string, m *natsjs.RawStreamMsg) error {
		msgID := m.Header.Get(HeaderID)
		if msgID == "" {
			msgID = nuid.Next()
		}
		msg := message(c.cfg.Subject, msgID, m.Header.Get(HeaderKey), m.Data)
		if _, err := c.js.PublishMsg(ctx, msg,
			natsjs.WithExpectStream(c.cfg.Stream),
			natsjs.WithMsgID("owed-redrive "+c.cfg.DeadLetterStream+" "+id)); err != nil {
			return fmt.Errorf("jetstream: redrive %s: %w", id, err)
		}
		return nil
	})
}

// DeleteDeadLetters deletes the named dead letters.
func (c *Client) DeleteDeadLetters(ctx context.Context, ids ...string) (int, error) {
	return c.takeDeadLetters(ctx, ids, func(string, *natsjs.RawStreamMsg) error { return nil })
}

// takeDeadLetters reads each named dead letter, runs do on it and then
// deletes it; it says how many it deleted. Unknown ids are skipped, and so
// is a dead letter another caller deleted meanwhile.
func (c *Client) takeDeadLetters(ctx context.Context, ids []string, do func(id string, m *natsjs.RawStreamMsg) error) (int, error) {
	taken := 0
	for _, id := range ids {
		seq, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			continue
		}
		m, err := c.dead.GetMsg(ctx, seq)
		if notFound(err) {
			continue
		}
		if err != nil {
			return taken, fmt.Errorf("jetstream: read dead letter %s: %w", id, err)
		}
		if m.Subject != c.cfg.DeadLetterSubject {
			continue
		}
		if err := do(id, m); err != nil {
			return taken, err
		}
		err = c.dead.DeleteMsg(ctx, seq)
		if notFound(err) {
			continue
		}
		if err != nil {
			return taken, fmt.Errorf("jetstream: delete dead letter %s: %w", id, err)
		}
		taken++
	}
	return taken, nil
}
