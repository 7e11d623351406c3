package console

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

// The dashboard's history charts: the samples the sweeper's minute cron
// records (owed_history, ledger.RecordHistory), drawn on the server as
// inline SVG, over the last hour (a point a minute) or the last day (a
// point per ten minutes: the largest value of a level, the sum of a count).
// A minute without a sample (the cron paused, the sweeper down) is a gap in
// the line, never a made-up zero.

// historyTTL is how long one reading of the history serves every viewer:
// the sweeper samples once a minute.
const historyTTL = 30 * time.Second

// lineWidth and lineHeight are a history chart's size in SVG units.
const (
	lineWidth  = 600
	lineHeight = 120
)

// historyRange is how far back the charts look and how many minutes each
// point covers.
type historyRange struct {
	Name  string
	Span  time.Duration
	Step  time.Duration
	Label string
}

var historyRanges = []historyRange{
	{Name: "hour", Span: time.Hour, Step: time.Minute, Label: "last hour"},
	{Name: "day", Span: 24 * time.Hour, Step: 10 * time.Minute, Label: "last day"},
}

// rangeNamed is the range called name, the hour by default.
func rangeNamed(name string) historyRange {
	for _, r := range historyRanges {
		if r.Name == name {
			return r
		}
	}
	return historyRanges[0]
}

// line is one series of a chart: an SVG path (gaps where no sample was
// taken) and the last value read.
type line struct {
	Name, Class, Path string
	Last              string
}

// lineChart is one history chart.
type lineChart struct {
	ID, Title     string
	Width, Height int
	Lines         []line
	// Top is the value at the top of the chart, as shown.
	Top      string
	From, To time.Time
	Empty    bool
}

// historyView is the charts of one range.
type historyView struct {
	Range  historyRange
	Ranges []historyRange
	Charts []lineChart
}

// seriesSpec says how one chart draws its series.
type seriesSpec struct {
	id, title, series string
	// seconds: the values are durations in seconds; sum: a point adds up
	// its minutes (a count) rather than taking their largest (a level).
	seconds, sum bool
	// labels fixes the lines and their order; nil: one line per label
	// found, sorted.
	labels []string
	// also draws a second series in the same chart (p95 beside p50).
	also string
}

var historySpecs = []seriesSpec{
	{id: "hist-backlog", title: "Owed backlog by state", series: ledger.SeriesBacklog,
		labels: []string{"pending", "leased", "queued", "sending"}},
	{id: "hist-oldest", title: "Oldest owed age", series: ledger.SeriesOldestOwedAge, seconds: true, labels: []string{""}},
	{id: "hist-lag", title: "Delivery lag p50 and p95", series: ledger.SeriesLagP50, also: ledger.SeriesLagP95, seconds: true},
	{id: "hist-dlq", title: "Dead letters", series: ledger.SeriesDeadLetters, labels: []string{""}},
	{id: "hist-sends", title: "Sent per account", series: ledger.SeriesSends, sum: true},
	{id: "hist-429", title: "Provider 429s per minute, per account", series: ledger.SeriesLimited, sum: true},
}

// readHistory reads the last day of samples, shared by every viewer for
// historyTTL.
func (c *Console) readHistory(ctx context.Context) ([]ledger.Sample, error) {
	return c.o.Ledger.ReadsRole().History(ctx, c.o.Clock.Now().Add(-historyRanges[len(historyRanges)-1].Span).Truncate(time.Minute))
}

// buildHistory lays out every chart of r from samples, the window ending
// with the minute of now.
func buildHistory(samples []ledger.Sample, r historyRange, now time.Time) historyView {
	n := int(r.Span / r.Step)
	last := now.UTC().Truncate(r.Step)
	first := last.Add(-time.Duration(n-1) * r.Step)
	v := historyView{Range: r, Ranges: historyRanges}
	for _, spec := range historySpecs {
		// values[series label] is each point's value; has says which
		// points had a sample.
		type points struct {
			values []float64
			has    []bool
		}
		bySeries := map[string]*points{}
		var order []string
		get := func(name string) *points {
			p := bySeries[name]
			if p == nil {
				p = &points{values: make([]float64, n), has: make([]bool, n)}
				bySeries[name] = p
				order = append(order, name)
			}
			return p
		}
		for _, l := range spec.labels {
			get(lineName(spec, spec.series, l))
		}
		for _, s := range samples {
			if s.Series != spec.series && s.Series != spec.also {
				continue
			}
			if spec.labels != nil && !slices.Contains(spec.labels, s.Label) {
				continue
			}
			i := int(s.Minute.Sub(first) / r.Step)
			if s.Minute.Before(first) || i >= n {
				continue
			}
			p := get(lineName(spec, s.Series, s.Label))
			switch {
			case !p.has[i]:
				p.values[i] = s.Value
			case spec.sum:
				p.values[i] += s.Value
			default:
				p.values[i] = math.Max(p.values[i], s.Value)
			}
			p.has[i] = true
		}
		if spec.labels == nil {
			slices.Sort(order)
		}
		ch := lineChart{ID: spec.id, Title: spec.title, Width: lineWidth, Height: lineHeight, From: first, To: last.Add(r.Step), Empty: true}
		top := 0.0
		for _, name := range order {
			for i, v := range bySeries[name].values {
				if bySeries[name].has[i] {
					top, ch.Empty = math.Max(top, v), false
				}
			}
		}
		if top == 0 {
			top = 1
		}
		ch.Top = formatValue(top, spec.seconds)
		for k, name := range order {
			p := bySeries[name]
			var path strings.Builder
			pen := false
			lastValue := "-"
			for i := range n {
				if !p.has[i] {
					pen = false
					continue
				}
				x := float64(i) * float64(lineWidth) / float64(max(n-1, 1))
				y := float64(lineHeight) - 2 - p.values[i]/top*float64(lineHeight-4)
				cmd := "L"
				if !pen {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x, y)
				if !pen && (i == n-1 || !p.has[i+1]) {
					// A lone point draws as a dot.
					fmt.Fprintf(&path, "l0.1 0 ")
				}
				pen = true
				lastValue = formatValue(p.values[i], spec.seconds)
			}
			ch.Lines = append(ch.Lines, line{Name: name, Class: "s" + strconv.Itoa(k%6), Path: strings.TrimSpace(path.String()), Last: lastValue})
		}
		v.Charts = append(v.Charts, ch)
	}
	return v
}

// lineName names a line in a chart's legend.
func lineName(spec seriesSpec, series, label string) string {
	switch {
	case spec.also != "" && series == spec.series:
		return "p50"
	case spec.also != "":
		return "p95"
	case label == "":
		return spec.title
	}
	return label
}

// formatValue shows a chart's value: a duration, or a number.
func formatValue(v float64, seconds bool) string {
	if seconds {
		d := time.Duration(v * float64(time.Second))
		if d >= time.Second {
			return d.Round(time.Second).String()
		}
		return d.Round(time.Millisecond).String()
	}
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
