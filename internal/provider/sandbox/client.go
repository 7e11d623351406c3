package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/owedhq/owed/internal/provider"
)

// Client reads and steers a running sandbox: its stats, its recorded sends,
// its faults. Tests and drills use it; the worker sends through the webhook
// adapter instead.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a Client for the sandbox at baseURL
// ("http://127.0.0.1:8089").
func NewClient(baseURL string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: provider.NewHTTPClient(0)}
}

// Stats returns the sandbox's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	return st, c.do(ctx, http.MethodGet, "/stats", nil, &st)
}

// Sends returns the recorded sends matching q, newest first.
func (c *Client) Sends(ctx context.Context, q SendQuery) ([]Send, error) {
	v := url.Values{}
	for k, s := range map[string]string{"key": q.Key, "tenant": q.Tenant, "recipient": q.Recipient} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out struct {
		Sends []Send `json:"sends"`
	}
	err := c.do(ctx, http.MethodGet, "/sends?"+v.Encode(), nil, &out)
	return out.Sends, err
}

// SetFaults replaces the sandbox's injected faults.
func (c *Client) SetFaults(ctx context.Context, f Faults) error {
	return c.do(ctx, http.MethodPost, "/admin/faults", f, nil)
}

// Reset forgets every send and counter.
func (c *Client) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/admin/reset", nil, nil)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := provider.Do(c.hc, req, "sandbox")
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("sandbox %s %s: HTTP %d: %s", method, path, resp.Status, bytes.TrimSpace(resp.Body))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(resp.Body, out)
}
