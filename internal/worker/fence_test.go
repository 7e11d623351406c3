package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// waitClosed waits for ch to close, failing the test if it has not after
// 30 s.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen within 30s", what)
	}
}

// stallingResolver stalls the first look-up until released, as a directory
// that hangs would, then answers with the recipient itself, or err.
type stallingResolver struct {
	entered chan struct{} // closed when the first look-up starts
	release chan struct{} // closed to let it answer
	once    sync.Once
	err     error
}

func (r *stallingResolver) Resolve(ctx context.Context, _, recipient, _ string) (string, bool, error) {
	r.once.Do(func() { close(r.entered) })
	select {
	case <-r.release:
	case <-ctx.Done():
		return "", false, ctx.Err()
	}
	return recipient, false, r.err
}

// countingSender counts the sends that reach it.
type countingSender struct {
	provider.Sender
	n atomic.Int64
}

func (s *countingSender) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	s.n.Add(1)
	return s.Sender.Send(ctx, d)
}

// Worker A claims a row and stalls before sending (its recipient look-up
// hangs) until its lease has run out by the database's clock; worker B then
// claims the row and sends it. When A wakes up it must not send, and
// whatever it writes next (the send's outcome, or the release after a
// failed look-up) must not overwrite B's claim.
func TestStolenClaimIsNeitherSentNorOverwritten(t *testing.T) {
	for name, lookup := range map[string]error{"resolved": nil, "lookup failed": errors.New("directory timed out")} {
		t.Run(name, func(t *testing.T) {
			b := setup(t, stacktest.Options{})
			due := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
			id := b.Schedule(t, "acme", 1, due, nil)[0].ID
			b.sweepAll(t)
			// One clock for the ledger and both workers, so the test can
			// say "two hours pass" while A stalls.
			clk := clock.NewStub(time.Now())
			l := ledger.New(b.DB.App, clk)
			stall := &stallingResolver{entered: make(chan struct{}), release: make(chan struct{}), err: lookup}
			sendsA := &countingSender{Sender: b.Sender}
			stopA := b.start(t, func(o *worker.Options) {
				o.Ledger, o.Clock, o.Resolver, o.Concurrency, o.RetryBase = l, clk, stall, 1, time.Hour
				o.Route = func(string) (provider.Sender, error) { return sendsA, nil }
				// A's message stays hidden and its heartbeat (every 20
				// minutes of real time) never beats during the test: A is
				// stalled as a whole.
				o.VisibilityTimeout = time.Hour
			})
			waitClosed(t, stall.entered, "worker A's claim")

			// A's lease runs out while it stalls; B claims the row and sends.
			// A stalled before it started its send (ledger.StartSends), so
			// nothing of A's can have reached the provider: B's send is not
			// a possible duplicate.
			clk.Advance(2 * time.Hour)
			c, err := l.ClaimForSend(bg, "acme", id, ledger.ClaimParams{DueAt: due, LeaseFor: time.Hour})
			if err != nil || c.Outcome != ledger.ClaimSend || c.PossibleDuplicate {
				t.Fatalf("B's claim: %v dup=%v err=%v, want send, not flagged (A never started its send)",
					c.Outcome, c.PossibleDuplicate, err)
			}
			content, err := payload.Parse(c.Row.Channel, c.Row.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Sender.Send(bg, provider.Delivery{Tenant: "acme", NotificationID: id, Recipient: c.Row.Recipient,
				Channel: c.Row.Channel, Kind: c.Row.Kind, Content: content,
				IdempotencyKey: ledger.IdempotencyKey("owed-", id, due)}); err != nil {
				t.Fatalf("B's send: %v", err)
			}
			claimedByB, err := l.Get(bg, "acme", id)
			if err != nil {
				t.Fatal(err)
			}

			// A wakes up; stopping it waits for its delivery to end.
			close(stall.release)
			stopA()
			if n := sendsA.n.Load(); n != 0 {
				t.Errorf("worker A sent %d times after its claim was taken over, want never", n)
			}
			if st := b.sandboxStats(t); st.Accepted != 1 {
				t.Errorf("the provider received %d sends, want B's one", st.Accepted)
			}
			d, _ := l.Get(bg, "acme", id)
			if d.State != ledger.StateSending || !d.LeaseUntil.Equal(*claimedByB.LeaseUntil) ||
				!d.ClaimedAt.Equal(*claimedByB.ClaimedAt) || d.Attempts != 0 || len(d.History) != 0 {
				t.Errorf("row after A's late write: state=%s lease=%v claimed=%v attempts=%d history=%+v; want B's claim "+
					"untouched (sending, lease %v, claimed %v, no attempt)", d.State, d.LeaseUntil, d.ClaimedAt, d.Attempts,
					d.History, claimedByB.LeaseUntil, claimedByB.ClaimedAt)
			}
		})
	}
}

// slowSender holds its first send until released, ignoring the worker's
// send timeout as a provider client that does not honour its context
// would, then delivers it.
type slowSender struct {
	provider.Sender
	sending chan struct{} // closed when the first send starts
	release chan struct{} // closed to let it finish
	first   atomic.Bool
}

func (s *slowSender) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	if !s.first.Swap(true) {
		close(s.sending)
		<-s.release
		ctx = context.WithoutCancel(ctx)
	}
	return s.Sender.Send(ctx, d)
}

// A send that runs past the claim's lease keeps its claim: the heartbeat
// extends the row's lease (and the message's visibility) while it runs, so
// neither another worker's claim nor the sweep takes the row meanwhile, and
// the provider gets the row once.
func TestHeartbeatKeepsASlowSendsClaim(t *testing.T) {
	b := setup(t, stacktest.Options{})
	due := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
	id := b.Schedule(t, "acme", 1, due, nil)[0].ID
	b.sweepAll(t)
	slow := &slowSender{Sender: b.Sender, sending: make(chan struct{}), release: make(chan struct{})}
	const sendTimeout, visibility = time.Second, 3 * time.Second
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return slow, nil }
		o.SendTimeout, o.VisibilityTimeout = sendTimeout, visibility
	})
	waitClosed(t, slow.sending, "the send")
	d, err := b.Ledger.Get(bg, "acme", id)
	if err != nil || d.ClaimedAt == nil {
		t.Fatalf("row while sending: %+v %v", d, err)
	}
	// Wait, by the database's clock, until the lease the claim was granted
	// (send timeout plus visibility) has run out.
	granted := d.ClaimedAt.Add(sendTimeout + visibility)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var past bool
		if err := b.DB.App.QueryRow(`SELECT clock_timestamp() > $1`, granted).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if past {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the database's clock did not pass the claim's first lease within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c, err := b.Ledger.ClaimForSend(bg, "acme", id, ledger.ClaimParams{DueAt: due, LeaseFor: time.Minute}); err != nil ||
		c.Outcome != ledger.ClaimHeld {
		t.Errorf("a second claim while the slow send runs: %v (err %v), want held", c.Outcome, err)
	}
	if n := b.sweepAll(t); n != 0 {
		t.Errorf("the sweep republished %d rows while the slow send ran, want none", n)
	}
	close(slow.release)
	b.waitSettled(t, 30*time.Second)
	if st := b.sandboxStats(t); st.Accepted != 1 || st.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want 1 and 0", st.Accepted, st.Duplicates)
	}
	if d, _ := b.Ledger.Get(bg, "acme", id); d.State != ledger.StateDelivered || len(d.History) != 1 || d.History[0].PossibleDuplicate {
		t.Errorf("row: %s history %+v, want delivered on one attempt, not flagged", d.State, d.History)
	}
}

// A message the ledger can never claim (its due time, read with a large
// offset, falls before year 1 in UTC: the envelope is well formed, but no
// timestamptz holds it) is dead-lettered alone, with the reason; the rest
// of the messages, claimed in the same batches, are delivered.
func TestMessageTheLedgerRefusesIsDeadLetteredAlone(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 5, time.Now().Add(-time.Second), nil)
	b.sweepAll(t)
	bad := `{"v":1,"tenant_id":"acme","id":` + itoa(rows[0].ID) + `,"due_at":"0001-01-01T00:30:00+01:00","key":"k-bad"}`
	if _, err := b.Queue.PublishBatch(bg, []rest.Entry{{Payload: json.RawMessage(bad), IdempotencyKey: "bad-1"}}); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	b.waitSettled(t, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for b.queueStats(t).DeadLetterDepth < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the refused message was not dead-lettered within 30s: %+v", b.queueStats(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
	dls, _, err := b.Queue.DeadLetters(bg, 10, "")
	if err != nil || len(dls) != 1 || !strings.Contains(dls[0].Reason, "due_at") {
		t.Fatalf("dead letters: %+v (err %v), want the refused message alone, its reason naming due_at", dls, err)
	}
	if st := b.sandboxStats(t); st.Accepted != 5 || st.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want the 5 good rows once each", st.Accepted, st.Duplicates)
	}
	for _, r := range rows {
		if d, _ := b.Ledger.Get(bg, "acme", r.ID); d.State != ledger.StateDelivered || d.Attempts != 1 {
			t.Errorf("row %d: %s after %d attempts, want delivered on the first", r.ID, d.State, d.Attempts)
		}
	}
}

// A worker whose clock is off by an hour either way still sends on time and
// unexpired: it measures the waits and the expiry the ledger answered from
// the claim, by the database's clock, never the row's times against its own.
func TestSkewedWorkerClockSendsOnTime(t *testing.T) {
	for name, skew := range map[string]time.Duration{"behind": -time.Hour, "ahead": time.Hour} {
		t.Run(name, func(t *testing.T) {
			b := setup(t, stacktest.Options{})
			exp := time.Now().Add(10 * time.Minute)
			rows := b.Schedule(t, "acme", 3, time.Now().Add(-time.Second), func(_ int, r *ledger.NewNotification) {
				r.ExpiresAt = &exp
			})
			b.sweepAll(t)
			b.start(t, func(o *worker.Options) { o.Clock = clock.Offset(skew) })
			b.waitSettled(t, 30*time.Second)
			for _, r := range rows {
				if d, _ := b.Ledger.Get(bg, "acme", r.ID); d.State != ledger.StateDelivered || len(d.History) != 1 {
					t.Errorf("row %d: %s (%s) with %d attempts, want delivered on the first", r.ID, d.State, d.LastError, len(d.History))
				}
			}
		})
	}
}

// A message cannot choose the key its row is sent with: the worker derives
// it from the row it claimed. Here row B's message carries row A's key, as
// a forged message would; were that key sent, the provider would drop B's
// send as a repeat of A's while the ledger recorded B delivered.
func TestForgedKeyDoesNotSuppressADelivery(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := b.Schedule(t, "acme", 2, time.Now().Add(-time.Second), nil)
	a, c := read(t, func(ctx context.Context) (ledger.Detail, error) { return b.Ledger.Get(ctx, "acme", rows[0].ID) }),
		read(t, func(ctx context.Context) (ledger.Detail, error) { return b.Ledger.Get(ctx, "acme", rows[1].ID) })
	keyA := ledger.IdempotencyKey("owed-", a.ID, a.DueAt)
	var msgs []queue.Message
	for _, d := range []ledger.Detail{a, c} {
		body, err := envelope.Encode(envelope.Envelope{Tenant: "acme", ID: d.ID, DueAt: d.DueAt, Key: keyA})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, queue.Message{Key: ledger.QueueKey("owed-", d.ID, d.DueAt, 0), Body: body})
	}
	if res, err := b.Queue.Publish(bg, msgs); err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("publish: %+v, %v", res, err)
	}
	b.start(t)
	b.waitSettled(t, 30*time.Second)
	if st := b.sandboxStats(t); st.Accepted != 2 || st.Duplicates != 0 || st.DistinctKeys != 2 {
		t.Errorf("sandbox accepted=%d duplicates=%d distinct=%d, want each row once under its own key", st.Accepted, st.Duplicates, st.DistinctKeys)
	}
	for _, d := range []ledger.Detail{a, c} {
		sends, err := b.SandboxClient.Sends(bg, sandbox.SendQuery{Key: ledger.IdempotencyKey("owed-", d.ID, d.DueAt)})
		if err != nil || len(sends) != 1 {
			t.Errorf("row %d: sends under its own key %+v (err %v), want one", d.ID, sends, err)
		}
	}
}
