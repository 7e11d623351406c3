package api

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/worker"
)

// changeAnswer posts a cancel or reschedule and decodes its answer.
func (b *bundle) changeAnswer(t *testing.T, path, token string, body map[string]any) ledger.ChangeResult {
	t.Helper()
	r := b.do(t, "POST", path, token, body)
	expect(t, r, http.StatusOK)
	var res ledger.ChangeResult
	r.data(t, &res)
	return res
}

// A cancel or snooze of a row a worker is sending answers that the row is
// in flight and that the change was recorded as its intent; when the worker
// hands the row back, the row reads as the answer said.
func TestChangeInFlightAnswersTheIntent(t *testing.T) {
	b := setup(t)
	now := b.clk.Now()
	expect(t, b.do(t, "POST", "/v1/notifications", b.acme,
		batch(note("+15550001", "T-1", now), note("+15550001", "T-2", now))), http.StatusOK)
	var ids []int64
	var holds []ledger.Hold
	for _, ref := range []string{"T-1", "T-2"} {
		rows, err := b.ledger.Find(ctx, "acme", ledger.Filter{RefID: ref})
		if err != nil || len(rows) != 1 {
			t.Fatalf("rows of %s: %+v %v", ref, rows, err)
		}
		c, err := b.ledger.ClaimForSend(ctx, "acme", rows[0].ID, ledger.ClaimParams{DueAt: now, LeaseFor: time.Minute})
		if err != nil || c.Outcome != ledger.ClaimSend {
			t.Fatalf("claim %s: %v %v", ref, c.Outcome, err)
		}
		ids = append(ids, rows[0].ID)
		holds = append(holds, c.Hold)
	}
	want := ledger.ChangeResult{InFlight: 1, Intents: 1}
	if got := b.changeAnswer(t, "/v1/notifications/cancel", b.acme, map[string]any{"kind": "follow_up", "ref_id": "T-1"}); got != want {
		t.Errorf("cancel in flight answered %+v, want %+v", got, want)
	}
	newDue := now.Add(time.Hour)
	if got := b.changeAnswer(t, "/v1/notifications/reschedule", b.acme,
		map[string]any{"kind": "follow_up", "ref_id": "T-2", "delay_seconds": 3600}); got != want {
		t.Errorf("snooze in flight answered %+v, want %+v", got, want)
	}
	for _, h := range holds {
		if err := b.ledger.ReleaseClaim(ctx, h, time.Second, time.Minute, "waiting for the provider's pace", nil, false); err != nil {
			t.Fatal(err)
		}
	}
	var d struct {
		State ledger.State `json:"state"`
		DueAt time.Time    `json:"due_at"`
	}
	b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", ids[0]), b.acme, nil).data(t, &d)
	if d.State != ledger.StateCancelled {
		t.Errorf("cancelled row reads %s after the release, want cancelled", d.State)
	}
	b.do(t, "GET", fmt.Sprintf("/v1/notifications/%d", ids[1]), b.acme, nil).data(t, &d)
	if d.State != ledger.StatePending || !d.DueAt.Equal(newDue) {
		t.Errorf("snoozed row reads %s due %s after the release, want pending due %s", d.State, d.DueAt, newDue)
	}
}

// heldPace is a provider pace whose first Reserve blocks until the test
// lets go and then refuses the slot (the account is busy further ahead
// than the worker holds messages), as a real pace does under load; every
// later Reserve is granted at once.
type heldPace struct {
	reserving chan struct{} // closed when the first Reserve starts
	letGo     chan struct{} // closed by the test
	calls     atomic.Int32
}

func (p *heldPace) Reserve(ctx context.Context, _ time.Duration) (time.Duration, bool, error) {
	if p.calls.Add(1) > 1 {
		return 0, true, nil
	}
	close(p.reserving)
	select {
	case <-p.letGo:
		return time.Second, false, nil
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
}

func (p *heldPace) Pause(context.Context, time.Duration) error { return nil }

func (p *heldPace) Next(context.Context) (time.Duration, time.Duration, error) { return 0, 0, nil }

// End to end through the API, the sweep, the queue emulator, a worker and
// the sandbox provider: a cancel that lands while the worker waits for the
// provider's pace, before its send starts, takes the row back from the
// claim and is answered as certain (changed, nothing in flight). The
// worker finds its claim revoked; the message comes back, the claim finds
// the row cancelled, and the provider never hears of it.
func TestCancelWhileWaitingForThePaceIsNotDelivered(t *testing.T) {
	t.Parallel()
	s := stacktest.New(t, stacktest.Options{})
	b := &bundle{handler: New(Options{Ledger: s.Ledger, Tokens: NewTokens(s.DB.App, nil), ServiceToken: serviceToken,
		Log: zerolog.Nop()})}
	expect(t, b.do(t, "POST", "/v1/notifications", serviceToken, map[string]any{"tenant_id": "acme",
		"notifications": []map[string]any{note("+15550001", "T-1", time.Now())}}), http.StatusOK)
	sw, err := sweep.New(s.Ledger, s.Queue, sweep.Config{Batch: 10, Budget: 30 * time.Second, PublishAhead: time.Minute,
		RequeueAfter: 10 * time.Minute, KeyPrefix: "owed-"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := sw.Run(ctx); err != nil || res.Published != 1 {
		t.Fatalf("sweep: %+v %v, want one row published", res, err)
	}

	pace := &heldPace{reserving: make(chan struct{}), letGo: make(chan struct{})}
	w, err := worker.New(worker.Options{Ledger: s.Ledger, Queue: s.Queue,
		Route: func(string) (provider.Sender, error) { return s.Sender, nil },
		Pace:  func(string) worker.Pacer { return pace }, Log: zerolog.Nop(),
		Concurrency: 1, VisibilityTimeout: 5 * time.Second, SendTimeout: 2 * time.Second, ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	select {
	case <-pace.reserving:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not reach the pace within 30s")
	}

	got := b.changeAnswer(t, "/v1/notifications/cancel", serviceToken,
		map[string]any{"tenant_id": "acme", "kind": "follow_up", "ref_id": "T-1"})
	if want := (ledger.ChangeResult{Changed: 1}); got != want {
		t.Errorf("cancel while the worker waits for the pace answered %+v, want %+v", got, want)
	}
	close(pace.letGo)

	// The row is settled at once; the message the worker leaves alone
	// surfaces after its visibility timeout and is acked when the claim
	// finds the row settled. Only then has the worker had its chance to
	// send.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := s.Queue.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Visible+st.InFlight+st.Delayed+st.DeadLetterDepth == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue still holds the message 30s after the cancel: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows, err := s.Ledger.Find(ctx, "acme", ledger.Filter{RefID: "T-1"})
	if err != nil || len(rows) != 1 || rows[0].State != ledger.StateCancelled {
		t.Errorf("rows after the cancel: %+v (%v), want the one row cancelled", rows, err)
	}
	st, err := s.SandboxClient.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Accepted != 0 {
		t.Errorf("the provider accepted %d sends of the cancelled row, want 0", st.Accepted)
	}
}
