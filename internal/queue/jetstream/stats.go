package jetstream

import (
	"context"
	"fmt"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/owedhq/owed/internal/queue"
)

// Stats reads the depths from the consumer and the streams. Visible is what
// the consumer has not delivered yet; InFlight what it delivered and is not
// acked (a message whose visibility ran out counts here until a receive
// takes it again); Delayed the scheduled messages not yet due, which are the
// rest of the WorkQueue stream; OldestAge the age of the oldest message on
// Subject; InFlightLimit the consumer's MaxAckPending (0 when it has none).
func (c *Client) Stats(ctx context.Context) (queue.Stats, error) {
	ci, err := c.cons.Info(ctx)
	if err != nil {
		return queue.Stats{}, fmt.Errorf("jetstream: consumer info: %w", err)
	}
	si, err := c.stream.Info(ctx)
	if err != nil {
		return queue.Stats{}, fmt.Errorf("jetstream: stream info: %w", err)
	}
	di, err := c.dead.Info(ctx)
	if err != nil {
		return queue.Stats{}, fmt.Errorf("jetstream: dead-letter stream info: %w", err)
	}
	s := queue.Stats{
		Visible:         int64(ci.NumPending),
		InFlight:        int64(ci.NumAckPending),
		DeadLetterDepth: int64(di.State.Msgs),
		InFlightLimit:   int64(max(ci.Config.MaxAckPending, 0)),
	}
	s.Delayed = max(int64(si.State.Msgs)-s.Visible-s.InFlight, 0)
	if s.Visible+s.InFlight > 0 {
		m, err := c.stream.GetMsg(ctx, si.State.FirstSeq, natsjs.WithGetMsgSubject(c.cfg.Subject))
		if err != nil && !notFound(err) {
			return queue.Stats{}, fmt.Errorf("jetstream: oldest message: %w", err)
		}
		if m != nil {
			s.OldestAge = max(c.cfg.Clock.Now().Sub(m.Time), 0)
		}
	}
	return s, nil
}
