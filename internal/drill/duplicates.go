package drill

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/ledger"
)

// receipt is one send the provider accepted, read from the sandbox's log:
// one line per accept, a duplicate key's included.
type receipt struct {
	key string
	// at is the sandbox's instant of the accept, to the microsecond.
	at time.Time
}

// readReceipts reads every receipt from the sandbox's log, by ledger id.
// The log, unlike the sandbox's /sends, has no size limit and keeps each
// duplicate's own line.
func readReceipts(path string) (map[int64][]receipt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the sandbox log: %w", err)
	}
	defer f.Close()
	out := map[int64][]receipt{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		// Most lines are other outcomes (429s, 5xx) or other messages; a
		// substring test skips them without decoding.
		if !bytes.Contains(line, []byte(`"outcome":"accepted"`)) {
			continue
		}
		var l struct {
			Message        string    `json:"message"`
			Outcome        string    `json:"outcome"`
			Key            string    `json:"key"`
			NotificationID int64     `json:"notification_id"`
			AcceptedAt     time.Time `json:"accepted_at"`
		}
		if json.Unmarshal(line, &l) != nil || l.Message != "sandbox send" || l.Outcome != "accepted" {
			continue
		}
		if l.AcceptedAt.IsZero() {
			return nil, fmt.Errorf("sandbox log: an accept of row %d has no accepted_at: the sandbox is older than the drill (run make build)", l.NotificationID)
		}
		out[l.NotificationID] = append(out[l.NotificationID], receipt{key: l.Key, at: l.AcceptedAt})
	}
	return out, sc.Err()
}

// dupRow is a row the provider received more than once, with every attempt
// the ledger recorded for it.
type dupRow struct {
	id       int64
	state    string
	receipts int
	attempts []ledger.Attempt
	// missing is set when the ledger has no such row.
	missing bool
}

// The per-row duplicate invariant. Every send of a row after its first
// claim is made with the claim mark set, so it is recorded as a possible
// duplicate on whatever path it takes (DESIGN.md, invariant 10). Only one
// send of a row, the first, may go out unflagged, so of a row the provider
// received R times at least R-1 receipts came from flagged sends. The
// ledger records a send only once its answer is back, though: a worker
// killed after the provider's accept leaves no attempt. So "R-1 flagged
// attempts" is not sound (a row received three times, twice from workers
// killed after the accept, has one flagged attempt). What is sound, and
// what the drill checks of every row received R ≥ 2 times:
//
//  1. at least one attempt is recorded as a possible duplicate, of any
//     outcome: the ledger shows the row may have reached the customer
//     twice;
//  2. at most one accepted attempt is recorded unflagged: each recorded
//     accept is one receipt, and only the first send may be unflagged.
//     With A recorded accepts this is "receipts beyond the first ≤ flagged
//     accepts + receipts left unrecorded", R-1 ≤ (A-U) + (R-A), the count
//     rule made sound.
//
// 1 catches a resend whose mark was dropped (a release that cleared it
// before the resend; the lost first send left no attempt); 2 catches one
// whose mark was dropped after another flagged attempt was recorded.
func (d dupRow) breaks() string {
	flagged, unflaggedAccepts := 0, 0
	for _, a := range d.attempts {
		if a.PossibleDuplicate {
			flagged++
		} else if a.Outcome == ledger.AttemptAccepted {
			unflaggedAccepts++
		}
	}
	switch {
	case d.missing:
		return "not in the ledger"
	case flagged == 0:
		return "no attempt recorded as a possible duplicate"
	case unflaggedAccepts > 1:
		return fmt.Sprintf("%d accepted attempts recorded as first sends (at most one may be)", unflaggedAccepts)
	}
	return ""
}

// describe is one offending row with its attempts, for the violation.
func (d dupRow) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "row %d (%s, received %d×; %s): ", d.id, cmp.Or(d.state, "missing"), d.receipts, d.breaks())
	if len(d.attempts) == 0 {
		b.WriteString("no attempts")
	}
	for i, a := range d.attempts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "#%d %s", a.Attempt, a.Outcome)
		if a.HTTPStatus != 0 {
			fmt.Fprintf(&b, " %d", a.HTTPStatus)
		}
		fmt.Fprintf(&b, " at %s", a.FinishedAt.Format("15:04:05.000"))
		if a.PossibleDuplicate {
			b.WriteString(" possible duplicate")
		} else {
			b.WriteString(" first send")
		}
	}
	return b.String()
}

// duplicates is what the per-row duplicate check found.
type duplicates struct {
	// sends counts receipts beyond the first of each row.
	sends int
	// rows lists every row received more than once; unrecorded those that
	// break the invariant.
	rows, unrecorded []dupRow
}

// checkDuplicates reads the attempts of every row the provider received
// more than once and applies the per-row duplicate invariant. The rows are
// few (a duplicate needs a kill in the window between an accept and its
// record), so each is one ledger read.
func checkDuplicates(ctx context.Context, l *ledger.Reads, receipts map[int64][]receipt) (duplicates, error) {
	var out duplicates
	ids := make([]int64, 0)
	for id, rc := range receipts {
		if len(rc) > 1 {
			ids = append(ids, id)
			out.sends += len(rc) - 1
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		d := dupRow{id: id, receipts: len(receipts[id])}
		det, err := l.Get(ctx, devstack.Tenant, id)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			d.missing = true
		case err != nil:
			return out, fmt.Errorf("read row %d's attempts: %w", id, err)
		default:
			d.state, d.attempts = string(det.State), det.History
		}
		out.rows = append(out.rows, d)
		if d.breaks() != "" {
			out.unrecorded = append(out.unrecorded, d)
		}
	}
	return out, nil
}

// dupDetail is how many offending rows a violation spells out.
const dupDetail = 5

// violation is the broken invariant's line: how many rows, and the first
// few with their attempts; "" when it held.
func (d duplicates) violation() string {
	if len(d.unrecorded) == 0 {
		return ""
	}
	parts := make([]string, 0, dupDetail+1)
	for i, r := range d.unrecorded {
		if i == dupDetail {
			parts = append(parts, fmt.Sprintf("… (%d more: %s)", len(d.unrecorded)-dupDetail, idList(dupIDs(d.unrecorded[dupDetail:]), 10)))
			break
		}
		parts = append(parts, r.describe())
	}
	return fmt.Sprintf("%d rows received more than once by the provider without every resend recorded as a possible duplicate: %s",
		len(d.unrecorded), strings.Join(parts, "; "))
}

func dupIDs(rows []dupRow) []int64 {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	return ids
}
