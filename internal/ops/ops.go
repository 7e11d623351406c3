// Package ops holds the operator actions owedctl and the web console
// (internal/console) both run, so the two can never disagree: the health
// summary (Health), reading and filtering the queue's dead letters,
// redriving and deleting them (deadletters.go), finding notifications and
// a row's timeline (notifications.go), and the audit line every console
// action writes (audit.go). It reads and writes only through the ledger,
// the queue and the pace, in the tenant scope each of those enforces; it
// never prints and never decides how an operator is authenticated.
package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/queue"
)

// QueueStatsTimeout bounds the dead-letter look-up so an unreachable queue
// reads "unknown" instead of hanging the summary.
const QueueStatsTimeout = 10 * time.Second

// Health is what `owedctl stats` reports and the console's dashboard shows,
// also stats' --json shape.
type Health struct {
	Delivery ledger.Stats `json:"delivery"`
	// Receipts splits the rows the providers accepted by what they
	// confirmed since (docs/receipts.md).
	Receipts ledger.ReceiptStats `json:"receipts"`
	Backlog  ledger.Backlog      `json:"backlog"`
	// DeadLetterDepth is nil when the queue could not be asked;
	// DeadLetterUnknown then says why.
	DeadLetterDepth   *int64 `json:"dead_letter_depth"`
	DeadLetterUnknown string `json:"dead_letter_unknown,omitempty"`
	// ProviderLimitedMinutes counts the minutes of the window in which a
	// worker got a provider 429 (pace.LimitedMinutes); WindowMinutes is the
	// window's length in minutes.
	ProviderLimitedMinutes int `json:"provider_limited_minutes"`
	WindowMinutes          int `json:"window_minutes"`
}

// ReadHealth reads the ledger's side of Health over the window of length
// since that ends now (the caller's clock); the dead-letter depth is the
// caller's (DeadLetterDepth), since the queue may not be configured at all.
func ReadHealth(ctx context.Context, reads ledger.HasReads, now time.Time, since time.Duration) (Health, error) {
	l := reads.ReadsRole()
	h := Health{WindowMinutes: int((since + time.Minute - 1) / time.Minute)}
	from := now.Add(-since)
	var err error
	if h.Delivery, err = l.Stats(ctx, from); err != nil {
		return h, fmt.Errorf("read delivery stats: %w", err)
	}
	if h.Receipts, err = l.ReceiptStats(ctx, from); err != nil {
		return h, fmt.Errorf("read the receipt stats: %w", err)
	}
	if h.Backlog, err = l.Backlog(ctx); err != nil {
		return h, fmt.Errorf("read the owed backlog: %w", err)
	}
	if h.ProviderLimitedMinutes, err = pace.LimitedMinutes(ctx, l.DB(), from); err != nil {
		return h, fmt.Errorf("read the provider-limited minutes: %w", err)
	}
	return h, nil
}

// DeadLetterDepth asks the queue, or says why it could not: the summary is
// most needed when something is broken, so a missing queue must not hide
// the ledger's numbers. The backends' errors never carry a token, so the
// reason is safe to show.
func DeadLetterDepth(ctx context.Context, q queue.Queue) (*int64, string) {
	ctx, cancel := context.WithTimeout(ctx, QueueStatsTimeout)
	defer cancel()
	st, err := q.Stats(ctx)
	if err != nil {
		return nil, "queue stats: " + err.Error()
	}
	return &st.DeadLetterDepth, ""
}
