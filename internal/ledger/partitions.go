package ledger

import "context"

// The ledger is partitioned by month of id (sql/notifications.sql); the
// operators make partitions ahead with owedctl partitions ensure, and the
// sweeper keeps them made without an operator (KeepPartitions).

var qKeepPartitions = queries.Get("KeepPartitions")

// KeepPartitions is the sweeper's monthly maintenance of the ledger's
// partitions: it makes those of this month and the two after it that are
// missing, by the database's clock, and moves new rows' ids into this
// month's range (owed_ledger_partitions_keep). It answers how many
// partitions it made. A month left without its own partition still takes
// its rows (in the month before's), so a failed call only waits for the
// next.
func (l *Sweep) KeepPartitions(ctx context.Context) (int, error) {
	var n int
	err := l.db.QueryRowContext(ctx, qKeepPartitions).Scan(&n)
	return n, err
}
