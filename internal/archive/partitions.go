package archive

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

var (
	qEnsurePartitions = queries.Get("EnsurePartitions")
	qPartitions       = queries.Get("Partitions")
)

// MaxAhead is the most months EnsurePartitions creates ahead of the
// current one (owed_ledger_partitions_ensure refuses more).
const MaxAhead = 24

// Partition is one partition of the ledger (Parent owed_notifications),
// its attempts or its receipts: the rows of ids [From, To). From is 0 for
// the legacy partition, the table an upgrade attached whole
// (docs/upgrade.md), whose range starts at the lowest id.
type Partition struct {
	Parent  string `json:"parent,omitempty"`
	Name    string `json:"partition"`
	From    int64  `json:"from_id"`
	To      int64  `json:"to_id"`
	Rows    int64  `json:"est_rows,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	Created bool   `json:"created,omitempty"`
}

// EnsurePartitions creates the partitions of the ledger, its attempts and
// its receipts of now's month and of the ahead months after it that are
// missing, and moves the ledger's id sequence to
// now's month's range (never backwards), so the rows created from now on
// land in it. It answers the months it looked at, saying which it created.
// It runs as the schema's owner: creating a partition takes the table's
// ownership. An insert never lacks a partition when it is not run: the ids
// stay in the last month's range, and that month's partition grows.
func EnsurePartitions(ctx context.Context, db *sql.DB, now time.Time, ahead int) ([]Partition, error) {
	if ahead < 0 || ahead > MaxAhead {
		return nil, fmt.Errorf("ahead %d: want 0 to %d months", ahead, MaxAhead)
	}
	rows, err := db.QueryContext(ctx, qEnsurePartitions, now.UTC(), ahead)
	if err != nil {
		return nil, fmt.Errorf("ensure the ledger's partitions: %w", err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var p Partition
		if err := rows.Scan(&p.Name, &p.From, &p.To, &p.Created); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Partitions lists the partitions of the ledger, its attempts and its
// receipts, oldest range first, with the rows the planner estimates and
// their size on disk.
func Partitions(ctx context.Context, db *sql.DB) ([]Partition, error) {
	rows, err := db.QueryContext(ctx, qPartitions)
	if err != nil {
		return nil, fmt.Errorf("list the ledger's partitions: %w", err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var p Partition
		var from sql.NullInt64
		if err := rows.Scan(&p.Parent, &p.Name, &from, &p.To, &p.Rows, &p.Bytes); err != nil {
			return nil, err
		}
		p.From = from.Int64
		out = append(out, p)
	}
	return out, rows.Err()
}
