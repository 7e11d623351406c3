package sweeper

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweep"
)

// docsExample is the schedule request of docs/api.md: two rows due
// 2026-03-02T09:00Z, the first without an expiry.
const docsExample = `{"tenant_id": "acme", "notifications": [
  {"recipient": "+15550001", "channel": "sms", "kind": "follow_up", "ref_id": "TCK-42",
   "due_at": "2026-03-02T09:00:00Z", "payload": {"text": "Any news on ticket 42?"}},
  {"recipient": "ann@example.com", "channel": "email", "kind": "follow_up", "ref_id": "TCK-42",
   "due_at": "2026-03-02T09:00:00Z", "expires_at": "2026-03-02T17:00:00Z",
   "payload": {"subject": "Ticket 42", "text": "Any news?"}}]}`

// With the documented defaults, the docs/api.md example scheduled nine
// months after its due time (as issue 27 did) is never sent: the row
// without an expiry is past its default grace (OWED_DEFAULT_GRACE, 24h), so
// it is stored expired and the API answers so; the one with an expiry
// expires at the sweep. Before, it was published and delivered at once.
func TestTheDocsExampleScheduledLateIsNotSent(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	clk := clock.NewStub(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	cfg := Defaults()
	cfg.CronSecret, cfg.APIToken, cfg.DatabaseURL = secret, apiToken, s.DB.AppURL
	cfg.Materialise = materialise.Config{Lookahead: materialise.DefaultLookahead, DefaultLead: materialise.DefaultLead}
	cfg.Queue = backends.Config{Backend: backends.REST,
		Rest: rest.Config{URL: s.QueueURL, Token: stacktest.QueueToken, Name: s.Queue.Name()}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, ledger.New(s.DB.App, clk), s.Queue, zerolog.Nop(), clk)
	if err != nil {
		t.Fatal(err)
	}

	r := httptest.NewRequest(http.MethodPost, "/v1/notifications", strings.NewReader(docsExample))
	r.Header.Set("Authorization", "Bearer "+apiToken)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, r)
	var scheduled struct {
		Data struct {
			Notifications []struct {
				ID    int64        `json:"id"`
				State ledger.State `json:"state"`
			} `json:"notifications"`
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &scheduled); err != nil || w.Code != http.StatusOK ||
		len(scheduled.Data.Notifications) != 2 {
		t.Fatalf("schedule: HTTP %d %s", w.Code, w.Body)
	}
	if st := scheduled.Data.Notifications[0].State; st != ledger.StateExpired {
		t.Errorf("the row without an expiry, nine months late, was answered %s, want expired", st)
	}

	res := do(srv.Handler(), "POST", "/cron/sweep", "Bearer "+secret)
	var run sweep.Result
	if err := json.Unmarshal(res.Body.Bytes(), &run); err != nil || res.Code != http.StatusOK {
		t.Fatalf("sweep: HTTP %d %s", res.Code, res.Body)
	}
	if run.Published != 0 {
		t.Errorf("the sweep published %d rows of the late example, want none", run.Published)
	}
	for _, n := range scheduled.Data.Notifications {
		d, err := ledger.New(s.DB.App, clk).Get(r.Context(), "acme", n.ID)
		if err != nil || d.State != ledger.StateExpired {
			t.Errorf("row %d: %s (err %v), want expired, never sent", n.ID, d.State, err)
		}
	}
}
