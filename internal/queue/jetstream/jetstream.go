// Package jetstream is owed's queue on NATS JetStream: a WorkQueue stream, a
// durable pull consumer the workers share, and a second stream for dead
// letters.
//
// It maps the queue contract (queue.Queue) onto JetStream:
//   - a per-message delay is a native message schedule (nats-server 2.12+):
//     the message waits on its own subject Subject.delayed.<id> and the
//     server publishes it to Subject at its due second;
//   - a receipt is the message's ack subject, so Ack and ChangeVisibility
//     work from a string in any process;
//   - visibility is the consumer's AckWait, and any other visibility, an
//     extension or a return after a delay is a NAK with that delay, which
//     keeps the message in flight for exactly that long, past AckWait too
//     (a +WPI would only restart AckWait);
//   - MaxDeliver is unlimited: the ledger counts attempts and decides dead
//     letters, never the server.
//
// The package never decides a message is dead by itself, and never acks a
// message it has not been told to ack or dead-letter.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/owedhq/owed/internal/queue"
)

// Headers owed sets on its messages.
const (
	HeaderID          = "Owed-Id"
	HeaderKey         = "Owed-Key"
	HeaderReason      = "Owed-Reason"
	HeaderPublishedAt = "Owed-Published-At"
)

// Client is one connection to the queue. It is safe for concurrent use.
type Client struct {
	cfg    Config
	nc     *nats.Conn
	js     natsjs.JetStream
	stream natsjs.Stream
	dead   natsjs.Stream
	cons   natsjs.Consumer

	closeOnce sync.Once
}

var _ queue.Queue = (*Client)(nil)

// New connects to cfg.URL and binds the streams and the consumer (creating
// them first when cfg.Provision is set). A wrong setting fails here, naming
// the field.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name("owed"), nats.MaxReconnects(-1)}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s (OWED_NATS_URL): %w", redactURLs(cfg.URL), err)
	}
	js, err := natsjs.New(nc,
		natsjs.WithDefaultTimeout(DefaultRequestTimeout),
		natsjs.WithPublishAsyncTimeout(DefaultRequestTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	c := &Client{cfg: cfg, nc: nc, js: js}
	if c.stream, c.dead, c.cons, err = bind(ctx, js, cfg); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the connection. It is safe to call twice.
func (c *Client) Close() error {
	c.closeOnce.Do(c.nc.Close)
	return nil
}

// Publish publishes msgs pipelined and waits for every acknowledgement. A
// message with a Key carries it as Nats-Msg-Id, so the stream drops a
// repeat within its duplicate window; the result then names the original.
func (c *Client) Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error) {
	res := make([]queue.PublishResult, len(msgs))
	futures := make([]natsjs.PubAckFuture, len(msgs))
	now := c.cfg.Clock.Now()
	for i, m := range msgs {
		if err := queue.CheckDelay(m.Delay); err != nil {
			res[i].Err = fmt.Errorf("jetstream: %w", err)
			continue
		}
		id := nuid.Next()
		msg := message(c.cfg.Subject, id, m.Key, m.Body)
		opts := []natsjs.PublishOpt{natsjs.WithExpectStream(c.cfg.Stream)}
		if m.Key != "" {
			opts = append(opts, natsjs.WithMsgID(m.Key))
		}
		if m.Delay > 0 {
			// A schedule names a whole second; round up so the message
			// never surfaces early.
			at := now.Add(m.Delay)
			if t := at.Truncate(time.Second); !t.Equal(at) {
				at = t.Add(time.Second)
			}
			msg.Subject = c.cfg.delayedSubject(id)
			msg.Header.Set(HeaderPublishedAt, now.Format(time.RFC3339Nano))
			opts = append(opts, natsjs.WithScheduleAt(at), natsjs.WithScheduleTarget(c.cfg.Subject))
		}
		f, err := c.js.PublishMsgAsync(msg, opts...)
		if err != nil {
			res[i].Err = fmt.Errorf("jetstream: publish: %w", err)
			continue
		}
		futures[i], res[i].ID = f, id
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				res[i].ID = c.originalID(ctx, ack.Sequence, res[i].ID)
				res[i].Deduplicated = true
			}
		case err := <-f.Err():
			res[i] = queue.PublishResult{Err: fmt.Errorf("jetstream: publish: %w", err)}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return res, nil
}

// message builds a message owed publishes, with its id and key headers.
func message(subject, id, key string, body []byte) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(HeaderID, id)
	if key != "" {
		msg.Header.Set(HeaderKey, key)
	}
	return msg
}

// originalID reads the id of the message a deduplicated publish matched;
// when that message is gone already (consumed), the fresh id stands.
func (c *Client) originalID(ctx context.Context, seq uint64, fresh string) string {
	m, err := c.stream.GetMsg(ctx, seq)
	if err != nil {
		return fresh
	}
	if id := m.Header.Get(HeaderID); id != "" {
		return id
	}
	return fresh
}

// Receive returns up to max messages, waiting at most wait for the first.
// A JetStream fetch would wait for the whole batch, so Receive takes what is
// there, waits for one message only when nothing is, and then tops up.
func (c *Client) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	if err := queue.CheckReceive(max, wait, visibility); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	msgs, err := c.fetch(ctx, max, 0)
	if err == nil && len(msgs) == 0 && wait > 0 {
		if msgs, err = c.fetch(ctx, 1, wait); err == nil && len(msgs) == 1 && max > 1 {
			var more []natsjs.Msg
			more, err = c.fetch(ctx, max-1, 0)
			msgs = append(msgs, more...)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: receive: %w", err)
	}
	if visibility > 0 && visibility != c.cfg.AckWait {
		// Every message arrived hidden for AckWait; a NAK with a delay sets
		// its visibility to exactly what the caller asked for.
		for _, m := range msgs {
			if err := c.nc.Publish(m.Reply(), nakDelay(visibility)); err != nil {
				return nil, fmt.Errorf("jetstream: set visibility: %w", err)
			}
		}
		rctx, cancel := requestContext(ctx)
		err := c.nc.FlushWithContext(rctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("jetstream: set visibility: %w", err)
		}
	}
	out := make([]queue.Delivery, 0, len(msgs))
	for _, m := range msgs {
		d, err := delivery(m)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// fetch pulls up to n messages, waiting at most wait (0 = take only what
// is there).
func (c *Client) fetch(ctx context.Context, n int, wait time.Duration) ([]natsjs.Msg, error) {
	var batch natsjs.MessageBatch
	var err error
	if wait == 0 {
		batch, err = c.cons.FetchNoWait(n)
	} else {
		batch, err = c.cons.Fetch(n, natsjs.FetchMaxWait(wait))
	}
	if err != nil {
		return nil, err
	}
	var msgs []natsjs.Msg
	for {
		select {
		case m, ok := <-batch.Messages():
			if !ok {
				return msgs, batch.Error()
			}
			msgs = append(msgs, m)
		case <-ctx.Done():
			// What arrived stays in flight until its AckWait runs out.
			return nil, ctx.Err()
		}
	}
}

func delivery(m natsjs.Msg) (queue.Delivery, error) {
	md, err := m.Metadata()
	if err != nil {
		return queue.Delivery{}, fmt.Errorf("jetstream: message metadata: %w", err)
	}
	h := m.Headers()
	d := queue.Delivery{
		ID:           h.Get(HeaderID),
		Receipt:      m.Reply(),
		Key:          h.Get(HeaderKey),
		Body:         m.Data(),
		ReceiveCount: int(md.NumDelivered),
		PublishedAt:  md.Timestamp.UTC(),
	}
	if d.ID == "" {
		// Published by something other than owed: the stream sequence is
		// its id.
		d.ID = strconv.FormatUint(md.Sequence.Stream, 10)
	}
	if at, err := time.Parse(time.RFC3339Nano, h.Get(HeaderPublishedAt)); err == nil {
		d.PublishedAt = at.UTC()
	}
	return d, nil
}

// Ack acks each receipt and waits for the server to confirm. A receipt of a
// message that is no longer in flight (acked, or redelivered to another
// worker) is confirmed like any other: a stale receipt is not an error.
// JetStream acks by stream sequence, so a stale receipt of a message now
// redelivered elsewhere acks it there too.
func (c *Client) Ack(ctx context.Context, receipts ...string) error {
	for _, r := range receipts {
		if err := c.reply(ctx, r, []byte("+ACK")); err != nil {
			return err
		}
	}
	return nil
}

// ChangeVisibility hides the message for d from now (0 = redeliver now). It
// is a NAK with a delay: the message stays in flight, the holder can still
// ack it, and d may exceed AckWait.
func (c *Client) ChangeVisibility(ctx context.Context, receipt string, d time.Duration) error {
	if err := queue.CheckVisibility(d); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	payload := []byte("-NAK")
	if d > 0 {
		payload = nakDelay(d)
	}
	return c.reply(ctx, receipt, payload)
}

func nakDelay(d time.Duration) []byte {
	return fmt.Appendf(nil, `-NAK {"delay":%d}`, d.Nanoseconds())
}

// reply sends an acknowledgement to a receipt and waits for the server's
// confirmation.
func (c *Client) reply(ctx context.Context, receipt string, payload []byte) error {
	if err := c.ownReceipt(receipt); err != nil {
		return err
	}
	rctx, cancel := requestContext(ctx)
	defer cancel()
	if _, err := c.nc.RequestWithContext(rctx, receipt, payload); err != nil {
		return fmt.Errorf("jetstream: %s: %w", strings.Fields(string(payload))[0], err)
	}
	return nil
}

// ownReceipt refuses a string that is not an ack subject of this consumer:
// a receipt is published to, so it must never be an arbitrary subject.
// Ack subjects are $JS.ACK.<stream>.<consumer>.… (7 tokens after $JS.ACK)
// or, with a domain and account, $JS.ACK.<domain>.<account>.<stream>.<consumer>.….
func (c *Client) ownReceipt(receipt string) error {
	toks := strings.Split(receipt, ".")
	var stream, consumer string
	switch {
	case len(toks) < 9 || toks[0] != "$JS" || toks[1] != "ACK":
	case len(toks) == 9:
		stream, consumer = toks[2], toks[3]
	case len(toks) >= 11:
		stream, consumer = toks[4], toks[5]
	}
	if stream != c.cfg.Stream || consumer != c.cfg.Consumer {
		return fmt.Errorf("jetstream: %q is not a receipt of consumer %s on stream %s", receipt, c.cfg.Consumer, c.cfg.Stream)
	}
	return nil
}

// requestContext bounds a request whose context has no deadline.
func requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultRequestTimeout)
}

// notFound reports a stream message that does not exist (any more). A get
// says so with its own error; a delete fails with ErrMsgDeleteUnsuccessful
// whose text alone carries the server's error (code 10057, "no message
// found"), so that is what is matched.
func notFound(err error) bool {
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return true
	}
	return errors.Is(err, natsjs.ErrMsgDeleteUnsuccessful) &&
		strings.Contains(err.Error(), "err_code=10057") && strings.Contains(err.Error(), "no message found")
}

// redactURLs drops the user information from each of the comma-separated
// server URLs, so a password in OWED_NATS_URL never reaches a log.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(unparsable URL)"
			continue
		}
		if u.User != nil {
			u.User = url.User("REDACTED")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
