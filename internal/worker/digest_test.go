package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/payload"
	"github.com/owedhq/owed/internal/provider"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/stacktest"
	"github.com/owedhq/owed/internal/worker"
)

// recordingSender records every delivery that reaches the provider, with
// the provider's answer.
type recordingSender struct {
	provider.Sender
	mu    sync.Mutex
	sends []provider.Delivery
	ids   []string
}

func (s *recordingSender) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	res, err := s.Sender.Send(ctx, d)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sends = append(s.sends, d)
	s.ids = append(s.ids, res.MessageID)
	return res, err
}

func (s *recordingSender) recorded() ([]provider.Delivery, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sends), slices.Clone(s.ids)
}

// scheduleDigest declares follow_up digestible in windows of ten minutes
// and schedules n follow-ups to one agent, a second apart, whose window
// closed half a minute ago: they are due now, as one digest.
func scheduleDigest(t *testing.T, b *bundle, n int) []ledger.Scheduled {
	t.Helper()
	if _, err := b.Ledger.SetDigest(bg, "acme", ledger.Digest{Kind: "follow_up", Window: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	first := time.Now().Add(-10*time.Minute - 30*time.Second).UTC().Truncate(time.Microsecond)
	return b.Schedule(t, "acme", n, first, func(i int, r *ledger.NewNotification) {
		r.Recipient, r.Kind = "agent", "follow_up"
		r.DueAt = first.Add(time.Duration(i) * time.Second)
		r.Payload = json.RawMessage(fmt.Sprintf(`{"text":"ticket %d"}`, i))
	})
}

// lines is what an sms digest lists: one line per member.
func lines(ids ...int) string {
	var out []string
	for _, i := range ids {
		out = append(out, fmt.Sprintf("• ticket %d", i))
	}
	return strings.Join(out, "\n")
}

// Ten follow-ups to one agent in one window are one provider call listing
// all ten, under a key derived from their ids; the sweep publishes one
// message for them, and every row is settled delivered with the call's
// provider message id.
func TestDigestIsOneSendListingEveryMember(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := scheduleDigest(t, b, 10)
	if n := b.sweepAll(t); n != 10 {
		t.Fatalf("the sweep published %d rows, want the 10 members", n)
	}
	if q := b.queueStats(t); q.Visible+q.Delayed != 1 {
		t.Fatalf("queue holds %d messages for one digest, want 1", q.Visible+q.Delayed)
	}
	rec := &recordingSender{Sender: b.Sender}
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return rec, nil }
	})
	b.waitSettled(t, 30*time.Second)

	sends, msgIDs := rec.recorded()
	if len(sends) != 1 {
		t.Fatalf("%d provider calls, want 1 for the digest", len(sends))
	}
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if want := lines(0, 1, 2, 3, 4, 5, 6, 7, 8, 9); sends[0].Content.Text != want {
		t.Errorf("the digest lists\n%s\nwant\n%s", sends[0].Content.Text, want)
	}
	if want := ledger.DigestKey("owed-", rows[0].ID, ids); sends[0].IdempotencyKey != want {
		t.Errorf("the digest's key is %q, want %q (from its members' ids)", sends[0].IdempotencyKey, want)
	}
	for _, r := range rows {
		d, err := b.Ledger.Get(bg, "acme", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != ledger.StateDelivered || d.ProviderMessageID == "" || d.ProviderMessageID != msgIDs[0] ||
			d.DigestID != rows[0].ID || len(d.History) != 1 || d.History[0].ProviderMessageID != msgIDs[0] {
			t.Errorf("member %d: %s, provider id %q, digest %d, history %+v; want delivered with the digest's id %q in digest %d",
				r.ID, d.State, d.ProviderMessageID, d.DigestID, d.History, msgIDs[0], rows[0].ID)
		}
	}
	if st := b.sandboxStats(t); st.Accepted != 1 || st.Duplicates != 0 {
		t.Errorf("sandbox accepted=%d duplicates=%d, want 1 and 0", st.Accepted, st.Duplicates)
	}
}

// A member cancelled before the digest is sent is not listed: one
// cancelled before the sweep, and two cancelled while a worker holds the
// digest's claim and has not started the send (its recipient look-up
// stalls), one of them the lead its message names. The cancelled rows are
// settled cancelled with no attempt, and the digest's key is its remaining
// members'.
func TestDigestLeavesOutACancelledMember(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := scheduleDigest(t, b, 6)
	if _, err := b.Ledger.Cancel(bg, "acme", "follow_up", "ref-5"); err != nil {
		t.Fatal(err)
	}
	b.sweepAll(t)
	rec := &recordingSender{Sender: b.Sender}
	stall := &stallingResolver{entered: make(chan struct{}), release: make(chan struct{})}
	b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return rec, nil }
		o.Resolver = stall
	})
	waitClosed(t, stall.entered, "the digest's recipient look-up")
	// The lead (the member the message names) and another member.
	for _, ref := range []string{"ref-0", "ref-2"} {
		res, err := b.Ledger.Cancel(bg, "acme", "follow_up", ref)
		if err != nil || res.Changed != 1 {
			t.Fatalf("cancel of %s under a claim not yet sending: %+v %v, want it changed at once", ref, res, err)
		}
	}
	close(stall.release)
	b.waitSettled(t, 30*time.Second)

	sends, _ := rec.recorded()
	if len(sends) != 1 {
		t.Fatalf("%d provider calls, want 1", len(sends))
	}
	if want := lines(1, 3, 4); sends[0].Content.Text != want {
		t.Errorf("the digest lists\n%s\nwant\n%s (no cancelled member)", sends[0].Content.Text, want)
	}
	kept := []int64{rows[1].ID, rows[3].ID, rows[4].ID}
	if want := ledger.DigestKey("owed-", rows[0].ID, kept); sends[0].IdempotencyKey != want {
		t.Errorf("the digest's key is %q, want %q", sends[0].IdempotencyKey, want)
	}
	for _, i := range []int{0, 2, 5} {
		if d, _ := b.Ledger.Get(bg, "acme", rows[i].ID); d.State != ledger.StateCancelled || len(d.History) != 0 {
			t.Errorf("cancelled member %d: %s with %d attempts, want cancelled and never sent", i, d.State, len(d.History))
		}
	}
}

// A worker that dies between the digest's send and its settle leaves every
// member flagged: the worker that takes the digest over sends it again
// under the same key (the provider sees a repeat it can drop) and records
// every member's send as a possible duplicate, never one member sent twice
// unflagged.
func TestDigestCrashBetweenSendAndSettleFlagsEveryMember(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := scheduleDigest(t, b, 5)
	b.sweepAll(t)
	// The first worker: it takes the message, claims the digest, checks
	// the claims before its send, and the provider accepts the send; then
	// it dies before the settle. Its claims have a short lease and its
	// message is never acked.
	msgs, err := b.Queue.Consume(bg, rest.ConsumeOptions{MaxMessages: 10, VisibilityTimeout: time.Second})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("consume: %v, %d messages; want the digest's one", err, len(msgs))
	}
	env, err := envelope.Decode(msgs[0].Payload)
	if err != nil || env.Digest != rows[0].ID {
		t.Fatalf("the message: %+v %v, want digest %d", env, err, rows[0].ID)
	}
	claims, err := b.Ledger.ClaimDigest(bg, "acme", env.Digest, env.DueAt,
		ledger.ClaimParams{LeaseFor: time.Second, Revocable: true})
	if err != nil || len(claims) != 5 {
		t.Fatalf("claim of the digest: %d claims, %v; want its 5 members", len(claims), err)
	}
	var holds []ledger.Hold
	var ids []int64
	for _, c := range claims {
		if c.Outcome != ledger.ClaimSend {
			t.Fatalf("member %d: claim %s, want send", c.Row.ID, c.Outcome)
		}
		holds, ids = append(holds, c.Hold), append(ids, c.Row.ID)
	}
	if errs, err := b.Ledger.StartSends(bg, holds, time.Second, time.Millisecond); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		t.Fatalf("the check before the send: %v %v", errs, err)
	}
	key := ledger.DigestKey("owed-", env.Digest, ids)
	if _, err := b.Sender.Send(bg, provider.Delivery{Tenant: "acme", NotificationID: ids[0], Recipient: "agent",
		Channel: "sms", Kind: "follow_up", IdempotencyKey: key, Content: payload.Content{Text: lines(0, 1, 2, 3, 4)}}); err != nil {
		t.Fatalf("the first worker's send: %v", err)
	}

	b.start(t)
	b.waitSettled(t, 30*time.Second)
	for _, id := range ids {
		d, _ := b.Ledger.Get(bg, "acme", id)
		if d.State != ledger.StateDelivered || len(d.History) != 1 || !d.History[0].PossibleDuplicate {
			t.Errorf("member %d: %s, history %+v; want delivered once more, flagged a possible duplicate", id, d.State, d.History)
		}
	}
	sends, err := b.SandboxClient.Sends(bg, sandbox.SendQuery{Key: key})
	if err != nil || len(sends) != 1 || sends[0].Duplicates != 1 {
		t.Errorf("the provider's sends under the digest's key: %+v %v; want one, repeated once under the same key", sends, err)
	}
}

// acceptedStuckSender hands its first send to the provider, which accepts
// it, and then never answers: the accept is lost with the worker.
type acceptedStuckSender struct {
	provider.Sender
	sending chan struct{} // closed once the provider accepted the first send
	once    sync.Once
}

func (s *acceptedStuckSender) Send(ctx context.Context, d provider.Delivery) (provider.Result, error) {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.Sender.Send(ctx, d)
	}
	if _, err := s.Sender.Send(ctx, d); err != nil {
		return provider.Result{}, err
	}
	close(s.sending)
	<-ctx.Done()
	return provider.Result{}, provider.TransportError(s.Name(), ctx.Err())
}

// A digest whose send the provider accepted but whose answer the worker
// never got (the shutdown cut it off) is handed back member by member, each
// marked: the next worker's send of the digest, under the same key, records
// every member as a possible duplicate.
func TestDigestSendCutOffFlagsEveryMember(t *testing.T) {
	b := setup(t, stacktest.Options{})
	rows := scheduleDigest(t, b, 4)
	b.sweepAll(t)
	stuck := &acceptedStuckSender{Sender: b.Sender, sending: make(chan struct{})}
	stop := b.start(t, func(o *worker.Options) {
		o.Route = func(string) (provider.Sender, error) { return stuck, nil }
		o.ShutdownTimeout, o.SendTimeout, o.VisibilityTimeout = 100*time.Millisecond, time.Hour, time.Hour
	})
	waitClosed(t, stuck.sending, "the provider's accept of the digest")
	stop()
	for _, r := range rows {
		if d, _ := b.Ledger.Get(bg, "acme", r.ID); d.State != ledger.StateQueued || len(d.History) != 0 {
			t.Fatalf("member %d after the cut-off send: %s, history %+v; want queued with no attempt", r.ID, d.State, d.History)
		}
	}
	b.start(t)
	b.waitSettled(t, 30*time.Second)
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r.ID)
		d, _ := b.Ledger.Get(bg, "acme", r.ID)
		if d.State != ledger.StateDelivered || len(d.History) != 1 || !d.History[0].PossibleDuplicate {
			t.Errorf("member %d: %s, history %+v; want delivered, flagged a possible duplicate", r.ID, d.State, d.History)
		}
	}
	sends, err := b.SandboxClient.Sends(bg, sandbox.SendQuery{Key: ledger.DigestKey("owed-", rows[0].ID, ids)})
	if err != nil || len(sends) != 1 || sends[0].Duplicates != 1 {
		t.Errorf("the provider's sends under the digest's key: %+v %v; want one, repeated once", sends, err)
	}
}
