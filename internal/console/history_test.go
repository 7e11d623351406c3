package console

import (
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// The hour's charts draw a point a minute with a gap where no sample was
// taken; the day's take each ten minutes' largest level and sum of counts.
func TestBuildHistory(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 30, 0, time.UTC)
	var samples []ledger.Sample
	for i := range 60 {
		m := now.Truncate(time.Minute).Add(-time.Duration(i) * time.Minute)
		if i == 30 {
			continue // the cron missed a minute
		}
		samples = append(samples, ledger.Sample{Minute: m, Series: ledger.SeriesBacklog, Label: "pending", Value: float64(i)},
			ledger.Sample{Minute: m, Series: ledger.SeriesSends, Label: "sandbox", Value: 2},
			ledger.Sample{Minute: m, Series: ledger.SeriesLagP95, Value: 1.5})
	}
	hour := buildHistory(samples, rangeNamed("hour"), now)
	charts := map[string]lineChart{}
	for _, c := range hour.Charts {
		charts[c.ID] = c
	}
	backlog := charts["hist-backlog"]
	if len(backlog.Lines) != 4 || backlog.Lines[0].Name != "pending" || backlog.Top != "59" || backlog.Empty {
		t.Fatalf("the backlog chart: %+v", backlog)
	}
	if moves := strings.Count(backlog.Lines[0].Path, "M"); moves != 2 {
		t.Errorf("the pending line starts %d times, want twice (one gap): %s", moves, backlog.Lines[0].Path)
	}
	if backlog.Lines[1].Path != "" {
		t.Errorf("the leased line, never sampled, draws %q", backlog.Lines[1].Path)
	}
	if lag := charts["hist-lag"]; len(lag.Lines) != 1 || lag.Lines[0].Name != "p95" || lag.Top != "2s" {
		t.Errorf("the lag chart: %+v", lag)
	}
	if !charts["hist-dlq"].Empty {
		t.Errorf("the dead-letter chart, never sampled, is not empty")
	}
	day := buildHistory(samples, rangeNamed("day"), now)
	for _, c := range day.Charts {
		if c.ID == "hist-sends" && (c.Top != "20" || len(c.Lines) != 1 || c.Lines[0].Name != "sandbox") {
			t.Errorf("the day's sends chart: %+v, want ten minutes of 2 summed to a top of 20", c)
		}
		if c.ID == "hist-backlog" && c.Top != "59" {
			t.Errorf("the day's backlog chart tops at %s, want the largest level, 59", c.Top)
		}
	}
	if rangeNamed("week").Name != "hour" {
		t.Error("an unknown range is not the hour")
	}
}
