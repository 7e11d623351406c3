package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxAnswer bounds how much of an answer the client reads.
const maxAnswer = 4 << 20

// APIClient posts JSON to one of the stack's HTTP control endpoints with a
// bearer token: the queue emulator's admin endpoint (fault injection) and the
// benchmarks' raw posts. Scheduling through the API goes through package
// client, as an application's does (the seeder and the drill's workload).
type APIClient struct {
	url, token string
	// timeout bounds one call.
	timeout time.Duration
	hc      *http.Client
}

// NewAPIClient returns a client of the API at url holding token; timeout
// bounds one call.
func NewAPIClient(url, token string, timeout time.Duration) *APIClient {
	return &APIClient{url: url, token: token, timeout: timeout, hc: &http.Client{Timeout: timeout}}
}

// Post sends in as JSON to path and decodes the answer's data into out, or
// ignores it when out is nil. A non-2xx answer is an error quoting its body.
func (c *APIClient) Post(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, &struct {
		Data any `json:"data"`
	}{Data: out})
}
