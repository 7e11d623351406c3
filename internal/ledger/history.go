package ledger

import (
	"context"
	"database/sql"
	"time"
)

// The operators' history (owed_history, sql/history.sql): the sweeper
// records one sample a minute on its cron (RecordHistory) and the console
// charts the last hour and day of it (History).

var (
	qRecordHistory = queries.Get("RecordHistory")
	qHistory       = queries.Get("History")
)

// HistoryKeep is how long a sample is kept: a week, so the console's day
// chart always has its day and on-call can look back over a weekend.
const HistoryKeep = 7 * 24 * time.Hour

// The history's series.
const (
	SeriesBacklog       = "backlog"
	SeriesOldestOwedAge = "oldest_owed_age_s"
	SeriesLagP50        = "lag_p50_s"
	SeriesLagP95        = "lag_p95_s"
	SeriesDeadLetters   = "dead_letters"
	SeriesSends         = "sends"
	SeriesLimited       = "limited"
)

// Sample is one value of the history: series at minute, for label (a state
// or a provider account; "" for a series without one).
type Sample struct {
	Minute time.Time `json:"minute"`
	Series string    `json:"series"`
	Label  string    `json:"label,omitempty"`
	Value  float64   `json:"value"`
}

// RecordHistory samples the current minute, unless it was sampled already
// (by another replica, or an earlier cron call), with deadLetters as the
// queue's depth (nil when it is unknown), and forgets the samples older
// than HistoryKeep. It answers how many samples it wrote.
func (l *Sweep) RecordHistory(ctx context.Context, deadLetters *int64) (int64, error) {
	var depth sql.NullInt64
	if deadLetters != nil {
		depth = sql.NullInt64{Int64: *deadLetters, Valid: true}
	}
	var n int64
	err := l.queryRowAllTenants(ctx, qRecordHistory, l.now(), depth, HistoryKeep.Seconds()).Scan(&n)
	return n, err
}

// History reads the samples from since on, oldest first.
func (l *Reads) History(ctx context.Context, since time.Time) ([]Sample, error) {
	rows, err := l.db.QueryContext(ctx, qHistory, since.UTC())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Sample{}
	for rows.Next() {
		var s Sample
		if err := rows.Scan(&s.Minute, &s.Series, &s.Label, &s.Value); err != nil {
			return nil, err
		}
		s.Minute = s.Minute.UTC()
		out = append(out, s)
	}
	return out, rows.Err()
}
