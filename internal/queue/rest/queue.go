package rest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/wire"
)

// This file maps queue.Queue onto the REST contract:
//   - Publish is publish_batch, the Key the entry's idempotency key (one is
//     generated for a message without a Key, so it is never deduplicated);
//   - a receipt is the message id and the receive count ("<id>#<count>"):
//     the contract acts on message ids, so a stale receipt acts on the
//     message's current delivery, as SQS may with an old receipt handle;
//   - ChangeVisibility is an extend, or for 0 a nack with no delay;
//   - DeadLetter is a nack with dead_letter set and the reason.
//
// The emulator's own receive-count dead-lettering is a safety net only
// (emulator.DefaultMaxReceives): the ledger decides dead letters.

var _ queue.Queue = (*Client)(nil)

// generatedKeyPrefix starts the idempotency key of a message published
// without a Key.
const generatedKeyPrefix = "owed-generated-"

// receiptSep separates the message id from the receive count in a receipt.
const receiptSep = "#"

// Publish publishes msgs with publish_batch and returns one result per
// message, in order. Bodies must be JSON documents (the contract's payload);
// the queue keeps them compacted. A message the server refuses, or that a
// failed request carried, is a result with Err; once a request fails the
// messages after it are not sent and carry the same error. Publish itself
// fails only when ctx ends.
func (c *Client) Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error) {
	res := make([]queue.PublishResult, len(msgs))
	entries := make([]Entry, 0, len(msgs))
	index := make([]int, 0, len(msgs))
	for i, m := range msgs {
		if err := checkMessage(m); err != nil {
			res[i].Err = err
			continue
		}
		key := m.Key
		if key == "" {
			key = generatedKeyPrefix + rand.Text()
		}
		entries = append(entries, Entry{Payload: json.RawMessage(m.Body), IdempotencyKey: key, Delay: m.Delay})
		index = append(index, i)
	}
	results, err := c.PublishBatch(ctx, entries)
	for j, i := range index {
		if j >= len(results) {
			res[i].Err = fmt.Errorf("rest: not published: %w", err)
			continue
		}
		switch r := results[j]; r.Status {
		case StatusCreated, StatusDeduplicated:
			res[i] = queue.PublishResult{ID: r.MessageID, Deduplicated: r.Status == StatusDeduplicated}
		default:
			res[i].Err = fmt.Errorf("rest: the queue refused the message (%s): %s", r.Status, r.Reason)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return res, nil
}

// checkMessage refuses what the contract's limits or the REST payload
// refuse, before anything is sent.
func checkMessage(m queue.Message) error {
	if err := queue.CheckDelay(m.Delay); err != nil {
		return fmt.Errorf("rest: %w", err)
	}
	if !json.Valid(m.Body) {
		return errors.New("rest: a message body must be a JSON document: the REST queue carries JSON payloads")
	}
	if len(m.Key) > wire.MaxIdempotencyKeyBytes {
		return fmt.Errorf("rest: a key of %d bytes exceeds the contract's %d", len(m.Key), wire.MaxIdempotencyKeyBytes)
	}
	return nil
}

// Receive consumes up to max (at most wire.MaxConsumeMessages) messages,
// long-polling up to wait and hiding them for visibility (0 = the server's
// default visibility timeout).
func (c *Client) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	if err := queue.CheckReceive(max, wait, visibility); err != nil {
		return nil, fmt.Errorf("rest: %w", err)
	}
	msgs, err := c.Consume(ctx, ConsumeOptions{
		MaxMessages: min(max, wire.MaxConsumeMessages), Wait: wait, VisibilityTimeout: visibility,
	})
	if err != nil {
		return nil, err
	}
	out := make([]queue.Delivery, len(msgs))
	for i, m := range msgs {
		out[i] = queue.Delivery{
			ID:           m.MessageID,
			Receipt:      m.MessageID + receiptSep + strconv.Itoa(m.ReceiveCount),
			Key:          m.IdempotencyKey,
			Body:         m.Payload,
			ReceiveCount: m.ReceiveCount,
			PublishedAt:  m.PublishedAt,
		}
	}
	return out, nil
}

// messageID is the message id a receipt names.
func messageID(receipt string) string {
	if i := strings.LastIndex(receipt, receiptSep); i >= 0 {
		return receipt[:i]
	}
	return receipt
}

// Ack acks the receipts' messages, wire.MaxIDs per request. An unknown or
// already-acked message is not an error.
func (c *Client) Ack(ctx context.Context, receipts ...string) error {
	ids := make([]string, len(receipts))
	for i, r := range receipts {
		ids[i] = messageID(r)
	}
	_, err := inChunks(ids, func(chunk []string) (int, error) { return c.AckIDs(ctx, chunk...) })
	return err
}

// ChangeVisibility extends the message's invisibility to d from now; for 0
// it nacks the message back at once. A message no longer in flight is not
// an error.
func (c *Client) ChangeVisibility(ctx context.Context, receipt string, d time.Duration) error {
	if err := queue.CheckVisibility(d); err != nil {
		return fmt.Errorf("rest: %w", err)
	}
	var err error
	if d == 0 {
		_, err = c.Nack(ctx, messageID(receipt), NackOptions{})
	} else {
		_, err = c.Extend(ctx, messageID(receipt), d)
	}
	if notFound(err) {
		return nil
	}
	return err
}

// DeadLetter moves the message to the queue's dead letters with the reason
// (the queue keeps it as the last error). A message no longer in flight
// (acked, or dead-lettered already) is not an error: nothing is left to
// move.
func (c *Client) DeadLetter(ctx context.Context, d queue.Delivery, reason string) error {
	if reason == "" {
		// The contract requires a reason with dead_letter.
		reason = "dead-lettered by owed"
	}
	_, err := c.Nack(ctx, messageID(d.Receipt), NackOptions{DeadLetter: true, Reason: reason})
	if notFound(err) {
		return nil
	}
	return err
}

// DeadLetters lists up to limit (at most wire.MaxDeadLetterPage; 0 = the
// server's page) dead letters, oldest first, from cursor.
func (c *Client) DeadLetters(ctx context.Context, limit int, cursor string) ([]queue.DeadLetter, string, error) {
	page, err := c.ListDeadLetters(ctx, DeadLetterQuery{Limit: min(max(limit, 0), wire.MaxDeadLetterPage), Cursor: cursor})
	if err != nil {
		return nil, "", err
	}
	out := make([]queue.DeadLetter, len(page.DeadLetters))
	for i, d := range page.DeadLetters {
		out[i] = queue.DeadLetter{ID: d.MessageID, Key: d.IdempotencyKey, Reason: d.LastError, Body: d.Payload,
			DeadLetteredAt: d.DeadLetteredAt}
	}
	return out, page.NextCursor, nil
}

// Redrive moves the named dead letters back to the queue, with their
// receive count reset, wire.MaxIDs per request.
func (c *Client) Redrive(ctx context.Context, ids ...string) (int, error) {
	return inChunks(ids, func(chunk []string) (int, error) {
		return c.redrive(ctx, wire.RedriveRequest{QueueRef: c.ref(), MessageIDs: chunk})
	})
}

// DeleteDeadLetters removes the named dead letters for good, wire.MaxIDs
// per request.
func (c *Client) DeleteDeadLetters(ctx context.Context, ids ...string) (int, error) {
	return inChunks(ids, func(chunk []string) (int, error) {
		out, err := send[wire.DeleteDeadLettersResponse](ctx, c, post("delete_dead_letters", "/queue/dead_letters/delete",
			wire.DeleteDeadLettersRequest{QueueRef: c.ref(), MessageIDs: chunk}))
		return out.Deleted, err
	})
}

// Stats reads the queue's depths.
func (c *Client) Stats(ctx context.Context) (queue.Stats, error) {
	st, err := send[wire.Stats](ctx, c, get("stats", "/queue/stats", c.query()))
	return queue.Stats{Visible: st.Visible, InFlight: st.InFlight, Delayed: st.Delayed, DeadLetterDepth: st.DeadLetterDepth,
		OldestAge: time.Duration(st.OldestAgeSeconds * float64(time.Second))}, err
}

// Close releases the client's idle connections. It is safe to call twice.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// inChunks runs do over ids, wire.MaxIDs at a time, and sums its counts; no
// ids make no request.
func inChunks(ids []string, do func([]string) (int, error)) (int, error) {
	total := 0
	for start := 0; start < len(ids); start += wire.MaxIDs {
		n, err := do(ids[start:min(start+wire.MaxIDs, len(ids))])
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// notFound reports the contract's 404: the message is not where the call
// looked for it.
func notFound(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound
}
