package launch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HealthPath is where every owed service (sweeper, worker, queue emulator,
// sandbox) answers 200 once it serves: the one readiness convention of the
// supervisor.
const HealthPath = "/healthz"

// Healthz is a Ready probe for a service at base ("http://127.0.0.1:8080"):
// nil once GET base/healthz answers 200.
func Healthz(base string) func(context.Context) error {
	url := base + HealthPath
	hc := &http.Client{Timeout: time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return fmt.Errorf("GET %s: HTTP %d %s", url, resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil
	}
}
