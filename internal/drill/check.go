package drill

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/devstack"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/tenant"
)

// Result is what one drill saw. Violations is empty when every invariant
// held.
type Result struct {
	Seed uint64
	// Queue is the queue backend the stack ran.
	Queue    string
	Faults   []Fault
	Injected map[string]int
	Workers  int
	Tick     time.Duration
	Rate     string
	Spread   time.Duration

	Scheduled                                      int
	Delivered, Expired, Failed, Cancelled, Skipped int
	// StillOwed counts rows unsettled when the drill gave up draining.
	StillOwed int
	// Lost counts rows missing from the ledger, or delivered in the ledger
	// but never accepted by the provider.
	Lost int
	// Duplicates counts receipts at the provider beyond the first of each
	// row; DuplicateRows lists the rows received more than once, and
	// UnrecordedDups those of them that break the per-row duplicate
	// invariant (see dupRow.breaks): a resend the ledger did not record as
	// a possible duplicate.
	Duplicates     int
	DuplicateRows  []int64
	UnrecordedDups []int64
	// PossibleDuplicateRows counts rows with an attempt recorded as a
	// possible duplicate (a claim after a worker died mid-send).
	PossibleDuplicateRows int
	// ExpiredSent lists rows the provider accepted after their expiry, or
	// at all when they were scheduled already expired.
	ExpiredSent []int64
	// AcceptedButSettledOtherwise lists rows the provider accepted before
	// their expiry whose ledger row nevertheless ended expired or failed: a
	// worker died between the accept and the ledger write, and the row's
	// next claim found it expired (or exhausted). The customer was
	// notified; the ledger says otherwise.
	AcceptedButSettledOtherwise []int64
	DeadLetterDepth             int64
	FailedNotDeadLettered       []int64
	SecretsInLogs               []string
	LogDir                      string
	// DeadLettersLost lists failed rows without a dead letter that settled
	// before a queue server keeping its messages in memory (the local SQS
	// server) last came back from a kill -9: the kill took their dead
	// letters, or the server was down when the worker wrote them. Real SQS
	// keeps them; the ledger still holds each row as failed, with its
	// reason.
	DeadLettersLost []int64
	// DeadLettersUnlisted lists failed rows whose dead letter the queue
	// could not show: a backend without a cursor (SQS) lists at most 1,000,
	// and the dead-letter depth holds at least as many unlisted ones. With
	// fewer unlisted than such rows, they are FailedNotDeadLettered.
	DeadLettersUnlisted []int64
	// ScheduleTime is how long posting the workload took; DrainTime is from
	// the faults being cleared to the last row settled (zero when the
	// ledger never drained); CheckTime is the invariant checks' reading of
	// the ledger, the sandbox's log and the dead letters.
	ScheduleTime, DrainTime, CheckTime time.Duration
	Total                              time.Duration

	Violations []string
	// StuckRows describes the rows still owed when the drill gave up
	// draining (stuckRows), so a run that did not drain says why.
	StuckRows []string
}

// ledgerRow is what the checks read of one ledger row.
type ledgerRow struct {
	state                string
	expiresAt, settledAt *time.Time
	accepted             int
	possibleDup          bool
}

// inTenant reads the ledger in the drill tenant's scope.
func inTenant(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	return tenant.InTx(ctx, db, devstack.Tenant, fn)
}

func countOwed(ctx context.Context, db *sql.DB) (n int, err error) {
	err = inTenant(ctx, db, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM owed_notifications WHERE settled_at IS NULL`).Scan(&n)
	})
	return n, err
}

// stuckRowsShown bounds the rows stuckRows describes.
const stuckRowsShown = 20

// stuckRows describes the rows still owed, oldest lease first, up to
// stuckRowsShown of them, one line each with what decides when the row
// moves again: its state and how far its lease_until is from the
// database's now, its attempts, its last error, its account (channel and
// provider) and any intent waiting on it. A drill that did not drain says
// why with these lines, so a failure explains itself.
func stuckRows(ctx context.Context, db *sql.DB) ([]string, error) {
	var out []string
	err := inTenant(ctx, db, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM owed_notifications WHERE settled_at IS NULL`).Scan(&n); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `
SELECT id, state, attempts, channel, coalesce(provider, ''), coalesce(last_error, ''), coalesce(intent, ''),
       extract(epoch FROM due_at - now())::float8,
       extract(epoch FROM lease_until - now())::float8,
       extract(epoch FROM expires_at - now())::float8,
       extract(epoch FROM claimed_at - now())::float8,
       extract(epoch FROM published_at - now())::float8,
       extract(epoch FROM updated_at - now())::float8,
       queue_generation, claim_seq
  FROM owed_notifications
 WHERE settled_at IS NULL
 ORDER BY lease_until NULLS FIRST, id
 LIMIT $1`, stuckRowsShown)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = append(out, fmt.Sprintf("%d rows still owed; the first %d by lease_until (times in seconds from the database's now):", n, min(n, stuckRowsShown)))
		for rows.Next() {
			var (
				id, gen, seq                                 int64
				attempts                                     int
				state, channel, prov, lastErr, intent        string
				due, lease, expires, claimed, published, upd sql.NullFloat64
			)
			if err := rows.Scan(&id, &state, &attempts, &channel, &prov, &lastErr, &intent, &due, &lease, &expires,
				&claimed, &published, &upd, &gen, &seq); err != nil {
				return err
			}
			line := fmt.Sprintf("row %d %s lease_until=%s attempts=%d due_at=%s expires_at=%s claimed_at=%s published_at=%s updated_at=%s generation=%d claims=%d account=%s/%s",
				id, state, secs(lease), attempts, secs(due), secs(expires), secs(claimed), secs(published), secs(upd), gen, seq, channel, prov)
			if intent != "" {
				line += " intent=" + intent
			}
			if lastErr != "" {
				line += fmt.Sprintf(" last_error=%q", lastErr)
			}
			out = append(out, line)
		}
		return rows.Err()
	})
	return out, err
}

// secs writes a number of seconds from now, or "-" for a NULL time.
func secs(v sql.NullFloat64) string {
	if !v.Valid {
		return "-"
	}
	return fmt.Sprintf("%+.1fs", v.Float64)
}

func readLedger(ctx context.Context, db *sql.DB) (map[int64]ledgerRow, error) {
	rows, err := ledger.New(db, nil).Reads.Audit(ctx, devstack.Tenant)
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	out := make(map[int64]ledgerRow, len(rows))
	for _, r := range rows {
		out[r.ID] = ledgerRow{state: string(r.State), expiresAt: r.ExpiresAt, settledAt: r.SettledAt, accepted: r.Accepted,
			possibleDup: r.PossibleDuplicate}
	}
	return out, nil
}

// check compares the workload with the ledger, the sandbox's sends and the
// dead letters, and fills res. lostBefore, when set, is when a queue server
// that loses its dead letters on a kill last came back.
func check(ctx context.Context, db *sql.DB, s *devstack.Stack, rows []row, lostBefore time.Time, res *Result) error {
	ledgerRows, err := readLedger(ctx, db)
	if err != nil {
		return err
	}
	accepts, err := readReceipts(filepath.Join(s.LogDir(), "sandbox.log"))
	if err != nil {
		return err
	}
	dups, err := checkDuplicates(ctx, ledger.New(db, nil).Reads, accepts)
	if err != nil {
		return err
	}
	res.Duplicates, res.DuplicateRows, res.UnrecordedDups = dups.sends, dupIDs(dups.rows), dupIDs(dups.unrecorded)
	dead, err := s.DeadLetteredRows(ctx)
	if err != nil {
		return err
	}
	st, err := s.Queue().Stats(ctx)
	if err != nil {
		return fmt.Errorf("queue stats: %w", err)
	}
	res.DeadLetterDepth = st.DeadLetterDepth
	res.Scheduled = len(rows)
	var lostMissing, lostUnsent, wrongEnd []int64
	for _, r := range rows {
		lr, ok := ledgerRows[r.id]
		if !ok {
			lostMissing = append(lostMissing, r.id)
			continue
		}
		acc := accepts[r.id]
		switch lr.state {
		case "delivered":
			res.Delivered++
			if len(acc) == 0 {
				lostUnsent = append(lostUnsent, r.id)
			}
		case "expired":
			res.Expired++
		case "failed":
			res.Failed++
			switch {
			case dead[r.id]:
			case lr.settledAt != nil && !lr.settledAt.After(lostBefore):
				res.DeadLettersLost = append(res.DeadLettersLost, r.id)
			default:
				res.FailedNotDeadLettered = append(res.FailedNotDeadLettered, r.id)
			}
		case "cancelled":
			res.Cancelled++
		case "skipped":
			res.Skipped++
		default:
			res.StillOwed++
		}
		if lr.possibleDup {
			res.PossibleDuplicateRows++
		}
		if len(acc) > 0 && (lr.state == "expired" || lr.state == "failed") {
			res.AcceptedButSettledOtherwise = append(res.AcceptedButSettledOtherwise, r.id)
		}
		if sentAfterExpiry(r, acc) {
			res.ExpiredSent = append(res.ExpiredSent, r.id)
		}
		want := map[rowKind]string{kindExpired: "expired", kindBounce: "failed", kindCancel: "cancelled"}[r.kind]
		if want != "" && lr.state != want {
			wrongEnd = append(wrongEnd, r.id)
		}
		if r.kind == kindCancel && len(acc) > 0 {
			res.Violations = append(res.Violations, fmt.Sprintf("row %d was cancelled before it fell due but the provider accepted it", r.id))
		}
	}
	res.Lost = len(lostMissing) + len(lostUnsent)
	// Only SQS has no cursor; every other listing is whole.
	if unlisted := st.DeadLetterDepth - int64(len(dead)); res.Queue == backends.SQS && unlisted > 0 &&
		int64(len(res.FailedNotDeadLettered)) <= unlisted {
		res.DeadLettersUnlisted, res.FailedNotDeadLettered = res.FailedNotDeadLettered, nil
	}
	v := &res.Violations
	// The sandbox's own counter must agree with its log, or the drill's
	// view of the sends is incomplete and proves nothing.
	if sst, err := s.Sandbox().Stats(ctx); err != nil {
		return fmt.Errorf("sandbox stats: %w", err)
	} else if sst.Duplicates != int64(res.Duplicates) {
		*v = append(*v, fmt.Sprintf("drill: the sandbox counts %d duplicate sends, its log shows %d: the log is incomplete", sst.Duplicates, res.Duplicates))
	}
	addIDs(v, lostMissing, "lost: scheduled but missing from the ledger")
	addIDs(v, lostUnsent, "lost: delivered in the ledger but never accepted by the provider")
	if res.StillOwed > 0 {
		*v = append(*v, fmt.Sprintf("%d rows still owed after the drain limit (raise --duration-limit, or look at the oldest: owedctl notifications find)", res.StillOwed))
		stuck, err := stuckRows(ctx, db)
		if err != nil {
			return fmt.Errorf("describe the rows still owed: %w", err)
		}
		res.StuckRows = stuck
	}
	if line := dups.violation(); line != "" {
		*v = append(*v, line)
	}
	addIDs(v, res.ExpiredSent, "sent after its expiry")
	addIDs(v, wrongEnd, "ended in the wrong state for its kind (expired/bounce/cancel rows)")
	addIDs(v, res.FailedNotDeadLettered, "failed but not dead-lettered")
	return nil
}

// sentAfterExpiry reports whether the provider accepted r after its expiry,
// or at all when it was scheduled already expired.
func sentAfterExpiry(r row, acc []receipt) bool {
	if r.expiresAt == nil || len(acc) == 0 {
		return false
	}
	if r.kind == kindExpired {
		return true
	}
	return slices.ContainsFunc(acc, func(a receipt) bool { return a.at.After(*r.expiresAt) })
}

// addIDs adds one violation naming up to ten of ids.
func addIDs(v *[]string, ids []int64, what string) {
	if len(ids) == 0 {
		return
	}
	*v = append(*v, fmt.Sprintf("%d rows %s: %s", len(ids), what, idList(ids, 10)))
}

func idList(ids []int64, n int) string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	var parts []string
	for i, id := range ids {
		if i == n {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(ids)-n))
			break
		}
		parts = append(parts, fmt.Sprint(id))
	}
	return strings.Join(parts, ", ")
}

// secretsInLogs reads every file in the log folder and names each secret of
// the run found in one (by kind and file, never the secret itself).
func secretsInLogs(dir string, ep devstack.Endpoints) ([]string, error) {
	secrets := map[string]string{"cron secret": ep.CronSecret, "queue token": ep.QueueToken,
		"service API token": ep.ServiceToken, "tenant API token": ep.TenantToken, "webhook secret": ep.WebhookSecret,
		// The signing key without its whsec_ prefix, as a careless log of
		// the decoded secret would show it.
		"webhook signing key": strings.TrimPrefix(ep.WebhookSecret, "whsec_")}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the log folder: %w", err)
	}
	var found []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		for kind, secret := range secrets {
			if secret != "" && bytes.Contains(b, []byte(secret)) {
				found = append(found, fmt.Sprintf("%s in %s", kind, e.Name()))
			}
		}
	}
	sort.Strings(found)
	return found, nil
}

// Table writes the result as the table `owedctl drill` prints.
func (r *Result) Table(w io.Writer) {
	names := make([]string, len(r.Faults))
	for i, f := range r.Faults {
		names[i] = string(f)
	}
	faults := strings.Join(names, ",")
	if faults == "" {
		faults = "none"
	}
	fmt.Fprintf(w, "owed drill: %d rows, queue %s, faults %s\n  %d workers, tick %s, rate %s, rows due over %s, seed %d\n\n",
		r.Scheduled, r.Queue, faults, r.Workers, r.Tick, r.Rate, r.Spread, r.Seed)
	if len(r.Injected) > 0 {
		fmt.Fprintln(w, "faults injected")
		kinds := make([]string, 0, len(r.Injected))
		for k := range r.Injected {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			fmt.Fprintf(w, "  %-36s %8d\n", k, r.Injected[k])
		}
		fmt.Fprintln(w)
	}
	drain := "did not drain"
	if r.DrainTime > 0 {
		drain = r.DrainTime.Round(100 * time.Millisecond).String()
	}
	dupRows := fmt.Sprint(len(r.DuplicateRows))
	if len(r.DuplicateRows) > 0 {
		dupRows += "  (rows " + idList(r.DuplicateRows, 20) + ")"
	}
	lines := []struct{ k, v string }{
		{"rows scheduled", fmt.Sprint(r.Scheduled)},
		{"delivered", fmt.Sprint(r.Delivered)},
		{"expired", fmt.Sprint(r.Expired)},
		{"failed", fmt.Sprint(r.Failed)},
		{"cancelled", fmt.Sprint(r.Cancelled)},
		{"skipped", fmt.Sprint(r.Skipped)},
		{"still owed (must be 0)", fmt.Sprint(r.StillOwed)},
		{"lost (must be 0)", fmt.Sprint(r.Lost)},
		{"duplicate sends at the provider", fmt.Sprint(r.Duplicates)},
		{"rows received more than once", dupRows},
		{"  a resend unrecorded (must be 0)", fmt.Sprint(len(r.UnrecordedDups))},
		{"rows with a possible-duplicate attempt", fmt.Sprint(r.PossibleDuplicateRows)},
		{"expired rows sent (must be 0)", fmt.Sprint(len(r.ExpiredSent))},
		{"accepted, then settled expired/failed", fmt.Sprint(len(r.AcceptedButSettledOtherwise))},
		{"dead-letter depth", fmt.Sprint(r.DeadLetterDepth)},
		{"failed, not dead-lettered (must be 0)", fmt.Sprint(len(r.FailedNotDeadLettered))},
		{"dead letters lost in a queue restart", fmt.Sprint(len(r.DeadLettersLost))},
		{"dead letters past the queue's listing", fmt.Sprint(len(r.DeadLettersUnlisted))},
		{"secrets in logs (must be 0)", fmt.Sprint(len(r.SecretsInLogs))},
		{"time to schedule the workload", r.ScheduleTime.Round(100 * time.Millisecond).String()},
		{"time to drain after faults cleared", drain},
		{"time to check the invariants", r.CheckTime.Round(100 * time.Millisecond).String()},
		{"total", r.Total.Round(100 * time.Millisecond).String()},
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %-40s %s\n", l.k, l.v)
	}
	fmt.Fprintln(w)
	if len(r.Violations) == 0 {
		fmt.Fprintln(w, "invariants: all held")
		return
	}
	fmt.Fprintf(w, "invariants: %d broken\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  - %s\n", v)
	}
	for _, l := range r.StuckRows {
		fmt.Fprintf(w, "    %s\n", l)
	}
	fmt.Fprintf(w, "logs: %s\n", r.LogDir)
}
