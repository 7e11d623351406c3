package emulator

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/owedhq/owed/internal/queue/wire"
)

// The consuming endpoints: consume (with its long poll), ack, nack, extend
// and stats.

func (e *Emulator) consume(r *http.Request, req *wire.ConsumeRequest) (any, error) {
	if req.MaxMessages == 0 {
		req.MaxMessages = 1
	}
	if req.VisibilityTimeoutSeconds == 0 {
		req.VisibilityTimeoutSeconds = int(e.cfg.VisibilityTimeout / time.Second)
	}
	for _, err := range []*apiError{
		checkRange("max_messages", req.MaxMessages, 1, wire.MaxConsumeMessages),
		checkRange("wait_seconds", req.WaitSeconds, 0, wire.MaxWaitSeconds),
		checkRange("visibility_timeout_seconds", req.VisibilityTimeoutSeconds, 1, wire.MaxVisibilitySeconds),
	} {
		if err != nil {
			return nil, err
		}
	}
	ctx := r.Context()
	// The long poll is real time, measured here; which messages are visible
	// is the database clock's decision, in consumeSQL.
	deadline := time.Now().Add(time.Duration(req.WaitSeconds) * time.Second)
	for {
		// Take the wake-up channel before looking, so a publish landing
		// between the look and the wait is not missed.
		wake := e.waiters.wait(req.Queue)
		msgs, err := e.store.consume(ctx, req.Queue, req.MaxMessages, req.VisibilityTimeoutSeconds)
		if err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if len(msgs) > 0 && ctx.Err() != nil {
			// The consumer went away (it is shutting down) while its
			// messages were being taken: hand them straight back rather
			// than leave them invisible until their visibility times out.
			e.returnMessages(req.Queue, msgs)
			return nil, ctx.Err()
		}
		if len(msgs) > 0 {
			if err := e.injectRedelivery(ctx, req.Queue, msgs); err != nil {
				return nil, err
			}
			return wire.ConsumeResponse{Messages: msgs}, nil
		}
		if left <= 0 {
			return wire.ConsumeResponse{Messages: msgs}, nil
		}
		t := time.NewTimer(min(left, recheckInterval))
		select {
		case <-wake:
		case <-t.C:
		case <-e.closing:
			t.Stop()
			return wire.ConsumeResponse{Messages: msgs}, nil
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// returnMessages makes consumed messages visible again at once, without
// counting a failure.
func (e *Emulator) returnMessages(queue string, msgs []wire.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range msgs {
		if id, ok := parseID(m.MessageID); ok {
			if _, _, err := e.store.nack(ctx, queue, id, 0, false, false, "consumer went away"); err != nil {
				e.log.Warn().Err(err).Str("message_id", m.MessageID).Msg("could not return a message; it reappears after its visibility timeout")
			}
		}
	}
	e.waiters.notify(queue)
}

// injectRedelivery applies the redelivery fault to messages just consumed.
func (e *Emulator) injectRedelivery(ctx context.Context, q string, msgs []wire.Message) error {
	f := e.faults.Load()
	if f.RedeliveryRate <= 0 {
		return nil
	}
	ids := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		id, _ := parseID(m.MessageID)
		ids = append(ids, id)
	}
	again := f.redelivered(ids)
	if len(again) == 0 {
		return nil
	}
	if err := e.store.redeliver(ctx, q, again); err != nil {
		return err
	}
	e.waiters.notify(q)
	return nil
}

func (e *Emulator) ack(r *http.Request, req *wire.AckRequest) (any, error) {
	if req.MessageIDs == nil {
		return nil, invalid("message_ids", "is required; want a list of message ids")
	}
	ids, aerr := parseIDs("message_ids", req.MessageIDs)
	if aerr != nil {
		return nil, aerr
	}
	n, err := e.store.ack(r.Context(), req.Queue, ids)
	if err != nil {
		return nil, err
	}
	return wire.AckResponse{Acked: n}, nil
}

func (e *Emulator) nack(r *http.Request, req *wire.NackRequest) (any, error) {
	if req.MessageID == "" {
		return nil, invalid("message_id", "is required")
	}
	if err := checkRange("delay_seconds", req.DelaySeconds, 0, wire.MaxDelaySeconds); err != nil {
		return nil, err
	}
	switch {
	case req.DeadLetter && req.Reason == "":
		return nil, invalid("reason", "is required with dead_letter: true; say why the message cannot be delivered")
	case !req.DeadLetter && req.CountAsFailure == nil:
		return nil, invalid("count_as_failure", "is required; true counts this delivery toward dead-lettering, false (a provider 429) does not")
	}
	if err := checkText("reason", req.Reason, maxReasonBytes); err != nil {
		return nil, err
	}
	counted := req.CountAsFailure != nil && *req.CountAsFailure
	var dead, visible bool
	err := onMessage(req.MessageID, "in queue "+strconv.Quote(req.Queue), "acked, dead-lettered or never published", func(id int64) (err error) {
		dead, visible, err = e.store.nack(r.Context(), req.Queue, id, req.DelaySeconds, counted, req.DeadLetter, req.Reason)
		return err
	})
	if err != nil {
		return nil, err
	}
	if visible && !dead {
		e.waiters.notify(req.Queue)
	}
	return wire.NackResponse{DeadLettered: dead}, nil
}

func (e *Emulator) extend(r *http.Request, req *wire.ExtendRequest) (any, error) {
	if req.MessageID == "" {
		return nil, invalid("message_id", "is required")
	}
	if err := checkRange("visibility_timeout_seconds", req.VisibilityTimeoutSeconds, 1, wire.MaxVisibilitySeconds); err != nil {
		return nil, err
	}
	var until time.Time
	err := onMessage(req.MessageID, "in flight in queue "+strconv.Quote(req.Queue), "acked, nacked, dead-lettered or never consumed", func(id int64) (err error) {
		until, err = e.store.extend(r.Context(), req.Queue, id, req.VisibilityTimeoutSeconds)
		return err
	})
	if err != nil {
		return nil, err
	}
	return wire.ExtendResponse{VisibleAt: until}, nil
}

// onMessage runs op on the message raw names. An id no message can have,
// or a message op finds gone (errNotFound), is a 404 saying where it was
// looked for and what may have moved it.
func onMessage(raw, where, moved string, op func(id int64) error) error {
	id, ok := parseID(raw)
	if !ok {
		return notFound("message %q is not %s", raw, where)
	}
	err := op(id)
	if errors.Is(err, errNotFound) {
		return notFound("message %q is not %s (%s)", raw, where, moved)
	}
	return err
}

func (e *Emulator) stats(r *http.Request, queue string) (any, error) {
	return e.store.stats(r.Context(), queue)
}
