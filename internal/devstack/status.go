package devstack

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/ledger"
)

const (
	// panelEvery is how often a terminal's panel is redrawn.
	panelEvery = 2 * time.Second
	// plainEvery is how often a status line is printed when the output is
	// not a terminal (a CI log, a pipe): often enough to follow, rarely
	// enough to read.
	plainEvery = 10 * time.Second
	// statusTimeout bounds one round of status reads.
	statusTimeout = 5 * time.Second
	// rateWindow is the window of the sends-per-minute figure; minRateSpan
	// is the shortest span it is shown for, since the provider's burst
	// makes the first seconds read far above the limit.
	rateWindow  = time.Minute
	minRateSpan = 20 * time.Second
)

// Status is one reading of the running system. The settled counts and the
// lag cover this run (rows settled since it started); Owed and Queued are
// everything unsettled, including what an earlier run left.
type Status struct {
	// Owed counts pending rows; Queued the rows leased, queued or being
	// sent.
	Owed, Queued               int64
	Delivered, Expired, Failed int64
	DeadLetters                int64
	LagP95                     time.Duration
	// DuplicateRows and PossibleDuplicates come from the ledger's attempts;
	// ProviderDuplicates from the sandbox, which counts a second accepted
	// send of one idempotency key. Every one should read 0.
	DuplicateRows, PossibleDuplicates, ProviderDuplicates int64
	// Accepted counts the sandbox's accepted sends since it started.
	Accepted int64
}

// Duplicates is the sum of every duplicate count.
func (st Status) Duplicates() int64 {
	return st.DuplicateRows + st.PossibleDuplicates + st.ProviderDuplicates
}

// Status reads the ledger (as the application role; the ledger's operator
// aggregates run under its bypass), the queue and the sandbox.
func (s *Stack) Status(ctx context.Context) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var st Status
	b, err := s.ledger.Backlog(ctx)
	if err != nil {
		return st, fmt.Errorf("ledger backlog: %w", err)
	}
	st.Owed = b.ByState[ledger.StatePending]
	st.Queued = b.ByState[ledger.StateLeased] + b.ByState[ledger.StateQueued] + b.ByState[ledger.StateSending]
	ls, err := s.ledger.Stats(ctx, s.started)
	if err != nil {
		return st, fmt.Errorf("ledger stats: %w", err)
	}
	st.Delivered, st.Expired, st.Failed, st.LagP95 = ls.Delivered, ls.Expired, ls.Failed, ls.LagP95
	st.DuplicateRows, st.PossibleDuplicates = ls.DuplicateRows, ls.PossibleDuplicates
	qs, err := s.queue.Stats(ctx)
	if err != nil {
		return st, fmt.Errorf("queue stats: %w", err)
	}
	st.DeadLetters = qs.DeadLetterDepth
	ss, err := s.sandbox.Stats(ctx)
	if err != nil {
		return st, fmt.Errorf("sandbox stats: %w", err)
	}
	st.ProviderDuplicates, st.Accepted = ss.Duplicates, ss.Accepted
	return st, nil
}

// panel shows the status until ctx ends: redrawn in place on a terminal,
// a line every plainEvery otherwise.
func (s *Stack) panel(ctx context.Context) {
	every := plainEvery
	if s.cfg.Terminal {
		every = panelEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		st, err := s.Status(ctx)
		if ctx.Err() != nil {
			return
		}
		lines := s.statusLines(st, err, s.meter.perMinute(time.Now(), st.Accepted))
		if s.cfg.Terminal {
			s.drawPanel(lines)
		} else {
			fmt.Fprintf(s.cfg.Out, "%s %s\n", time.Now().Format("15:04:05"), strings.Join(lines, " | "))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Stack) statusLines(st Status, err error, perMin float64) []string {
	rate := "measuring"
	if perMin >= 0 {
		rate = fmt.Sprintf("%.0f", perMin)
	}
	if err != nil {
		return []string{"status unavailable: " + err.Error()}
	}
	lines := []string{
		fmt.Sprintf("owed %d  queued %d  delivered %d  expired %d  failed %d  dead letters %d",
			st.Owed, st.Queued, st.Delivered, st.Expired, st.Failed, st.DeadLetters),
		fmt.Sprintf("p95 lag %s  duplicates %d  sends/min %s (limit %.0f)  up %s",
			st.LagP95.Round(100*time.Millisecond), st.Duplicates(), rate, float64(s.rate.Count)*float64(time.Minute)/float64(s.rate.Per),
			time.Since(s.started).Round(time.Second)),
	}
	if sweeps, fail := s.sched.state(); fail != "" {
		lines = append(lines, fmt.Sprintf("scheduler: %s (see logs/scheduler.log; %d sweeps ok)", fail, sweeps))
	}
	if e := s.seeder.err(); e != "" {
		lines = append(lines, "seeder: "+e)
	}
	return lines
}

// drawPanel prints lines over the previous panel.
func (s *Stack) drawPanel(lines []string) {
	var b strings.Builder
	if s.panelHeight > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", s.panelHeight)
	}
	for _, l := range lines {
		// Clear the line first: a shorter reading must not leave the tail
		// of a longer one.
		b.WriteString("\x1b[2K" + l + "\n")
	}
	// A panel that shrank leaves stale lines below it; clear them.
	b.WriteString("\x1b[J")
	s.panelHeight = len(lines)
	io.WriteString(s.cfg.Out, b.String())
}

// endPanel leaves the last panel in place and prints a final reading. Call
// it once the panel goroutine has stopped.
func (s *Stack) endPanel() {
	if s.ledger == nil || s.queue == nil {
		return
	}
	st, err := s.Status(context.Background())
	lines := s.statusLines(st, err, s.meter.perMinute(time.Now(), st.Accepted))
	fmt.Fprintf(s.cfg.Out, "\nfinal (this run): %s\n", strings.Join(lines[:min(2, len(lines))], "  "))
}

// rateMeter turns the sandbox's accepted counter into sends per minute over
// the last rateWindow; -1 until it has minRateSpan of samples.
type rateMeter struct {
	samples []sample
}

type sample struct {
	at       time.Time
	accepted int64
}

func (m *rateMeter) perMinute(now time.Time, accepted int64) float64 {
	m.samples = append(m.samples, sample{now, accepted})
	for len(m.samples) > 2 && now.Sub(m.samples[1].at) >= rateWindow {
		m.samples = m.samples[1:]
	}
	first := m.samples[0]
	elapsed := now.Sub(first.at)
	if elapsed < minRateSpan {
		return -1
	}
	return float64(accepted-first.accepted) / elapsed.Minutes()
}
