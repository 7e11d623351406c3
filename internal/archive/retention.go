package archive

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/tenant"
)

var (
	qSequencePosition    = queries.Get("SequencePosition")
	qRangeTenants        = queries.Get("RangeTenants")
	qHoldsOf             = queries.Get("HoldsOf")
	qHolds               = queries.Get("Holds")
	qAddHold             = queries.Get("AddHold")
	qRemoveHold          = queries.Get("RemoveHold")
	qAuditLine           = queries.Get("AuditLine")
	qStageMonth          = queries.Get("StageMonth")
	qDetachReceipts      = queries.Get("DetachReceipts")
	qDetachAttempts      = queries.Get("DetachAttempts")
	qDetachNotifications = queries.Get("DetachNotifications")
	qFinishMonth         = queries.Get("FinishMonth")
	qUndoMonth           = queries.Get("UndoMonth")
	qDeleteKeys          = queries.Get("DeleteKeys")
	qRestorePartitions   = queries.Get("RestorePartitions")
)

// DefaultRetention is OWED_RETENTION's default: how long a settled row is
// kept before its month may be dropped.
const DefaultRetention = 400 * 24 * time.Hour

// keysBatch is how many schedule keys of a dropped month one statement
// deletes.
const keysBatch = 10000

// Retention is how long settled rows are kept: Default, or a tenant's own
// (OWED_RETENTION and OWED_RETENTION_TENANTS).
type Retention struct {
	Default Period          `envconfig:"RETENTION" default:"400d"`
	Tenants TenantRetention `envconfig:"RETENTION_TENANTS"`
}

// For is tenant's retention.
func (r Retention) For(tenantID string) time.Duration {
	if d, ok := r.Tenants[tenantID]; ok {
		return d
	}
	return time.Duration(r.Default)
}

// Period is a retention: whole days ("400d") or a Go duration.
type Period time.Duration

// Decode parses OWED_RETENTION (envconfig.Decoder).
func (p *Period) Decode(s string) error {
	d, err := ParseRetention(s)
	if err != nil {
		return fmt.Errorf("OWED_RETENTION: %w", err)
	}
	*p = Period(d)
	return nil
}

// TenantRetention holds the tenants whose retention is not the default.
type TenantRetention map[string]time.Duration

// retentionSyntax is quoted by every parse error.
const retentionSyntax = `write tenant:duration entries separated by ";", e.g. "acme:800d;trial-co:30d" ` +
	`(a duration is days, "400d", or a Go duration, "72h")`

// Decode parses OWED_RETENTION_TENANTS (envconfig.Decoder), in the form of
// OWED_API_TENANT_LIMITS: a tenant id may hold ":" (the last one ends it)
// but not ";".
func (t *TenantRetention) Decode(s string) error {
	const variable = "OWED_RETENTION_TENANTS"
	out := TenantRetention{}
	for _, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		i := strings.LastIndexByte(entry, ':')
		if i < 0 {
			return fmt.Errorf("%s: %q names no tenant; %s", variable, entry, retentionSyntax)
		}
		id := strings.TrimSpace(entry[:i])
		if err := tenant.Validate(id); err != nil {
			return fmt.Errorf("%s: %q: %v; %s", variable, entry, err, retentionSyntax)
		}
		d, err := ParseRetention(strings.TrimSpace(entry[i+1:]))
		if err != nil {
			return fmt.Errorf("%s: %q: %v; %s", variable, entry, err, retentionSyntax)
		}
		if _, dup := out[id]; dup {
			return fmt.Errorf("%s: tenant %q is named twice; %s", variable, id, retentionSyntax)
		}
		out[id] = d
	}
	*t = out
	return nil
}

// ParseRetention reads a retention: whole days ("400d") or a Go duration
// ("9600h"), at least a day.
func ParseRetention(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*366 {
			return 0, fmt.Errorf("retention %q: want whole days (\"400d\") up to a hundred years, or a Go duration (\"9600h\")", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("retention %q: want whole days (\"400d\") or a Go duration (\"9600h\")", s)
		}
	}
	if d < 24*time.Hour {
		return 0, fmt.Errorf("retention %q: want at least a day (\"1d\"): a shorter one would drop rows the operators still read", s)
	}
	return d, nil
}

// Month is what retention decided about one month of the ledger (one
// partition of each of its three tables).
type Month struct {
	Partition string `json:"partition"`
	// From is 0 for the legacy partition's open start.
	From int64 `json:"from_id"`
	To   int64 `json:"to_id"`
	Rows int64 `json:"rows"`
	// Dropped: archived into Archive, checked, detached and dropped.
	// Drop says it would be (a dry run). Kept says why it stays.
	Dropped bool   `json:"dropped,omitempty"`
	Drop    bool   `json:"would_drop,omitempty"`
	Kept    string `json:"kept,omitempty"`
	Archive string `json:"archive,omitempty"`
	// DetachTime is the renaming and the three detaches (DetachSteps,
	// each), after which no service reaches the month; ArchiveTime the
	// archive's writing and check; DropTime the drop after it; KeysTime
	// the delete of the month's schedule keys after that.
	DetachTime  time.Duration `json:"detach_ns,omitempty"`
	DetachSteps []Step        `json:"detach_steps,omitempty"`
	ArchiveTime time.Duration `json:"archive_ns,omitempty"`
	DropTime    time.Duration `json:"drop_ns,omitempty"`
	KeysTime    time.Duration `json:"keys_ns,omitempty"`
	ArchiveRows int64         `json:"archive_rows,omitempty"`
	ArchiveSize int64         `json:"archive_bytes,omitempty"`

	// tenants are the tenants with rows in the month, for the drop's
	// last look at the holds.
	tenants []string
}

// Step is a named part of a retention step, and how long it took.
type Step struct {
	Name string        `json:"name"`
	Time time.Duration `json:"ns"`
}

// RunOptions says how Run runs.
type RunOptions struct {
	Retention Retention
	// Dir holds one archive folder per dropped month, named for its
	// ledger partition; required unless DryRun.
	Dir string
	// DryRun decides and drops nothing.
	DryRun bool
	// Limit, when above 0, stops the run after it has dropped that many
	// months, so one run's work is bounded.
	Limit int
	// Operator is who runs it, for the operators' trail.
	Operator string
	Now      time.Time
}

// Run applies retention to the ledger (docs/scale.md, "Retention"): each
// month, oldest first, before the one taking new rows, whose rows are all
// settled and older than the retention of every tenant with rows there,
// none of them under a hold, is archived into opts.Dir, the archive read
// back against its checksums, then its three partitions detached
// concurrently and dropped, and its schedule keys deleted in batches. A
// month that stays says why. It runs as the schema's owner, and never
// deletes a ledger row: a month goes whole or stays.
func Run(ctx context.Context, db *sql.DB, opts RunOptions) ([]Month, error) {
	if !opts.DryRun && opts.Dir == "" {
		return nil, errors.New("retention: give the archive folder (--archive-dir): a month is dropped only after its archive is written")
	}
	if opts.Operator == "" {
		return nil, errors.New("retention: name the operator for the operators' trail")
	}
	parts, err := Partitions(ctx, db)
	if err != nil {
		return nil, err
	}
	var last int64
	if err := db.QueryRowContext(ctx, qSequencePosition).Scan(&last); err != nil {
		return nil, fmt.Errorf("retention: read the ledger's id sequence: %w", err)
	}
	var out []Month
	dropped := 0
	for _, p := range parts {
		if p.Parent != "owed_notifications" {
			continue
		}
		if opts.Limit > 0 && dropped == opts.Limit {
			break
		}
		m := Month{Partition: p.Name, From: p.From, To: p.To}
		if p.To > last {
			// The month taking new rows and those after it stay; they
			// are not reported.
			break
		}
		if err := decide(ctx, db, opts, &m); err != nil {
			return out, err
		}
		if m.Kept == "" && !opts.DryRun {
			if err := retire(ctx, db, opts, &m); err != nil {
				return append(out, m), err
			}
			if m.Dropped {
				dropped++
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// decide fills m.Rows and m.Kept (empty: the month may go, m.Drop set).
func decide(ctx context.Context, db *sql.DB, opts RunOptions, m *Month) error {
	from := max(m.From, 1)
	var owed int64
	if err := db.QueryRowContext(ctx, qUnsettled, from, m.To).Scan(&owed); err != nil {
		return fmt.Errorf("retention: %s: %w", m.Partition, err)
	}
	if owed > 0 {
		m.Kept = fmt.Sprintf("%d rows are still owed: a month goes only when every row in it is settled", owed)
		return nil
	}
	rows, err := db.QueryContext(ctx, qRangeTenants, from, m.To)
	if err != nil {
		return fmt.Errorf("retention: %s: %w", m.Partition, err)
	}
	type tenantRows struct {
		id      string
		settled time.Time
	}
	var tenants []tenantRows
	var ids []string
	for rows.Next() {
		var t tenantRows
		var n int64
		var settled sql.NullTime
		if err := rows.Scan(&t.id, &n, &settled); err != nil {
			rows.Close()
			return err
		}
		t.settled = settled.Time
		m.Rows += n
		tenants, ids = append(tenants, t), append(ids, t.id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows.Close()
	holds, err := holdsOf(ctx, db, ids)
	if err != nil {
		return err
	}
	if len(holds) > 0 {
		var named []string
		for _, h := range holds {
			named = append(named, fmt.Sprintf("tenant %s (%q, placed by %s on %s)", h.Tenant, h.Reason, h.HeldBy,
				h.Since.UTC().Format(time.RFC3339)))
		}
		m.Kept = "a compliance hold keeps it: " + strings.Join(named, "; ")
		return nil
	}
	// The month stays until the last of its tenants may let its rows go.
	var until time.Time
	var who string
	for _, t := range tenants {
		if u := t.settled.Add(opts.Retention.For(t.id)); u.After(until) {
			until, who = u, t.id
		}
	}
	if until.After(opts.Now) {
		m.Kept = fmt.Sprintf("tenant %s's rows are kept until %s (settled %s, retention %s)", who,
			until.UTC().Format(time.RFC3339), until.Add(-opts.Retention.For(who)).UTC().Format(time.RFC3339),
			days(opts.Retention.For(who)))
		return nil
	}
	m.Drop, m.tenants = true, ids
	return nil
}

// days renders a retention in days where it is whole days.
func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// retire detaches m's month from the ledger, archives and checks it, and
// drops it (docs/scale.md, "Retention"). The month is detached first, so
// the archive reads tables no service writes any more: what it holds is
// what is dropped, and the drop after it counts nothing, whatever the
// month's size. A month that cannot go once it is staged (a row in it was
// reopened before the detach, its archive failed, a hold came) is attached
// back under its names.
func retire(ctx context.Context, db *sql.DB, opts RunOptions, m *Month) (err error) {
	start := time.Now()
	step := start
	stepDone := func(name string) {
		now := time.Now()
		m.DetachSteps = append(m.DetachSteps, Step{Name: name, Time: now.Sub(step)})
		step = now
	}
	var from sql.NullInt64
	var to int64
	var names []string
	if err := db.QueryRowContext(ctx, qStageMonth, m.Partition).Scan(&from, &to, pq.Array(&names)); err != nil {
		return fmt.Errorf("retention: stage %s: %w", m.Partition, err)
	}
	stepDone("stage")
	// From here on the month is staged: unless it is dropped, it goes back.
	settled := false
	defer func() {
		if settled {
			return
		}
		// On a context of its own: the run's may be what ended it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, uerr := db.ExecContext(uctx, qUndoMonth, from, to, pq.Array(names)); uerr != nil {
			err = errors.Join(err, fmt.Errorf("retention: attach %s back (its partitions are named *_retiring; "+
				"docs/scale.md, \"Retention\", says how to finish): %w", m.Partition, uerr))
		}
	}()
	for _, d := range []struct{ table, q string }{
		{"owed_receipts", qDetachReceipts}, {"owed_notification_attempts", qDetachAttempts},
		{"owed_notifications", qDetachNotifications},
	} {
		if _, err := db.ExecContext(ctx, d.q); err != nil {
			return fmt.Errorf("retention: detach %s of %s: %w", d.table, m.Partition, err)
		}
		stepDone("detach " + d.table)
	}
	m.DetachTime = time.Since(start)

	start = time.Now()
	m.Archive = filepath.Join(opts.Dir, m.Partition)
	man, err := write(ctx, db, true, max(m.From, 1), m.To, m.Archive, opts.Now)
	if errors.Is(err, ErrOwed) {
		// A row was reopened (an operator's redrive) after retention
		// decided: the month waits.
		m.Drop, m.Kept = false, err.Error()
		return nil
	}
	if err != nil {
		return fmt.Errorf("retention: archive %s: %w", m.Partition, err)
	}
	// Read back against the checksums before anything is dropped.
	if man, err = ReadManifest(m.Archive); err != nil {
		return fmt.Errorf("retention: check the archive of %s: %w", m.Partition, err)
	}
	for _, f := range man.Files {
		m.ArchiveRows += f.Rows
		m.ArchiveSize += f.Bytes
	}
	m.ArchiveTime = time.Since(start)

	start = time.Now()
	var kept sql.NullString
	if err := db.QueryRowContext(ctx, qFinishMonth, from, to, pq.Array(names), pq.Array(m.tenants), m.Rows,
		opts.Operator, m.Archive, opts.Now, "retention: every row settled and past its tenant's retention").
		Scan(&kept); err != nil {
		return fmt.Errorf("retention: drop %s: %w", m.Partition, err)
	}
	// Dropped, or attached back by the drop itself.
	settled = true
	if kept.Valid {
		m.Drop, m.Kept = false, kept.String
		return nil
	}
	m.DropTime = time.Since(start)
	start = time.Now()
	for {
		r, err := db.ExecContext(ctx, qDeleteKeys, max(m.From, 1), m.To, keysBatch)
		if err != nil {
			return fmt.Errorf("retention: delete the schedule keys of %s: %w", m.Partition, err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			break
		}
	}
	m.KeysTime = time.Since(start)
	m.Drop, m.Dropped = false, true
	return nil
}

// Hold is a compliance hold on a tenant (owed_retention_holds).
type Hold struct {
	Tenant string    `json:"tenant"`
	Reason string    `json:"reason"`
	HeldBy string    `json:"held_by"`
	Login  string    `json:"login"`
	Since  time.Time `json:"since"`
}

func holdsOf(ctx context.Context, db *sql.DB, tenants []string) ([]Hold, error) {
	return scanHolds(db.QueryContext(ctx, qHoldsOf, pq.Array(tenants)))
}

// Holds lists every compliance hold, oldest first.
func Holds(ctx context.Context, db *sql.DB) ([]Hold, error) {
	return scanHolds(db.QueryContext(ctx, qHolds))
}

func scanHolds(rows *sql.Rows, err error) ([]Hold, error) {
	if err != nil {
		return nil, fmt.Errorf("retention: read the holds: %w", err)
	}
	defer rows.Close()
	var out []Hold
	for rows.Next() {
		var h Hold
		if err := rows.Scan(&h.Tenant, &h.Reason, &h.HeldBy, &h.Login, &h.Since); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out, rows.Err()
}

// AddHold places a hold on tenantID, with a line on the operators' trail;
// false when one was there already (it is left as it is).
func AddHold(ctx context.Context, db *sql.DB, tenantID, reason, operator string, now time.Time) (bool, error) {
	return changeHold(ctx, db, "retention_hold", tenantID, reason, operator, now, func(tx *sql.Tx) (bool, error) {
		err := tx.QueryRowContext(ctx, qAddHold, tenantID, reason, operator, now).Scan(new(string))
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
}

// RemoveHold lifts tenantID's hold, with a line on the operators' trail;
// false when there was none.
func RemoveHold(ctx context.Context, db *sql.DB, tenantID, reason, operator string, now time.Time) (bool, error) {
	return changeHold(ctx, db, "retention_release", tenantID, reason, operator, now, func(tx *sql.Tx) (bool, error) {
		err := tx.QueryRowContext(ctx, qRemoveHold, tenantID).Scan(new(string))
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
}

func changeHold(ctx context.Context, db *sql.DB, action, tenantID, reason, operator string, now time.Time,
	change func(*sql.Tx) (bool, error)) (bool, error) {
	switch {
	case tenant.Validate(tenantID) != nil:
		return false, fmt.Errorf("tenant %q: %v", tenantID, tenant.Validate(tenantID))
	case strings.TrimSpace(reason) == "" || len(reason) > 1024:
		return false, fmt.Errorf("reason %q: say why, in at most 1,024 bytes; it is on the operators' trail", reason)
	case strings.TrimSpace(operator) == "" || len(operator) > 256:
		return false, fmt.Errorf("operator %q: name who acts, in at most 256 bytes", operator)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	changed, err := change(tx)
	if err != nil || !changed {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, qAuditLine, now, operator, action, "tenant="+tenantID, 1, reason); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
