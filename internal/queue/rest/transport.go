package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/owedhq/owed/internal/queue/wire"
	"github.com/owedhq/owed/internal/retryafter"
)

// This file is the client's transport: one logical call, its retries, and
// the decoding of the contract's success and error bodies.

const (
	backoffInitial = 100 * time.Millisecond
	backoffMax     = 5 * time.Second
	// maxErrorBody bounds how much of an error response we read.
	maxErrorBody = 64 << 10
)

// call is one logical request; do may send it several times.
type call struct {
	op     string
	method string
	path   string
	query  url.Values
	header http.Header
	body   any
}

// post is a call sending body as JSON.
func post(op, path string, body any) call {
	return call{op: op, method: http.MethodPost, path: path, body: body}
}

// get is a call with only a query string.
func get(op, path string, query url.Values) call {
	return call{op: op, method: http.MethodGet, path: path, query: query}
}

// send runs cl and returns the {"data": …} of its answer as a T.
func send[T any](ctx context.Context, c *Client, cl call) (T, error) {
	var out T
	err := c.do(ctx, cl, &out)
	return out, err
}

// permanentError marks a failure that a retry cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// do sends cl, retrying throttling (after Retry-After), other 5xx and
// network errors (exponential backoff with jitter) while the caller's
// deadline, or retryBudget without one, leaves room for the wait. It
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
		ctx, cancel = context.WithTimeout(ctx, retryBudget)
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
