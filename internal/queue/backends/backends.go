// Package backends opens the queue backend OWED_QUEUE_BACKEND names (rest,
// sqs or jetstream) as a queue.Queue. It is the one place that knows every
// backend: the sweeper, the workers and owedctl read a Config from the
// environment and call Open, and nothing else in owed picks a backend.
//
// Only the chosen backend's variables are read for meaning and checked; the
// others may be set or not. A wrong or missing setting fails Validate (and
// so Open) naming the variable and the values it accepts.
package backends

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/sqs"
)

// The backends OWED_QUEUE_BACKEND accepts.
const (
	REST      = "rest"
	SQS       = "sqs"
	JetStream = "jetstream"
	// Default is the backend when OWED_QUEUE_BACKEND is not set.
	Default = REST
)

// Names lists the accepted backends, in the order errors name them.
var Names = []string{REST, SQS, JetStream}

// Config is the queue configuration of a service: which backend, and each
// backend's own settings. Read it with LoadConfig; the backends' fields
// carry their own OWED_* names (rest.Config, sqs.Config, jetstream.Config).
type Config struct {
	// Backend is OWED_QUEUE_BACKEND: rest, sqs or jetstream.
	Backend   string           `envconfig:"QUEUE_BACKEND"`
	Rest      rest.Config      `ignored:"true"`
	SQS       sqs.Config       `ignored:"true"`
	JetStream jetstream.Config `ignored:"true"`
}

// LoadConfig reads the configuration from the OWED_* environment over the
// default backend and the backends' defaults. It does not validate:
// Validate (or Open) does.
func LoadConfig() (Config, error) {
	c := Config{Backend: Default, JetStream: jetstream.Defaults()}
	for _, part := range []any{&c, &c.Rest, &c.SQS, &c.JetStream} {
		if err := config.Process("OWED", part); err != nil {
			return c, fmt.Errorf("configuration: %w", err)
		}
	}
	return c, nil
}

// Validate checks the backend's name and the chosen backend's settings,
// naming the variable at fault. Its errors never carry a password a queue
// URL holds (see redact).
func (c Config) Validate() error {
	var err error
	switch c.Backend {
	case REST:
		err = c.Rest.Validate()
	case SQS:
		err = c.SQS.Validate()
	case JetStream:
		err = c.JetStream.Validate()
	default:
		err = fmt.Errorf("OWED_QUEUE_BACKEND=%q is not a queue backend: want one of %s", c.Backend, strings.Join(Names, ", "))
	}
	return c.redact(err)
}

// redact removes from err every password the queue URLs carry. The
// backends quote a URL they cannot parse (OWED_QUEUE_URL=%q) and the NATS
// client's parse error quotes the whole URL, password and all; this is the
// one place every backend's errors pass through.
func (c Config) redact(err error) error {
	if err == nil {
		return nil
	}
	return config.RedactError(err, c.Rest.URL, c.SQS.QueueURL, c.SQS.DeadLetterQueueURL, c.SQS.Endpoint, c.JetStream.URL)
}

// Target names what the backend works on, for logs and owedctl's tables:
// the REST queue's name, the SQS queue's URL, or the JetStream stream and
// consumer. It never holds a credential.
func (c Config) Target() string {
	switch c.Backend {
	case REST:
		return c.Rest.Name
	case SQS:
		return c.SQS.QueueURL
	case JetStream:
		js := c.JetStream
		return orDefault(js.Stream, jetstream.DefaultStream) + "/" + orDefault(js.Consumer, jetstream.DefaultConsumer)
	}
	return ""
}

// UsageDefaults says what OWED_QUEUE_DELAY_MAX, the worker's override of
// QueueDelayMax, is when it is not set (config.UsageDefaulter).
func (c Config) UsageDefaults() map[string]string {
	by := make([]string, 0, len(Names))
	for _, n := range Names {
		by = append(by, n+" "+Config{Backend: n}.QueueDelayMax().String())
	}
	return map[string]string{"OWED_QUEUE_DELAY_MAX": "the backend's: " + strings.Join(by, ", ")}
}

// QueueDelayMax is the chosen backend's DefaultQueueDelayMax: the longest a
// worker returns a message to it before handing the wait to the ledger
// (docs/queues.md, "Waits live in the ledger"). OWED_QUEUE_DELAY_MAX
// overrides it.
func (c Config) QueueDelayMax() time.Duration {
	switch c.Backend {
	case SQS:
		return sqs.DefaultQueueDelayMax
	case JetStream:
		return jetstream.DefaultQueueDelayMax
	}
	return rest.DefaultQueueDelayMax
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Open validates cfg and connects to its backend. log receives the REST
// client's retries; the other backends log nothing of their own. Its errors
// are redacted as Validate's.
func Open(ctx context.Context, cfg Config, log zerolog.Logger) (queue.Queue, error) {
	q, err := open(ctx, cfg, log)
	return q, cfg.redact(err)
}

func open(ctx context.Context, cfg Config, log zerolog.Logger) (queue.Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Each case returns its own nil on error: a nil *Client in a
	// queue.Queue would not compare equal to nil.
	switch cfg.Backend {
	case REST:
		c, err := rest.New(cfg.Rest, rest.WithLogger(log))
		if err != nil {
			return nil, err
		}
		return c, nil
	case SQS:
		c, err := sqs.New(ctx, cfg.SQS)
		if err != nil {
			return nil, err
		}
		return c, nil
	default:
		c, err := jetstream.New(ctx, cfg.JetStream)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}
