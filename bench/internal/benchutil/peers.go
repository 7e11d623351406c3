package benchutil

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"
)

// The columns of the peer comparison (Row.Column).
const (
	ColDeliveries = "deliveries/s"
	ColExecMicros = "PG exec µs/delivery"
	ColServerCPU  = "PG server CPU µs/delivery"
	ColStatements = "statements/delivery"
	ColXacts      = "transactions/delivery"
	ColNonHOT     = "non-HOT updates/row"
	ColOutsideCPU = "CPU outside PG µs/delivery"
	ColMachineCPU = "machine CPU µs/delivery"
)

// colCores is the last column of the peer comparison: deliveries/s times
// the machine's CPU per delivery, both medians.
const colCores = "cores busy"

// Reference is the peer the comparison divides by: issue 26's target is
// owed ÷ River tuned ≥ 1 in the same sitting.
const Reference = "River tuned"

// peerColumns is the order of the columns after deliveries/s and the
// ratio.
var peerColumns = []string{ColExecMicros, ColServerCPU, ColOutsideCPU, ColMachineCPU, ColStatements, ColXacts, ColNonHOT}

// PrintPeers prints the comparison of owed with its peer from the rows that
// carry a System: one line a system (in the order the rows came), its
// medians in each column, and its deliveries/s divided by Reference's. It
// prints nothing when no row carries a System.
func PrintPeers(rows []Row) { fprintPeers(os.Stdout, rows) }

func fprintPeers(w io.Writer, rows []Row) {
	var systems []string
	cells := map[string]map[string]Summary{}
	for _, r := range rows {
		if r.System == "" || r.Column == "" {
			continue
		}
		if cells[r.System] == nil {
			systems = append(systems, r.System)
			cells[r.System] = map[string]Summary{}
		}
		cells[r.System][r.Column] = r.Value
	}
	if len(systems) == 0 {
		return
	}
	ref, hasRef := cells[Reference][ColDeliveries]
	table := [][]string{append(append([]string{"system", ColDeliveries, "÷ " + Reference}, peerColumns...), colCores)}
	for _, sys := range systems {
		c := cells[sys]
		f := []string{sys, "-", "-"}
		if d, ok := c[ColDeliveries]; ok {
			f[1] = fmt.Sprintf("%.0f (n=%d)", d.Median, d.N)
			if hasRef && ref.Median > 0 {
				f[2] = fmt.Sprintf("%.2f×", d.Median/ref.Median)
			}
		}
		for _, col := range peerColumns {
			v, ok := c[col]
			switch {
			case !ok:
				f = append(f, "-")
			case slices.Contains([]string{ColExecMicros, ColServerCPU, ColOutsideCPU, ColMachineCPU}, col):
				f = append(f, fmt.Sprintf("%.1f", v.Median))
			default:
				f = append(f, fmt.Sprintf("%.3f", v.Median))
			}
		}
		// The cores the system kept busy: its deliveries a second times
		// the machine's CPU per delivery. Near the machine's cores, the
		// CPU a delivery costs is what bounds its rate.
		if d, ok := c[ColDeliveries]; ok {
			if m, ok := c[ColMachineCPU]; ok {
				f = append(f, fmt.Sprintf("%.2f", d.Median*m.Median/1e6))
			} else {
				f = append(f, "-")
			}
		} else {
			f = append(f, "-")
		}
		table = append(table, f)
	}
	widths := make([]int, len(table[0]))
	for _, f := range table {
		for i, s := range f {
			widths[i] = max(widths[i], utf8.RuneCountInString(s))
		}
	}
	fmt.Fprintln(w, "owed and its peer in the same sitting (medians; - where not measured)")
	for _, f := range table {
		var b strings.Builder
		for i, s := range f {
			fmt.Fprintf(&b, "%-*s  ", widths[i], s)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}
