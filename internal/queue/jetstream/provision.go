package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// StreamConfig is the queue stream owed needs: WorkQueue retention (an acked
// message is gone), message schedules for per-message delays (which the
// server requires to roll up and to discard old), no limits, so the server
// never drops a message owed still owes.
func (c Config) StreamConfig() natsjs.StreamConfig {
	c = c.withDefaults()
	return natsjs.StreamConfig{
		Name:              c.Stream,
		Description:       "owed: notifications due to be sent",
		Subjects:          []string{c.Subject, c.delayedSubjects()},
		Retention:         natsjs.WorkQueuePolicy,
		Storage:           natsjs.FileStorage,
		Replicas:          c.Replicas,
		Discard:           natsjs.DiscardOld,
		Duplicates:        c.DuplicateWindow,
		AllowMsgSchedules: true,
		AllowRollup:       true,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxAge:            0,
	}
}

// DeadLetterStreamConfig is the dead-letter stream: Limits retention and no
// consumer, so dead letters stay until on-call redrives or deletes them.
func (c Config) DeadLetterStreamConfig() natsjs.StreamConfig {
	c = c.withDefaults()
	return natsjs.StreamConfig{
		Name:        c.DeadLetterStream,
		Description: "owed: dead letters, kept until redriven or deleted",
		Subjects:    []string{c.DeadLetterSubject},
		Retention:   natsjs.LimitsPolicy,
		Storage:     natsjs.FileStorage,
		Replicas:    c.Replicas,
		Discard:     natsjs.DiscardOld,
		Duplicates:  c.DuplicateWindow,
		MaxMsgs:     -1,
		MaxBytes:    -1,
	}
}

// ConsumerConfig is the durable pull consumer the workers share. MaxDeliver
// is unlimited because the ledger, not the queue, counts attempts and
// decides dead letters: waiting for a provider's pace must never exhaust a
// delivery limit.
func (c Config) ConsumerConfig() natsjs.ConsumerConfig {
	c = c.withDefaults()
	return natsjs.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "owed workers",
		FilterSubject: c.Subject,
		DeliverPolicy: natsjs.DeliverAllPolicy,
		AckPolicy:     natsjs.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: c.MaxAckPending,
		ReplayPolicy:  natsjs.ReplayInstantPolicy,
	}
}

// bind opens (and with Provision first creates or updates) the streams and
// the consumer, and checks the settings owed relies on.
func bind(ctx context.Context, js natsjs.JetStream, c Config) (main, dead natsjs.Stream, cons natsjs.Consumer, err error) {
	if c.Provision {
		if main, err = js.CreateOrUpdateStream(ctx, c.StreamConfig()); err != nil {
			return nil, nil, nil, fmt.Errorf("jetstream: provision stream %s: %w", c.Stream, err)
		}
		if dead, err = js.CreateOrUpdateStream(ctx, c.DeadLetterStreamConfig()); err != nil {
			return nil, nil, nil, fmt.Errorf("jetstream: provision stream %s: %w", c.DeadLetterStream, err)
		}
		if cons, err = main.CreateOrUpdateConsumer(ctx, c.ConsumerConfig()); err != nil {
			return nil, nil, nil, fmt.Errorf("jetstream: provision consumer %s: %w", c.Consumer, err)
		}
	} else {
		if main, err = js.Stream(ctx, c.Stream); err != nil {
			return nil, nil, nil, missing("stream", c.Stream, "Config.Stream", err)
		}
		if dead, err = js.Stream(ctx, c.DeadLetterStream); err != nil {
			return nil, nil, nil, missing("stream", c.DeadLetterStream, "Config.DeadLetterStream", err)
		}
		if cons, err = main.Consumer(ctx, c.Consumer); err != nil {
			return nil, nil, nil, missing("consumer", c.Consumer, "Config.Consumer", err)
		}
	}
	if err := check(main.CachedInfo().Config, dead.CachedInfo().Config, cons.CachedInfo().Config, c); err != nil {
		return nil, nil, nil, err
	}
	return main, dead, cons, nil
}

func missing(kind, name, field string, err error) error {
	if errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrConsumerNotFound) {
		return fmt.Errorf("jetstream: %s %q (%s) does not exist; create it as docs/queues.md says, or set Provision: %w", kind, name, field, err)
	}
	return fmt.Errorf("jetstream: open %s %q: %w", kind, name, err)
}

// check refuses settings under which owed would lose or mis-time messages.
func check(main, dead natsjs.StreamConfig, cons natsjs.ConsumerConfig, c Config) error {
	switch {
	case main.Retention != natsjs.WorkQueuePolicy:
		return fmt.Errorf("jetstream: stream %s must use WorkQueue retention, has %v", c.Stream, main.Retention)
	case !main.AllowMsgSchedules:
		return fmt.Errorf("jetstream: stream %s must allow message schedules (allow_msg_schedules; nats-server 2.12 or later): owed delays messages with them", c.Stream)
	case !slices.Contains(main.Subjects, c.Subject) || !slices.Contains(main.Subjects, c.delayedSubjects()):
		return fmt.Errorf("jetstream: stream %s must hold the subjects %s and %s, has %v", c.Stream, c.Subject, c.delayedSubjects(), main.Subjects)
	case !slices.Contains(dead.Subjects, c.DeadLetterSubject):
		return fmt.Errorf("jetstream: stream %s must hold the subject %s, has %v", c.DeadLetterStream, c.DeadLetterSubject, dead.Subjects)
	case cons.AckPolicy != natsjs.AckExplicitPolicy:
		return fmt.Errorf("jetstream: consumer %s must ack explicitly, has %v", c.Consumer, cons.AckPolicy)
	case cons.FilterSubject != c.Subject || len(cons.FilterSubjects) > 0:
		return fmt.Errorf("jetstream: consumer %s must filter exactly %s, has %q %v", c.Consumer, c.Subject, cons.FilterSubject, cons.FilterSubjects)
	case cons.AckWait != c.AckWait:
		return fmt.Errorf("jetstream: consumer %s has ack wait %v, Config.AckWait says %v", c.Consumer, cons.AckWait, c.AckWait)
	}
	return nil
}
