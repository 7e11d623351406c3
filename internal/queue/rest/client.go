package rest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/queue/wire"
)

// How the client's HTTP connections and retries are bounded.
const (
	// requestTimeout bounds one HTTP exchange beyond its long-poll wait: the
	// HTTP client's timeout is this plus the longest wait.
	requestTimeout = 30 * time.Second
	// retryBudget bounds the retries of a call whose context has no
	// deadline, so "retry until it works" cannot hang a caller forever.
	retryBudget = 2 * time.Minute
	// maxIdleConns is how many keep-alive connections the client holds to
	// the queue. Go's default of 2 per host makes a worker pool reconnect on
	// almost every consume.
	maxIdleConns = 64
)

// Status values of one PublishBatch entry.
const (
	StatusCreated      = wire.StatusCreated
	StatusDeduplicated = wire.StatusDeduplicated
	StatusFailed       = wire.StatusFailed
)

// Entry is one message to publish on the wire. A retry of the same intent
// must reuse its IdempotencyKey: within the queue's dedup window (24 h by
// default) the same key returns the original message id and enqueues
// nothing.
type Entry struct {
	Payload        json.RawMessage
	IdempotencyKey string
	// Delay keeps the message invisible this long after publishing; it is
	// rounded up to whole seconds so a message never surfaces early.
	Delay time.Duration
}

type (
	// PublishResponse is the queue's answer to one PublishOne.
	PublishResponse = wire.PublishResponse
	// BatchResult is the outcome of one PublishBatch entry: Status is one of
	// StatusCreated, StatusDeduplicated or StatusFailed (with a Reason).
	BatchResult = wire.BatchResult
	// Delivery is one consumed message as the wire carries it.
	Delivery = wire.Message
	// DeadLetter is one dead-lettered message as the wire carries it.
	DeadLetter = wire.DeadLetter
)

// ConsumeOptions shape one Consume. Zero values take the server's defaults
// (one message, no wait, its default visibility timeout).
type ConsumeOptions struct {
	MaxMessages int
	// Wait is the long-poll wait, at most 20 s.
	Wait time.Duration
	// VisibilityTimeout is how long a delivered message stays hidden from
	// other consumers before it is delivered again, at most 12 h.
	VisibilityTimeout time.Duration
}

// NackOptions shape one Nack.
type NackOptions struct {
	// Delay is how long the message stays invisible before it returns.
	Delay time.Duration
	// CountAsFailure counts this delivery toward the queue's own
	// dead-lettering. owed never relies on an uncounted nack (real queues
	// count every receive); ChangeVisibility sends false only because the
	// contract requires the field.
	CountAsFailure bool
	// DeadLetter moves the message straight to the dead letters, with Reason.
	DeadLetter bool
	// Reason is kept as the message's last error.
	Reason string
}

// DeadLetterQuery selects one page of dead letters.
type DeadLetterQuery struct {
	Limit  int
	Cursor string
	// IDs restricts the page to these message ids.
	IDs []string
}

// DeadLetterPage is one page of dead letters; NextCursor is empty on the
// last page.
type DeadLetterPage struct {
	DeadLetters []DeadLetter
	NextCursor  string
}

// Client talks to one queue of the REST queue. It is safe for concurrent
// use. Its queue.Queue methods are in queue.go; the methods here are the
// contract's own operations, which the contract suite and the emulator's
// tests call directly.
type Client struct {
	base  string
	token string
	queue string
	http  *http.Client
	log   zerolog.Logger
}

// Option changes a Client built by New.
type Option func(*Client)

// WithLogger logs retries (at debug level) to l.
func WithLogger(l zerolog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client for cfg.Name at cfg.URL.
func New(cfg Config, opts ...Option) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{
		base:  strings.TrimRight(cfg.URL, "/"),
		token: cfg.Token,
		queue: cfg.Name,
		log:   zerolog.Nop(),
		http: &http.Client{
			Timeout: requestTimeout + wire.MaxWaitSeconds*time.Second,
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:        maxIdleConns,
				MaxIdleConnsPerHost: maxIdleConns,
				IdleConnTimeout:     90 * time.Second,
				TLSHandshakeTimeout: 10 * time.Second,
				ForceAttemptHTTP2:   true,
			},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Name is the name of the queue this client works on.
func (c *Client) Name() string { return c.queue }

// ref names the client's queue in a request body.
func (c *Client) ref() wire.QueueRef { return wire.QueueRef{Queue: c.queue} }

// PublishOne enqueues one message, or returns the original message's id
// with Deduplicated set when its key was seen within the dedup window.
func (c *Client) PublishOne(ctx context.Context, m Entry) (PublishResponse, error) {
	cl := post("publish", "/queue/publish", wire.PublishRequest{QueueRef: c.ref(), Payload: m.Payload, DelaySeconds: seconds(m.Delay)})
	cl.header = http.Header{wire.IdempotencyKeyHeader: {m.IdempotencyKey}}
	return send[PublishResponse](ctx, c, cl)
}

// PublishBatch publishes msgs in requests of at most the server's batch
// limit and returns one result per message, in order. An entry the server
// rejects is a result with StatusFailed, not an error. When a request fails,
// the results cover the messages before it and the error says why.
func (c *Client) PublishBatch(ctx context.Context, msgs []Entry) ([]BatchResult, error) {
	results := make([]BatchResult, 0, len(msgs))
	for start := 0; start < len(msgs); start += wire.MaxBatch {
		chunk := msgs[start:min(start+wire.MaxBatch, len(msgs))]
		req := wire.PublishBatchRequest{QueueRef: c.ref(), Messages: make([]wire.BatchEntry, len(chunk))}
		for i, m := range chunk {
			req.Messages[i] = wire.BatchEntry{Payload: m.Payload, IdempotencyKey: m.IdempotencyKey, DelaySeconds: seconds(m.Delay)}
		}
		out, err := send[wire.PublishBatchResponse](ctx, c, post("publish_batch", "/queue/publish_batch", req))
		if err != nil {
			return results, err
		}
		if len(out.Results) != len(chunk) {
			return results, fmt.Errorf("queue publish_batch: the server answered %d results for %d messages", len(out.Results), len(chunk))
		}
		results = append(results, out.Results...)
	}
	return results, nil
}

// Consume receives up to o.MaxMessages messages, waiting up to o.Wait for
// the first one. It returns an empty slice when the wait ends with none.
func (c *Client) Consume(ctx context.Context, o ConsumeOptions) ([]Delivery, error) {
	out, err := send[wire.ConsumeResponse](ctx, c, post("consume", "/queue/consume", wire.ConsumeRequest{
		QueueRef: c.ref(), MaxMessages: o.MaxMessages,
		WaitSeconds: seconds(o.Wait), VisibilityTimeoutSeconds: seconds(o.VisibilityTimeout),
	}))
	return out.Messages, err
}

// AckIDs removes messages for good. Acking an unknown or already-acked id
// is not an error; the count says how many were still queued.
func (c *Client) AckIDs(ctx context.Context, ids ...string) (int, error) {
	out, err := send[wire.AckResponse](ctx, c, post("ack", "/queue/ack", wire.AckRequest{QueueRef: c.ref(), MessageIDs: ids}))
	return out.Acked, err
}

// Nack returns a delivered message to the queue after o.Delay, or to the
// dead letters. It reports whether the message was dead-lettered.
func (c *Client) Nack(ctx context.Context, id string, o NackOptions) (bool, error) {
	req := wire.NackRequest{QueueRef: c.ref(), MessageID: id, DelaySeconds: seconds(o.Delay), DeadLetter: o.DeadLetter, Reason: o.Reason}
	if !o.DeadLetter {
		req.CountAsFailure = &o.CountAsFailure
	}
	out, err := send[wire.NackResponse](ctx, c, post("nack", "/queue/nack", req))
	return out.DeadLettered, err
}

// Extend keeps a delivered message invisible for visibility from now: the
// heartbeat of a slow send.
func (c *Client) Extend(ctx context.Context, id string, visibility time.Duration) (time.Time, error) {
	out, err := send[wire.ExtendResponse](ctx, c, post("extend", "/queue/extend",
		wire.ExtendRequest{QueueRef: c.ref(), MessageID: id, VisibilityTimeoutSeconds: seconds(visibility)}))
	return out.VisibleAt, err
}

// ListDeadLetters lists one page of the queue's dead letters, oldest first.
func (c *Client) ListDeadLetters(ctx context.Context, q DeadLetterQuery) (DeadLetterPage, error) {
	v := c.query()
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if len(q.IDs) > 0 {
		v.Set("ids", strings.Join(q.IDs, ","))
	}
	out, err := send[wire.DeadLettersResponse](ctx, c, get("dead_letters", "/queue/dead_letters", v))
	return DeadLetterPage{DeadLetters: out.DeadLetters, NextCursor: out.NextCursor}, err
}

// DeadLetterByID returns one dead letter; a message that is not
// dead-lettered is an *APIError with Status 404.
func (c *Client) DeadLetterByID(ctx context.Context, id string) (DeadLetter, error) {
	return send[DeadLetter](ctx, c, get("dead_letter", "/queue/dead_letters/"+url.PathEscape(id), c.query()))
}

// RedriveAll moves every dead letter of the queue back to it.
func (c *Client) RedriveAll(ctx context.Context) (int, error) {
	return c.redrive(ctx, wire.RedriveRequest{QueueRef: c.ref(), All: true})
}

func (c *Client) redrive(ctx context.Context, req wire.RedriveRequest) (int, error) {
	out, err := send[wire.RedriveResponse](ctx, c, post("redrive", "/queue/dead_letters/redrive", req))
	return out.Redriven, err
}

// query names the client's queue in a GET's query string.
func (c *Client) query() url.Values { return url.Values{"queue": {c.queue}} }

// seconds rounds d up to whole seconds: a delay or timeout is never shorter
// than asked.
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(math.Ceil(d.Seconds()))
}
