package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/queue/wire"
	"github.com/owedhq/owed/internal/retryafter"
)

const (
	// DefaultRequestTimeout bounds one HTTP exchange beyond its long-poll
	// wait: the HTTP client's timeout is this plus the longest wait.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultRetryBudget bounds the retries of a call whose context has no
	// deadline, so "retry until it works" cannot hang a caller forever.
	DefaultRetryBudget = 2 * time.Minute
	// DefaultMaxIdleConns is how many keep-alive connections the default
	// HTTP client holds to the queue. Go's default of 2 per host makes a
	// worker pool reconnect on almost every consume.
	DefaultMaxIdleConns = 64

	backoffInitial = 100 * time.Millisecond
	backoffMax     = 5 * time.Second
	// maxErrorBody bounds how much of an error response we read.
	maxErrorBody = 64 << 10
)

// Status values of one PublishBatch entry.
const (
	StatusCreated      = wire.StatusCreated
	StatusDeduplicated = wire.StatusDeduplicated
	StatusFailed       = wire.StatusFailed
)

// Message is one message to publish. A retry of the same intent must reuse
// its IdempotencyKey: within the queue's dedup window (24 h by default) the
// same key returns the original message id and enqueues nothing.
type Message struct {
	Payload        json.RawMessage
	IdempotencyKey string
	// Delay keeps the message invisible this long after publishing; it is
	// rounded up to whole seconds so a message never surfaces early.
	Delay time.Duration
}

type (
	// PublishResult is the queue's answer to a publish.
	PublishResult = wire.PublishResponse
	// BatchResult is the outcome of one PublishBatch entry: Status is one of
	// StatusCreated, StatusDeduplicated or StatusFailed (with a Reason).
	BatchResult = wire.BatchResult
	// Delivery is one consumed message.
	Delivery = wire.Message
	// DeadLetter is one dead-lettered message.
	DeadLetter = wire.DeadLetter
	// Stats are a queue's depths.
	Stats = wire.Stats
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
	// CountAsFailure counts this delivery toward dead-lettering. A provider
	// 429 is not a failure of the message: pass false.
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

// Client talks to one queue of the REST queue. It is safe for concurrent use.
type Client struct {
	base        string
	token       string
	queue       string
	http        *http.Client
	retryBudget time.Duration
	log         zerolog.Logger
}

// Option changes a Client built by New.
type Option func(*Client)

// WithHTTPClient replaces the HTTP client. Its Timeout must exceed the
// longest long-poll wait (20 s) or consumes with a wait will time out.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetryBudget bounds retries of calls whose context has no deadline.
func WithRetryBudget(d time.Duration) Option { return func(c *Client) { c.retryBudget = d } }

// WithLogger logs retries (at debug level) to l.
func WithLogger(l zerolog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client for cfg.Name at cfg.URL.
func New(cfg Config, opts ...Option) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{
		base:        strings.TrimRight(cfg.URL, "/"),
		token:       cfg.Token,
		queue:       cfg.Name,
		retryBudget: DefaultRetryBudget,
		log:         zerolog.Nop(),
		http: &http.Client{
			Timeout: DefaultRequestTimeout + wire.MaxWaitSeconds*time.Second,
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:        DefaultMaxIdleConns,
				MaxIdleConnsPerHost: DefaultMaxIdleConns,
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

// Queue is the name of the queue this client works on.
func (c *Client) Queue() string { return c.queue }

// WithQueue returns a client sharing c's connections that works on another
// queue.
func (c *Client) WithQueue(name string) *Client {
	cc := *c
	cc.queue = name
	return &cc
}

// Publish enqueues one message, or returns the original message's id with
// Deduplicated set when its key was seen within the dedup window.
func (c *Client) Publish(ctx context.Context, m Message) (PublishResult, error) {
	var out PublishResult
	err := c.do(ctx, call{
		op: "publish", method: http.MethodPost, path: "/queue/publish",
		header: http.Header{wire.IdempotencyKeyHeader: {m.IdempotencyKey}},
		body:   wire.PublishRequest{Queue: c.queue, Payload: m.Payload, DelaySeconds: seconds(m.Delay)},
	}, &out)
	return out, err
}

// PublishBatch publishes msgs in requests of at most the server's batch
// limit and returns one result per message, in order. An entry the server
// rejects is a result with StatusFailed, not an error. When a request fails,
// the results cover the messages before it and the error says why.
func (c *Client) PublishBatch(ctx context.Context, msgs []Message) ([]BatchResult, error) {
	results := make([]BatchResult, 0, len(msgs))
	for start := 0; start < len(msgs); start += wire.MaxBatch {
		chunk := msgs[start:min(start+wire.MaxBatch, len(msgs))]
		req := wire.PublishBatchRequest{Queue: c.queue, Messages: make([]wire.BatchEntry, len(chunk))}
		for i, m := range chunk {
			req.Messages[i] = wire.BatchEntry{Payload: m.Payload, IdempotencyKey: m.IdempotencyKey, DelaySeconds: seconds(m.Delay)}
		}
		var out wire.PublishBatchResponse
		if err := c.do(ctx, call{op: "publish_batch", method: http.MethodPost, path: "/queue/publish_batch", body: req}, &out); err != nil {
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
	var out wire.ConsumeResponse
	err := c.do(ctx, call{
		op: "consume", method: http.MethodPost, path: "/queue/consume",
		body: wire.ConsumeRequest{
			Queue: c.queue, MaxMessages: o.MaxMessages,
			WaitSeconds: seconds(o.Wait), VisibilityTimeoutSeconds: seconds(o.VisibilityTimeout),
		},
	}, &out)
	return out.Messages, err
}

// Ack removes messages for good. Acking an unknown or already-acked id is
// not an error; the count says how many were still queued.
func (c *Client) Ack(ctx context.Context, ids ...string) (int, error) {
	var out wire.AckResponse
	err := c.do(ctx, call{op: "ack", method: http.MethodPost, path: "/queue/ack",
		body: wire.AckRequest{Queue: c.queue, MessageIDs: ids}}, &out)
	return out.Acked, err
}

// Nack returns a delivered message to the queue after o.Delay, or to the
// dead letters. It reports whether the message was dead-lettered.
func (c *Client) Nack(ctx context.Context, id string, o NackOptions) (bool, error) {
	var out wire.NackResponse
	req := wire.NackRequest{Queue: c.queue, MessageID: id, DelaySeconds: seconds(o.Delay), DeadLetter: o.DeadLetter, Reason: o.Reason}
	if !o.DeadLetter {
		req.CountAsFailure = &o.CountAsFailure
	}
	err := c.do(ctx, call{op: "nack", method: http.MethodPost, path: "/queue/nack", body: req}, &out)
	return out.DeadLettered, err
}

// Extend keeps a delivered message invisible for visibility from now: the
// heartbeat of a slow send.
func (c *Client) Extend(ctx context.Context, id string, visibility time.Duration) (time.Time, error) {
	var out wire.ExtendResponse
	err := c.do(ctx, call{op: "extend", method: http.MethodPost, path: "/queue/extend",
		body: wire.ExtendRequest{Queue: c.queue, MessageID: id, VisibilityTimeoutSeconds: seconds(visibility)}}, &out)
	return out.VisibleAt, err
}

// DeadLetters lists one page of the queue's dead letters, oldest first.
func (c *Client) DeadLetters(ctx context.Context, q DeadLetterQuery) (DeadLetterPage, error) {
	v := url.Values{"queue": {c.queue}}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if len(q.IDs) > 0 {
		v.Set("ids", strings.Join(q.IDs, ","))
	}
	var out wire.DeadLettersResponse
	err := c.do(ctx, call{op: "dead_letters", method: http.MethodGet, path: "/queue/dead_letters", query: v}, &out)
	return DeadLetterPage{DeadLetters: out.DeadLetters, NextCursor: out.NextCursor}, err
}

// DeadLetter returns one dead letter; a message that is not dead-lettered is
// an *APIError with Status 404.
func (c *Client) DeadLetter(ctx context.Context, id string) (DeadLetter, error) {
	var out DeadLetter
	err := c.do(ctx, call{op: "dead_letter", method: http.MethodGet,
		path: "/queue/dead_letters/" + url.PathEscape(id), query: url.Values{"queue": {c.queue}}}, &out)
	return out, err
}

// Redrive moves the given dead letters back to the queue with their receive
// count reset, and reports how many moved.
func (c *Client) Redrive(ctx context.Context, ids ...string) (int, error) {
	return c.redrive(ctx, wire.RedriveRequest{Queue: c.queue, MessageIDs: ids})
}

// RedriveAll moves every dead letter of the queue back to it.
func (c *Client) RedriveAll(ctx context.Context) (int, error) {
	return c.redrive(ctx, wire.RedriveRequest{Queue: c.queue, All: true})
}

func (c *Client) redrive(ctx context.Context, req wire.RedriveRequest) (int, error) {
	var out wire.RedriveResponse
	err := c.do(ctx, call{op: "redrive", method: http.MethodPost, path: "/queue/dead_letters/redrive", body: req}, &out)
	return out.Redriven, err
}

// DeleteDeadLetters removes the given dead letters for good.
func (c *Client) DeleteDeadLetters(ctx context.Context, ids ...string) (int, error) {
	var out wire.DeleteDeadLettersResponse
	err := c.do(ctx, call{op: "delete_dead_letters", method: http.MethodPost, path: "/queue/dead_letters/delete",
		body: wire.DeleteDeadLettersRequest{Queue: c.queue, MessageIDs: ids}}, &out)
	return out.Deleted, err
}

// Stats returns the queue's depths.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	err := c.do(ctx, call{op: "stats", method: http.MethodGet, path: "/queue/stats", query: url.Values{"queue": {c.queue}}}, &out)
	return out, err
}

// seconds rounds d up to whole seconds: a delay or timeout is never shorter
// than asked.
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(math.Ceil(d.Seconds()))
}

// call is one logical request; do may send it several times.
type call struct {
	op     string
	method string
	path   string
	query  url.Values
	header http.Header
	body   any
}

// permanentError marks a failure that a retry cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// do sends cl, retrying throttling (after Retry-After), other 5xx and
// network errors (exponential backoff with jitter) while the caller's
// deadline, or DefaultRetryBudget without one, leaves room for the wait. It
// decodes the {"data": …} of a success into out.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	var body []byte
	if cl.body != nil {
		var err error
		if body, err = json.Marshal(cl.body); err != nil {
			return fmt.Errorf("queue %s: encode request: %w", cl.op, err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.retryBudget)
		defer cancel()
	}
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(backoffInitial),
		backoff.WithMaxInterval(backoffMax),
		// The context's deadline is the budget, not an elapsed-time cap.
		backoff.WithMaxElapsedTime(0),
	)
	for attempt := 1; ; attempt++ {
		err := c.once(ctx, cl, body, out)
		if err == nil {
			return nil
		}
		var perm permanentError
		if errors.As(err, &perm) || ctx.Err() != nil {
			return err
		}
		wait := bo.NextBackOff()
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			switch {
			case apiErr.Status == http.StatusTooManyRequests || apiErr.Status == http.StatusServiceUnavailable:
				if apiErr.RetryAfter > 0 {
					// A little jitter so a pool of workers throttled together
					// does not return together.
					wait = apiErr.RetryAfter + rand.N(apiErr.RetryAfter/10+time.Millisecond)
				}
			case apiErr.Status >= 500:
			default:
				return err
			}
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return err
		}
		c.log.Debug().Str("op", cl.op).Int("attempt", attempt).Dur("wait", wait).Err(err).Msg("queue: retrying")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// once sends cl a single time.
func (c *Client) once(ctx context.Context, cl call, body []byte, out any) error {
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, rd)
	if err != nil {
		return permanentError{fmt.Errorf("queue %s: build request: %w", cl.op, err)}
	}
	for k, vs := range cl.header {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		// net/http errors name the URL, never the headers, so the token stays out.
		return fmt.Errorf("queue %s: %w", cl.op, err)
	}
	defer func() {
		// Draining lets the connection go back to the pool.
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		env := wire.Data[any]{Data: out}
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("queue %s: read response: %w", cl.op, err)
			}
			return permanentError{fmt.Errorf("queue %s: decode HTTP %d response: %w", cl.op, resp.StatusCode, err)}
		}
		return nil
	}
	apiErr := &APIError{Op: cl.op, Status: resp.StatusCode}
	var eb wire.ErrorBody
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
		apiErr.Code, apiErr.Message, apiErr.Retryable = eb.Error.Code, eb.Error.Message, eb.Error.Retryable
	} else {
		// Not the contract's error shape (a proxy's page, say): keep the
		// status and do not echo an unknown body into logs.
		apiErr.Code = "http_" + strconv.Itoa(resp.StatusCode)
		apiErr.Message = http.StatusText(resp.StatusCode)
		apiErr.Retryable = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	}
	if d, ok := retryafter.Parse(resp.Header.Get("Retry-After"), time.Now(), retryafter.DefaultMax); ok {
		apiErr.RetryAfter = d
	}
	return apiErr
}
