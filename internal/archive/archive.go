// Package archive writes a range of the ledger (the rows of an id range,
// which is what a partition of the ledger will hold: docs/scale.md) to
// compressed, line-delimited JSON files with a manifest and checksums, and
// restores such files into the ledger. It never writes a row that is still
// owed into an archive, and never changes an archive once written; a
// restore verifies every file against the manifest before it writes
// anything, and makes tombstones again of the rows an erasure named since
// the archive was written (ledger.Erase). It runs as the schema's owner:
// an archive spans tenants.
package archive

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/sqlfile"
)

//go:embed sql/queries.sql
var queriesSQL string

var queries = sqlfile.MustParse("internal/archive/sql/queries.sql", queriesSQL)

var (
	qUnsettled            = queries.Get("Unsettled")
	qNotifications        = queries.Get("Notifications")
	qAttempts             = queries.Get("Attempts")
	qReceipts             = queries.Get("Receipts")
	qEventPayloads        = queries.Get("EventPayloads")
	qRestoreNotifications = queries.Get("RestoreNotifications")
	qRestoreExpiries      = queries.Get("RestoreExpiries")
	qRestoreAttempts      = queries.Get("RestoreAttempts")
	qRestoreReceipts      = queries.Get("RestoreReceipts")
	qRestorePayloads      = queries.Get("RestoreEventPayloads")
	qUncountRestored      = queries.Get("UncountRestored")
	qReapplyErasures      = queries.Get("ReapplyErasures")
	qDropOrphanPayloads   = queries.Get("DropOrphanPayloads")
	qRecordRestore        = queries.Get("RecordRestore")

	qUnsettledRetiring     = queries.Get("UnsettledRetiring")
	qNotificationsRetiring = queries.Get("NotificationsRetiring")
	qAttemptsRetiring      = queries.Get("AttemptsRetiring")
	qReceiptsRetiring      = queries.Get("ReceiptsRetiring")
	qEventPayloadsRetiring = queries.Get("EventPayloadsRetiring")
)

// Format is the archive format this build writes and reads.
const Format = 1

// ManifestName and SumsName are the archive's manifest and its checksums in
// the form `sha256sum -c` reads.
const (
	ManifestName = "manifest.json"
	SumsName     = "SHA256SUMS"
)

// restoreBatch is how many lines one restore statement inserts.
const restoreBatch = 1000

// File is one table's file in an archive.
type File struct {
	Name  string `json:"name"`
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	// SHA256 is the compressed file's checksum, hex.
	SHA256 string `json:"sha256"`
}

// Manifest describes an archive: the id range of its rows, when it was
// written, and each file.
type Manifest struct {
	Format    int       `json:"format"`
	FromID    int64     `json:"from_id"`
	ToID      int64     `json:"to_id"`
	WrittenAt time.Time `json:"written_at"`
	Files     []File    `json:"files"`
}

// table is one file of an archive: the table, the statement that restores
// a batch, and the queries that read the range from the ledger and from a
// month retention has detached (retention.go). The order is the restore's:
// payloads before the rows that point at them, rows before their attempts
// and receipts.
type table struct {
	name, restore      string
	read, readRetiring string
}

var tables = []table{
	{"owed_event_payloads", qRestorePayloads, qEventPayloads, qEventPayloadsRetiring},
	{"owed_notifications", qRestoreNotifications, qNotifications, qNotificationsRetiring},
	{"owed_notification_attempts", qRestoreAttempts, qAttempts, qAttemptsRetiring},
	{"owed_receipts", qRestoreReceipts, qReceipts, qReceiptsRetiring},
}

// ErrOwed is returned when the range holds rows still owed.
var ErrOwed = errors.New("archive: the range holds rows still owed")

// Write archives the rows of ids [from, to) with their attempts, receipts
// and shared payloads into dir (created; it must not exist or be empty),
// all read in one snapshot, and returns the manifest it wrote. It refuses a
// range that holds a row still owed.
func Write(ctx context.Context, db *sql.DB, from, to int64, dir string, now time.Time) (Manifest, error) {
	return write(ctx, db, false, from, to, dir, now)
}

// write is Write; retiring reads the month retention has detached (the
// *_retiring tables) instead of the ledger.
func write(ctx context.Context, db *sql.DB, retiring bool, from, to int64, dir string, now time.Time) (Manifest, error) {
	m := Manifest{Format: Format, FromID: from, ToID: to, WrittenAt: now.UTC()}
	if from < 1 || to <= from {
		return m, fmt.Errorf("archive: the id range [%d, %d) is empty: give from < to, from at least 1", from, to)
	}
	if err := emptyDir(dir); err != nil {
		return m, err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return m, err
	}
	defer tx.Rollback()
	unsettled := qUnsettled
	if retiring {
		unsettled = qUnsettledRetiring
	}
	var owed int64
	if err := tx.QueryRowContext(ctx, unsettled, from, to).Scan(&owed); err != nil {
		return m, err
	}
	if owed > 0 {
		return m, fmt.Errorf("%w: %d rows of [%d, %d) are not settled; an archive takes settled rows only", ErrOwed,
			owed, from, to)
	}
	for _, t := range tables {
		read := t.read
		if retiring {
			read = t.readRetiring
		}
		f, err := writeFile(ctx, tx, t.name, read, from, to, dir)
		if err != nil {
			return m, fmt.Errorf("archive %s: %w", t.name, err)
		}
		m.Files = append(m.Files, f)
	}
	return m, writeManifest(dir, m)
}

func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("archive: create %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("archive: read %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("archive: %s is not empty: an archive is written once, into a folder of its own", dir)
	}
	return nil
}

func writeFile(ctx context.Context, tx *sql.Tx, name, read string, from, to int64, dir string) (File, error) {
	f := File{Name: name + ".jsonl.gz", Table: name}
	out, err := os.OpenFile(filepath.Join(dir, f.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return f, err
	}
	defer out.Close()
	sum := sha256.New()
	counted := &countingWriter{w: io.MultiWriter(out, sum)}
	zw := gzip.NewWriter(counted)
	rows, err := tx.QueryContext(ctx, read, from, to)
	if err != nil {
		return f, err
	}
	defer rows.Close()
	bw := bufio.NewWriterSize(zw, 1<<16)
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return f, err
		}
		bw.WriteString(line)
		bw.WriteByte('\n')
		f.Rows++
	}
	if err := rows.Err(); err != nil {
		return f, err
	}
	if err := bw.Flush(); err != nil {
		return f, err
	}
	if err := zw.Close(); err != nil {
		return f, err
	}
	if err := out.Sync(); err != nil {
		return f, err
	}
	f.Bytes, f.SHA256 = counted.n, hex.EncodeToString(sum.Sum(nil))
	return f, out.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o640); err != nil {
		return err
	}
	var sums strings.Builder
	for _, f := range m.Files {
		fmt.Fprintf(&sums, "%s  %s\n", f.SHA256, f.Name)
	}
	return os.WriteFile(filepath.Join(dir, SumsName), []byte(sums.String()), 0o640)
}

// ReadManifest reads dir's manifest and checks every file against it:
// its size and checksum. A missing, changed or truncated file is named.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return m, fmt.Errorf("archive: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("archive: %s: %w", ManifestName, err)
	}
	if m.Format != Format {
		return m, fmt.Errorf("archive: %s says format %d; this build reads format %d", ManifestName, m.Format, Format)
	}
	for _, f := range m.Files {
		if f.Name != filepath.Base(f.Name) {
			return m, fmt.Errorf("archive: %s names %q, which is not a file of the archive's folder", ManifestName, f.Name)
		}
		in, err := os.Open(filepath.Join(dir, f.Name))
		if err != nil {
			return m, fmt.Errorf("archive: %w", err)
		}
		sum := sha256.New()
		n, err := io.Copy(sum, in)
		in.Close()
		if err != nil {
			return m, fmt.Errorf("archive: read %s: %w", f.Name, err)
		}
		if got := hex.EncodeToString(sum.Sum(nil)); n != f.Bytes || got != f.SHA256 {
			return m, fmt.Errorf("archive: %s is %d bytes with sha256 %s; the manifest says %d bytes, %s: "+
				"the file changed since it was written", f.Name, n, got, f.Bytes, f.SHA256)
		}
	}
	return m, nil
}

// Restored counts what a restore wrote.
type Restored struct {
	// Rows counts, per table, the lines inserted; a line whose row is
	// there already is not counted.
	Rows map[string]int64 `json:"rows"`
	// Erased counts the restored rows made tombstones again, because an
	// erasure named them after the archive was written.
	Erased int64 `json:"erased"`
}

// Restore writes dir's archive back into the ledger in one transaction,
// after ReadManifest has checked every file. Rows keep their ids; a row
// already in the ledger is left as it is, so restoring twice writes
// nothing new. Rows an erasure named (owed_erasures) come back as
// tombstones, and shared payloads only they pointed at do not come back.
// The restore is a line on the operators' audit trail (owed_operator_audit),
// as an erasure is: by, the id range and the archive, and the rows it
// wrote back, committed with them.
func Restore(ctx context.Context, db *sql.DB, dir string, by Operator) (Restored, error) {
	res := Restored{Rows: map[string]int64{}}
	if err := by.validate(); err != nil {
		return res, err
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return res, err
	}
	byTable := map[string]File{}
	for _, f := range m.Files {
		byTable[f.Table] = f
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return res, err
	}
	defer tx.Rollback()
	// A month retention dropped gets its partitions back first.
	if _, err := tx.ExecContext(ctx, qRestorePartitions, m.FromID, m.ToID); err != nil {
		return res, fmt.Errorf("archive: make the partitions of [%d, %d): %w", m.FromID, m.ToID, err)
	}
	var payloadTenants []string
	var payloadIDs []int64
	// The rows and attempts the restore inserted, which the per-minute
	// counters' triggers count as they go in: the counters kept them when
	// retention dropped the month, so they are taken off again below.
	var rowIDs, attemptRows, attemptIDs []int64
	for _, t := range tables {
		f, ok := byTable[t.name]
		if !ok {
			return res, fmt.Errorf("archive: %s lists no file of %s", ManifestName, t.name)
		}
		err := eachBatch(filepath.Join(dir, f.Name), func(lines []string) error {
			batch := "[" + strings.Join(lines, ",") + "]"
			switch t.name {
			case "owed_notifications":
				rows, err := tx.QueryContext(ctx, t.restore, batch)
				if err != nil {
					return err
				}
				var ids []int64
				for rows.Next() {
					var id int64
					if err := rows.Scan(&id); err != nil {
						rows.Close()
						return err
					}
					ids = append(ids, id)
				}
				if err := rows.Err(); err != nil {
					return err
				}
				res.Rows[t.name] += int64(len(ids))
				rowIDs = append(rowIDs, ids...)
				_, err = tx.ExecContext(ctx, qRestoreExpiries, batch, pq.Array(ids))
				return err
			case "owed_notification_attempts":
				rows, err := tx.QueryContext(ctx, t.restore, batch)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var row, id int64
					if err := rows.Scan(&row, &id); err != nil {
						return err
					}
					attemptRows, attemptIDs = append(attemptRows, row), append(attemptIDs, id)
					res.Rows[t.name]++
				}
				return rows.Err()
			case "owed_event_payloads":
				for _, l := range lines {
					var p struct {
						TenantID string `json:"tenant_id"`
						ID       int64  `json:"id"`
					}
					if err := json.Unmarshal([]byte(l), &p); err != nil {
						return err
					}
					payloadTenants, payloadIDs = append(payloadTenants, p.TenantID), append(payloadIDs, p.ID)
				}
			}
			r, err := tx.ExecContext(ctx, t.restore, batch)
			if err != nil {
				return err
			}
			n, _ := r.RowsAffected()
			res.Rows[t.name] += n
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("archive: restore %s: %w", f.Name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, qUncountRestored, pq.Array(rowIDs), pq.Array(attemptRows),
		pq.Array(attemptIDs)); err != nil {
		return res, fmt.Errorf("archive: take the restored rows off the per-minute counters: %w", err)
	}
	var attempts int64
	if err := tx.QueryRowContext(ctx, qReapplyErasures, m.FromID, m.ToID).Scan(&res.Erased, &attempts); err != nil {
		return res, fmt.Errorf("archive: apply the erasures again: %w", err)
	}
	if _, err := tx.ExecContext(ctx, qDropOrphanPayloads, pq.Array(payloadTenants), pq.Array(payloadIDs)); err != nil {
		return res, fmt.Errorf("archive: drop the erased recipients' payloads: %w", err)
	}
	// The line commits with the rows it describes, or neither does.
	target := fmt.Sprintf("ids [%d, %d) from %s written %s: attempts=%d receipts=%d payloads=%d erased_again=%d",
		m.FromID, m.ToID, dir, m.WrittenAt.UTC().Format(time.RFC3339), res.Rows["owed_notification_attempts"],
		res.Rows["owed_receipts"], res.Rows["owed_event_payloads"], res.Erased)
	if _, err := tx.ExecContext(ctx, qRecordRestore, by.Name, target, res.Rows["owed_notifications"],
		by.Reason); err != nil {
		return res, fmt.Errorf("archive: record the restore on the operators' trail: %w", err)
	}
	return res, tx.Commit()
}

// Operator is who restores an archive, and why, as the operators' audit
// trail (owed_operator_audit, internal/ledger/sql/operator.sql) records it.
type Operator struct {
	Name   string
	Reason string
}

// The trail's bounds on who and why, as owed_operator_audit's checks hold
// them.
const (
	maxOperator = 256
	maxReason   = 1024
)

func (o Operator) validate() error {
	switch {
	case o.Name == "":
		return errors.New("archive: a restore names the operator who runs it (owedctl's --operator, else the OS user), " +
			"for the operators' audit trail; got none")
	case len(o.Name) > maxOperator:
		return fmt.Errorf("archive: the operator %q is %d bytes; the audit trail takes at most %d", o.Name, len(o.Name),
			maxOperator)
	case len(o.Reason) > maxReason:
		return fmt.Errorf("archive: the reason is %d bytes; the audit trail takes at most %d", len(o.Reason), maxReason)
	}
	return nil
}

// eachBatch calls fn with the file's lines, restoreBatch at a time.
func eachBatch(path string, fn func([]string) error) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(zr)
	// A row holds at most a 64 KiB payload and a few kilobytes more.
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) == restoreBatch {
			if err := fn(lines); err != nil {
				return err
			}
			lines = lines[:0]
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(lines) > 0 {
		return fn(lines)
	}
	return nil
}
