package devstack

import (
	"context"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backendtest"
)

// restQueue reads the REST queue through today's client, in the shape of
// the backend contract, until the REST client implements it itself
// (internal/queue/rest, opened like every backend by backends.Open).
type restQueue struct{ c *queue.Client }

func openREST(url, token string) (restQueue, error) {
	c, err := queue.New(queue.Config{URL: url, Token: token, Name: queue.DefaultQueueName})
	if err != nil {
		return restQueue{}, fmt.Errorf("queue client: %w", err)
	}
	return restQueue{c}, nil
}

func (q restQueue) Stats(ctx context.Context) (backendtest.Stats, error) {
	st, err := q.c.Stats(ctx)
	return backendtest.Stats{Visible: st.Visible, InFlight: st.InFlight, Delayed: st.Delayed, DeadLetterDepth: st.DeadLetterDepth,
		OldestAge: time.Duration(st.OldestAgeSeconds * float64(time.Second))}, err
}

func (q restQueue) DeadLetters(ctx context.Context, limit int, cursor string) ([]backendtest.DeadLetter, string, error) {
	page, err := q.c.DeadLetters(ctx, queue.DeadLetterQuery{Limit: limit, Cursor: cursor})
	if err != nil {
		return nil, "", err
	}
	out := make([]backendtest.DeadLetter, len(page.DeadLetters))
	for i, d := range page.DeadLetters {
		out[i] = backendtest.DeadLetter{ID: d.MessageID, Key: d.IdempotencyKey, Reason: d.LastError, Body: d.Payload,
			DeadLetteredAt: d.DeadLetteredAt}
	}
	return out, page.NextCursor, nil
}

func (q restQueue) Close() error { return nil }
