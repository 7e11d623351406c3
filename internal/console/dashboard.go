package console

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// DashboardWindow is the window of the dashboard's delivery figures and of
// its chart.
const DashboardWindow = time.Hour

// chartWidth and chartHeight are the sends chart's size in SVG units; one
// bar per minute of DashboardWindow.
const (
	chartWidth  = 600
	chartHeight = 120
)

type stateCount struct {
	State string
	Rows  int64
}

type bar struct {
	X, Y, W, H float64
	Title      string
}

type chart struct {
	Width, Height int
	Bars          []bar
	Max           int64
	Total         int64
	From, To      time.Time
}

type dashData struct {
	// History is the charts of the range the page asked for; it is not
	// part of the shared reading (it has its own, Console.hist).
	History historyView
	Health  ops.Health
	States  []stateCount
	// LastMinute is the accepted sends of the last whole minute.
	LastMinute int64
	Chart      chart
	Pace       paceView
	Problems   []string
}

func (c *Console) dashboard(w http.ResponseWriter, r *http.Request, op operator) {
	d, err := c.dash.Get(r.Context())
	if err != nil {
		d.Problems = append(d.Problems, err.Error())
	}
	// The shared reading's slice is copied before a problem is added.
	d.Problems = slices.Clone(d.Problems)
	samples, err := c.hist.Get(r.Context())
	if err != nil {
		d.Problems = append(d.Problems, "read the history: "+err.Error())
	}
	d.History = buildHistory(samples, rangeNamed(r.URL.Query().Get("range")), c.o.Clock.Now())
	p := page{Title: "Dashboard", Operator: op, CSRF: c.auth.csrf(op), Now: c.o.Clock.Now().UTC(),
		Refresh: int(c.o.Refresh / time.Second), Data: d}
	c.render(w, http.StatusOK, "dashboard", p)
}

// readDashboard reads everything the dashboard shows. Every viewer shares
// one reading per half refresh (Console.dash): the delivery figures sort an
// hour of settled rows, which a tab per operator must not multiply.
func (c *Console) readDashboard(ctx context.Context) (dashData, error) {
	now := c.o.Clock.Now().UTC()
	var d dashData
	h, err := ops.ReadHealth(ctx, c.o.Reads, now, DashboardWindow)
	if err != nil {
		d.Problems = append(d.Problems, err.Error())
	}
	h.DeadLetterDepth, h.DeadLetterUnknown = ops.DeadLetterDepth(ctx, c.o.Queue)
	d.Health = h
	for _, s := range []ledger.State{ledger.StatePending, ledger.StateLeased, ledger.StateQueued, ledger.StateSending} {
		d.States = append(d.States, stateCount{string(s), h.Backlog.ByState[s]})
	}
	minutes, err := c.o.Reads.ReadsRole().SendsPerMinute(ctx, now.Add(-DashboardWindow).Truncate(time.Minute))
	if err != nil {
		d.Problems = append(d.Problems, "read the sends per minute: "+err.Error())
	}
	d.Chart, d.LastMinute = buildChart(minutes, now)
	d.Pace = c.readPace(ctx, &d.Problems)
	return d, nil
}

// buildChart lays out one bar per minute of the window ending at now, the
// current minute last, and answers the last whole minute's accepted sends.
func buildChart(minutes []ledger.MinuteSends, now time.Time) (chart, int64) {
	n := int(DashboardWindow / time.Minute)
	last := now.Truncate(time.Minute)
	first := last.Add(-time.Duration(n-1) * time.Minute)
	counts := make([]int64, n)
	for _, m := range minutes {
		if i := int(m.Minute.Sub(first) / time.Minute); i >= 0 && i < n {
			counts[i] = m.Accepted
		}
	}
	ch := chart{Width: chartWidth, Height: chartHeight, From: first, To: last.Add(time.Minute)}
	for _, v := range counts {
		ch.Max = max(ch.Max, v)
		ch.Total += v
	}
	slot := float64(chartWidth) / float64(n)
	for i, v := range counts {
		hgt := 0.0
		if ch.Max > 0 {
			hgt = float64(v) / float64(ch.Max) * (chartHeight - 2)
		}
		ch.Bars = append(ch.Bars, bar{X: float64(i) * slot, Y: chartHeight - hgt, W: slot - 1, H: hgt,
			Title: first.Add(time.Duration(i)*time.Minute).Format("15:04") + " UTC: " + strconv.FormatInt(v, 10) + " sent"})
	}
	return ch, counts[n-2]
}
