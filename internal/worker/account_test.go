package worker_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// expiredCredential is a provider whose credential expired: while broken it
// answers every send 401 (the adapters classify that as provider.Account)
// without delivering; once fixed it delivers through the sandbox.
type expiredCredential struct {
	provider.Sender
	broken  atomic.Bool
	refused atomic.Int64
}

func (s *expiredCredential) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if s.broken.Load() {
		s.refused.Add(1)
		return provider.Result{}, provider.NewError(s.Name(), provider.Account, 401, "", "the API key has expired")
	}
	return s.Sender.Send(ctx, d)
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// An expired credential pauses the provider account for every worker
// instead of failing the rows in flight: no row fails, none is
// dead-lettered, none burns an attempt, and once the credential is fixed
// and on-call resumes the account every row is delivered once.
func TestExpiredCredentialPausesTheAccountAndFailsNoRow(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 50, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	sender := &expiredCredential{Sender: b.Sender}
	sender.broken.Store(true)
	// Two worker processes, unpaced (OWED_PROVIDER_RATE unset); the pause
	// is long enough that no probe runs before the test resumes the
	// account, and a held-back row waits in the ledger for the pause.
	for range 2 {
		l, paces := b.process(t, "")
		b.start(t, func(o *worker.Options) {
			o.Ledger, o.Pace = l, paces
			o.Route = func(string) (provider.Sender, error) { return sender, nil }
			o.AccountPause = time.Hour
		})
	}
	accounts := pace.NewAccounts(b.DB.App, nil)
	waitFor(t, "the account is paused with every row back in the ledger", func() bool {
		st, err := accounts.State(bg, "sandbox")
		if err != nil {
			t.Fatal(err)
		}
		bl := read(t, b.Ledger.Backlog)
		return st.Open() && sender.refused.Load() > 0 && bl.ByState[ledger.StateSending] == 0 && bl.Owed == 50
	})
	st, _ := accounts.State(bg, "sandbox")
	if st.Reason != "http_401" || st.Wait < 50*time.Minute {
		t.Errorf("account state %+v, want paused for about an hour with reason http_401", st)
	}
	for _, r := range rows {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State.Settled() || d.Attempts != 0 {
			t.Fatalf("row %d: %s with %d attempts, want owed and no attempt burnt", r.ID, d.State, d.Attempts)
		}
	}
	if q := b.queueStats(t); q.DeadLetterDepth != 0 {
		t.Fatalf("dead letters: %d, want 0", q.DeadLetterDepth)
	}

	sender.broken.Store(false)
	if was, err := pace.NewAccounts(b.DB.Operator, nil).Resume(bg, "sandbox", "alice", ""); err != nil || !was {
		t.Fatalf("resume: %v, %v; want the account to have been paused", was, err)
	}
	// The rows the workers received while the account was paused wait in
	// the ledger until the pause's end, their messages acked; the ones the
	// gate did not receive go now. The sweep at the pause's end publishes
	// the waiting ones again.
	waitFor(t, "the queue is empty", func() bool {
		q := b.queueStats(t)
		return q.Visible+q.InFlight+q.Delayed == 0
	})
	owed := read(t, b.Ledger.Backlog).Owed
	if owed == 0 {
		t.Fatal("no row waited in the ledger for the pause's end")
	}
	if res := b.sweepLater(t, 2*time.Hour); int64(res.Published) != owed {
		t.Fatalf("the sweep after the pause published %d, want the %d rows waiting", res.Published, owed)
	}
	b.waitSettled(t, 60*time.Second)
	for _, r := range rows {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State != ledger.StateDelivered || len(d.History) != 1 {
			t.Errorf("row %d: %s with %d attempts, want delivered on its one attempt", r.ID, d.State, len(d.History))
		}
	}
	if s := b.sandboxStats(t); s.Accepted != 50 || s.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want 50 and 0", s.Accepted, s.Duplicates)
	}
	if q := b.queueStats(t); q.DeadLetterDepth != 0 {
		t.Errorf("dead letters after the resume: %d, want 0", q.DeadLetterDepth)
	}
}

// When the pause passes, one worker probes the account with one real send:
// a success closes the circuit and the rest follow.
func TestAPausedAccountIsProbedAndResumes(t *testing.T) {
	b := setup(t, stacktest.Options{})
	b.Schedule(t, "acme", 10, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	sender := &expiredCredential{Sender: b.Sender}
	sender.broken.Store(true)
	l, paces := b.process(t, "")
	b.start(t, func(o *worker.Options) {
		o.Ledger, o.Pace = l, paces
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
		// The pause is shorter than a message may wait in the queue, so the
		// held-back messages come back to be probed without a sweep.
		o.AccountPause, o.QueueDelayMax = 2*time.Second, 5*time.Second
	})
	accounts := pace.NewAccounts(b.DB.App, nil)
	waitFor(t, "the account is paused", func() bool {
		st, err := accounts.State(bg, "sandbox")
		return err == nil && st.Open()
	})
	sender.broken.Store(false)
	b.waitSettled(t, 60*time.Second)
	if st, _ := accounts.State(bg, "sandbox"); st.Open() {
		t.Errorf("account still paused after the probe got through: %+v", st)
	}
	if s := b.sandboxStats(t); s.Accepted != 10 || s.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want 10 and 0", s.Accepted, s.Duplicates)
	}
}

// limitedOnce answers its first send 429 with a Retry-After, and records
// whether each later send reached it before the pause the 429 asked for
// had ended, by the database's clock (the one the pause is kept in).
type limitedOnce struct {
	provider.Sender
	db         *sql.DB
	retryAfter time.Duration
	first      atomic.Bool
	early      atomic.Int64
}

func (s *limitedOnce) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if !s.first.Swap(true) {
		return provider.Result{}, &provider.Error{Provider: s.Name(), Class: provider.RateLimited, HTTPStatus: 429,
			RetryAfter: s.retryAfter}
	}
	var early bool
	err := s.db.QueryRowContext(ctx, `SELECT clock_timestamp() < paused_until FROM owed_provider_pace WHERE account = $1`,
		s.Name()).Scan(&early)
	if early || errors.Is(err, sql.ErrNoRows) {
		s.early.Add(1)
	}
	return s.Sender.Send(ctx, d)
}

// A 429 seen by one worker pauses every worker on the account even when
// OWED_PROVIDER_RATE is unset: the pause is shared through Postgres. The
// second process starts after the 429 and sends nothing before the pause
// ends; no attempt is burnt.
func TestA429PausesEveryWorkerWithoutARate(t *testing.T) {
	b := setup(t, stacktest.Options{})
	first := b.Schedule(t, "acme", 1, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	sender := &limitedOnce{Sender: b.Sender, db: b.DB.Owner, retryAfter: 5 * time.Second}
	route := func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return sender, nil }
	}
	la, pa := b.process(t, "")
	b.start(t, route, func(o *worker.Options) { o.Ledger, o.Pace = la, pa })
	var paused bool
	waitFor(t, "the 429 pauses the account in the database", func() bool {
		err := b.DB.Owner.QueryRow(`SELECT paused_until > clock_timestamp() FROM owed_provider_pace WHERE account = 'sandbox'`).Scan(&paused)
		return err == nil && paused
	})
	rows := b.Schedule(t, "acme", 20, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	lb, pb := b.process(t, "")
	b.start(t, route, func(o *worker.Options) { o.Ledger, o.Pace = lb, pb })
	b.waitSettled(t, 60*time.Second)
	if n := sender.early.Load(); n != 0 {
		t.Errorf("%d sends reached the provider before the pause its 429 asked for ended", n)
	}
	for _, r := range append(first, rows...) {
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State != ledger.StateDelivered || d.Attempts != 1 {
			t.Errorf("row %d: %s with %d attempts, want delivered with the one accepted attempt", r.ID, d.State, d.Attempts)
		}
	}
}

// gone answers a recipient's permanent failure (Twilio's 21610, a STOP
// reply) for r0 and delivers the others.
type gone struct{ provider.Sender }

func (s gone) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if d.Recipient == "r0" {
		e := provider.NewError(s.Name(), provider.Permanent, 400, "21610", "Attempt to send to unsubscribed recipient")
		e.Recipient = true
		return provider.Result{}, e
	}
	return s.Sender.Send(ctx, d)
}

// A recipient's permanent failure is recorded on the row with the
// provider's code and is not dead-lettered: the dead letters are for what
// owed could not process, and they page.
func TestRecipientFailureIsRecordedNotDeadLettered(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 2, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return gone{b.Sender}, nil }
	})
	b.waitSettled(t, 30*time.Second)
	d, _ := b.Ledger.Get(bg, "acme", rows[0].ID)
	if d.State != ledger.StateFailed || len(d.History) != 1 || d.History[0].Outcome != ledger.AttemptPermanent ||
		!strings.Contains(d.LastError, "21610") || !strings.Contains(d.History[0].Error, "21610") {
		t.Errorf("unsubscribed recipient's row: %s, last error %q, history %+v; want failed with code 21610", d.State, d.LastError, d.History)
	}
	if d, _ := b.Ledger.Get(bg, "acme", rows[1].ID); d.State != ledger.StateDelivered {
		t.Errorf("the other row is %s, want delivered", d.State)
	}
	waitFor(t, "the queue is drained", func() bool {
		q := b.queueStats(t)
		return q.Visible+q.InFlight+q.Delayed == 0
	})
	if q := b.queueStats(t); q.DeadLetterDepth != 0 {
		t.Errorf("dead letters: %d, want 0 (a recipient's failure is not owed's)", q.DeadLetterDepth)
	}
}

// A worker of a rolling deploy that has no provider for the row's channel
// (configured none, or not known yet) gives the message back for later
// instead of failing the row; a worker that has one delivers it.
func TestChannelWithoutAProviderReturnsTheMessageLater(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 1, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	var refused atomic.Int64
	var ready atomic.Bool
	b.start(t, func(o *worker.Options) {
		o.QueueDelayMax = 200 * time.Millisecond
		o.Route = func(ch string) (provider.Sender, error) {
			if !ready.Load() {
				refused.Add(1)
				return nil, errors.New("no provider for channel (set OWED_PROVIDER_SMS)")
			}
			return b.Sender, nil
		}
	})
	// New asks once per channel; the message's claim asks once more.
	channels := int64(len(payload.Channels()))
	waitFor(t, "the row's message was refused a provider", func() bool { return refused.Load() > channels })
	if d, _ := b.Ledger.Get(bg, "acme", rows[0].ID); d.State.Settled() || d.Attempts != 0 {
		t.Fatalf("row without a provider: %s with %d attempts, want owed without an attempt", d.State, d.Attempts)
	}
	ready.Store(true)
	b.waitSettled(t, 30*time.Second)
	if d, _ := b.Ledger.Get(bg, "acme", rows[0].ID); d.State != ledger.StateDelivered || d.Attempts != 1 {
		t.Errorf("row: %s with %d attempts, want delivered on its one attempt", d.State, d.Attempts)
	}
}
