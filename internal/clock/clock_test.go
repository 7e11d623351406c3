package clock

import (
	"context"
	"testing"
	"time"
)

func TestRealLeavesSQLToTheDatabase(t *testing.T) {
	c := Real()
	if c.NowOrNil() != nil {
		t.Fatal("Real().NowOrNil() must be nil so SQL reads now()")
	}
	if got := c.Now(); got.Location() != time.UTC || got.Nanosecond()%1000 != 0 {
		t.Fatalf("Now() = %v: want UTC rounded to the microsecond", got)
	}
}

func TestStubStandsStillAndMoves(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.FixedZone("x", 3600))
	s := NewStub(start)
	if !s.Now().Equal(start.Truncate(time.Microsecond)) {
		t.Fatalf("Now() = %v, want %v", s.Now(), start)
	}
	if p := s.NowOrNil(); p == nil || !p.Equal(s.Now()) {
		t.Fatalf("NowOrNil() = %v, want the stubbed instant", p)
	}
	if got := s.Advance(time.Hour); !got.Equal(start.Add(time.Hour).Truncate(time.Microsecond)) {
		t.Fatalf("Advance = %v", got)
	}
}

func TestOffsetShiftsTheWallClock(t *testing.T) {
	o := Offset(time.Hour)
	if d := o.Now().Sub(time.Now()); d < 59*time.Minute {
		t.Fatalf("Offset(1h).Now() is only %v ahead", d)
	}
	if o.NowOrNil() == nil {
		t.Fatal("an offset clock must pass its instant to SQL")
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on an ended context reported a full wait")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep(1ms) did not report a full wait")
	}
}

func TestSteppingMovesTheWallClockButNoDuration(t *testing.T) {
	var s Stepping
	if s.NowOrNil() != nil {
		t.Fatal("a stepped host's SQL must read the database's clock")
	}
	before, wallBefore := Read(&s), s.Now()
	s.Step(-time.Hour)
	if d := wallBefore.Sub(s.Now()); d < 59*time.Minute {
		t.Fatalf("after Step(-1h) the wall clock went back only %v", d)
	}
	after := Read(&s)
	if d := after.Sub(before); d < 0 || d > time.Minute {
		t.Fatalf("a wall step of an hour moved the time between two readings to %v", d)
	}
	if deadline := before.Add(time.Hour); !deadline.After(after) {
		t.Fatal("a deadline an hour after the first reading has passed")
	}
}

func TestReadingsOfATestClockFollowItsInstants(t *testing.T) {
	s := NewStub(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r := Read(s)
	s.Advance(time.Hour)
	if d := Read(s).Sub(r); d != time.Hour {
		t.Fatalf("an hour passed on the stub, its readings say %v", d)
	}
	var _ Monotonic = Real().(Monotonic)
	var _ Monotonic = Offset(0)
}
