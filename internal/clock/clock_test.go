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
