package pace

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// An account error pauses the account for every process: its pace holds
// every reservation back, Admit answers the pause, and when it has passed
// exactly one of many concurrent callers takes the probe. On-call's resume
// closes the circuit; a second resume says there was nothing to resume.
func TestAccountTripProbeResume(t *testing.T) {
	b := setup(t)
	accounts, oncall := NewAccounts(b.db.App, b.clk), NewAccounts(b.db.Operator, b.clk)
	limited := mustNew(t, b.process(t), "twilio", Rate{10, time.Second}, WithClock(b.clk))
	if err := accounts.Trip(ctx, "twilio", time.Minute, "20003", "Authenticate"); err != nil {
		t.Fatal(err)
	}
	if r := mustReserve(t, limited, 2*time.Second); r.Granted || r.Wait != time.Minute {
		t.Fatalf("reservation on a paused account = %+v, want refused a minute away", r)
	}
	a, err := NewAccounts(b.process(t), b.clk).Admit(ctx, "twilio", time.Minute)
	if err != nil || a.Probe || !a.Open() || a.Wait != time.Minute || a.Reason != "20003" || a.Error != "Authenticate" {
		t.Fatalf("Admit on a paused account = %+v, %v", a, err)
	}

	b.clk.Advance(time.Minute)
	var probes atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			a, err := NewAccounts(b.process(t), b.clk).Admit(ctx, "twilio", time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if a.Probe {
				probes.Add(1)
			} else if a.Wait != time.Minute {
				t.Errorf("a caller that did not probe waits %s, want the pause again (1m)", a.Wait)
			}
		})
	}
	wg.Wait()
	if probes.Load() != 1 {
		t.Fatalf("%d callers took the probe, want exactly 1", probes.Load())
	}

	if was, err := oncall.Resume(ctx, "twilio", "alice", ""); err != nil || !was {
		t.Fatalf("Resume = %v, %v; want the circuit to have been open", was, err)
	}
	if a, err := accounts.Admit(ctx, "twilio", time.Minute); err != nil || a.Open() || a.Wait != 0 || a.Probe {
		t.Fatalf("Admit after the resume = %+v, %v; want free to send", a, err)
	}
	if r := mustReserve(t, limited, 0); !r.Granted {
		t.Fatalf("reservation after the resume = %+v, want granted", r)
	}
	if was, err := oncall.Resume(ctx, "twilio", "alice", ""); err != nil || was {
		t.Fatalf("second Resume = %v, %v; want nothing to resume", was, err)
	}
	if a, err := accounts.Admit(ctx, "sendgrid", time.Minute); err != nil || a.Open() || a.Wait != 0 {
		t.Fatalf("Admit of an account never seen = %+v, %v", a, err)
	}
}

// A 429 on an unlimited account (OWED_PROVIDER_RATE unset) is shared: a
// limiter in another process sees the pause in its Next, and Admit
// answers it.
func TestUnlimitedPauseIsShared(t *testing.T) {
	b := setup(t)
	saw429 := mustNew(t, b.process(t), "slack", Unlimited, WithClock(b.clk))
	other := mustNew(t, b.process(t), "slack", Unlimited, WithClock(b.clk))
	if err := saw429.Pause(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := other.Next(ctx); err != nil || d != 10*time.Second {
		t.Fatalf("the other process's Next = %s, %v; want the shared 10s pause", d, err)
	}
	if a, err := NewAccounts(b.process(t), b.clk).Admit(ctx, "slack", time.Minute); err != nil || a.Open() || a.Wait != 10*time.Second {
		t.Fatalf("Admit during a shared 429 pause = %+v, %v", a, err)
	}
	b.clk.Advance(10 * time.Second)
	if d, err := other.Next(ctx); err != nil || d != 0 {
		t.Fatalf("Next after the pause = %s, %v; want 0", d, err)
	}
}
