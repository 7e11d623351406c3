package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

func TestTimelineIsInTimeOrderWithEveryStepThatHappened(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	d := ledger.Detail{
		Notification: ledger.Notification{ID: 7, State: ledger.StateDelivered, CreatedAt: t0,
			NewNotification: ledger.NewNotification{DueAt: *at(60)}, PublishedAt: at(61), ClaimedAt: at(70),
			DeliveredAt: at(71), SettledAt: at(71), LeaseUntil: at(400), Provider: "sandbox", ProviderMessageID: "sbx_2"},
		History: []ledger.Attempt{
			{Attempt: 1, Provider: "sandbox", StartedAt: *at(62), FinishedAt: *at(63), Outcome: "transient", HTTPStatus: 503, Error: "busy"},
			{Attempt: 2, Provider: "sandbox", StartedAt: *at(70), FinishedAt: *at(71), Outcome: "accepted", ProviderMessageID: "sbx_2"},
		},
		Receipts: []ledger.Receipt{{Status: "delivered", Provider: "sandbox", ProviderMessageID: "sbx_2", OccurredAt: at(90), ReceivedAt: *at(91)}},
	}
	var steps []string
	ev := Timeline(d)
	for i, e := range ev {
		steps = append(steps, e.What)
		if i > 0 && e.At.Before(ev[i-1].At) {
			t.Errorf("step %q at %s comes after %q at %s", e.What, e.At, ev[i-1].What, ev[i-1].At)
		}
	}
	want := "scheduled due published attempt 1 claimed attempt 2 delivered settled receipt"
	if got := strings.Join(steps, " "); got != want {
		t.Errorf("timeline %q, want %q (no lease of a settled row)", got, want)
	}
	if e := ev[3]; e.Outcome != "transient" || !strings.HasPrefix(e.Detail, "503 busy took 1s") {
		t.Errorf("attempt 1 = %+v, want its outcome, status and error", e)
	}
}

// A digest's member says on its timeline which digest it went out in, and
// the due time it asked for.
func TestTimelineNamesTheDigest(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	asked, sent := t0.Add(time.Minute), t0.Add(11*time.Minute)
	d := ledger.Detail{Notification: ledger.Notification{ID: 8, State: ledger.StateDelivered, CreatedAt: t0,
		NewNotification: ledger.NewNotification{DueAt: sent, DigestFrom: &asked}, DigestID: 7,
		DeliveredAt: &sent, SettledAt: &sent, ProviderMessageID: "sbx_9"}}
	for _, e := range Timeline(d) {
		switch e.What {
		case "due":
			if e.Detail != "in digest 7, asked for 2026-12-01T12:01:00Z" {
				t.Errorf("due: %+v, want the digest and the time asked", e)
			}
		case "delivered":
			if e.Detail != "in digest 7" || e.ProviderMessageID != "sbx_9" {
				t.Errorf("delivered: %+v, want in digest 7 with the digest's provider id", e)
			}
		}
	}
}

func TestDeadLetterFilterMatchesTheRowAndTheReason(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	row := &ledger.Notification{Tenant: "acme", NewNotification: ledger.NewNotification{Kind: "reminder"}}
	d := Described{DeadLetter: queue.DeadLetter{Reason: "Provider answered 422", DeadLetteredAt: now.Add(-time.Hour)}, Row: row}
	junk := Described{DeadLetter: queue.DeadLetter{Reason: "not owed", DeadLetteredAt: now}, Undecodable: "bad"}
	for _, c := range []struct {
		f          DeadLetterFilter
		d, j       bool
		describeAs string
	}{
		{DeadLetterFilter{}, true, true, "all"},
		{DeadLetterFilter{Tenant: "acme"}, true, false, "tenant=acme"},
		{DeadLetterFilter{Tenant: "globex"}, false, false, "tenant=globex"},
		{DeadLetterFilter{Kind: "reminder", Reason: "answered 422"}, true, false, "kind=reminder reason=answered 422"},
		{DeadLetterFilter{Reason: "NOT OWED"}, false, true, "reason=NOT OWED"},
		{DeadLetterFilter{OlderThan: 30 * time.Minute}, true, false, "older_than=30m0s"},
	} {
		if got := c.f.Match(d, now); got != c.d {
			t.Errorf("%+v matches the row's dead letter: %v, want %v", c.f, got, c.d)
		}
		if got := c.f.Match(junk, now); got != c.j {
			t.Errorf("%+v matches the junk dead letter: %v, want %v", c.f, got, c.j)
		}
		if got := c.f.String(); got != c.describeAs {
			t.Errorf("%+v reads %q, want %q", c.f, got, c.describeAs)
		}
	}
}

func TestSelectDeadLettersNamesTheMissing(t *testing.T) {
	all := []queue.DeadLetter{{ID: "1"}, {ID: "2"}, {ID: "3"}}
	list, missing := SelectDeadLetters(all, []string{"2", "9"}, false, "q")
	if len(list) != 1 || list[0].ID != "2" || len(missing) != 1 || missing[0].DeadLetter != "9" || missing[0].Reason != "not a dead letter of q" {
		t.Errorf("select 2 and 9: %+v, missing %+v", list, missing)
	}
	if list, missing := SelectDeadLetters(all, nil, true, "q"); len(list) != 3 || len(missing) != 0 {
		t.Errorf("select every: %+v, missing %+v", list, missing)
	}
}
