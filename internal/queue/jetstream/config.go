package jetstream

import (
	"fmt"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/clock"
)

// Defaults of Config, also the settings docs/queues.md tells an operator to
// create.
const (
	DefaultStream            = "OWED"
	DefaultSubject           = "owed.deliveries"
	DefaultConsumer          = "owed-workers"
	DefaultDeadLetterStream  = "OWED_DEAD_LETTERS"
	DefaultDeadLetterSubject = "owed.dead-letters"
	// DefaultAckWait is the consumer's ack wait: the visibility of a receive
	// that names none.
	DefaultAckWait = 30 * time.Second
	// DefaultDuplicateWindow is the streams' deduplication window. Dedup is
	// an optimisation: the ledger's claim decides what is sent.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultMaxAckPending bounds the messages in flight on the consumer,
	// like SQS's 120,000 in-flight limit but sized for one owed pool.
	DefaultMaxAckPending = 20000
	// DefaultQueueDelayMax is the longest a worker returns a message to
	// JetStream for (a NAK with a delay) before handing the wait to the
	// ledger instead. A NAKed message holds one of the consumer's
	// MaxAckPending places for its whole delay, and a consumer at its
	// MaxAckPending delivers nothing more to any worker, so JetStream keeps
	// a shorter bound than SQS, whose in-flight quota is six times the
	// default MaxAckPending.
	DefaultQueueDelayMax = 30 * time.Second
	// DefaultRequestTimeout bounds one request to the server (an ack, a
	// publish acknowledgement) whose context has no deadline.
	DefaultRequestTimeout = 10 * time.Second

	// delayedToken is the subject token under Subject that holds scheduled
	// (delayed) messages, one subject per message: the server keeps one
	// schedule per subject.
	delayedToken = "delayed"
)

// Config locates the streams and consumer owed uses on a NATS server.
// Services read it from OWED_NATS_* variables (envconfig, prefix "OWED";
// see queue/backends); a field left empty takes its Default* constant.
type Config struct {
	// URL is the server's URL (OWED_NATS_URL), e.g. nats://127.0.0.1:4222;
	// several may be given, comma separated.
	URL string `envconfig:"NATS_URL"`
	// CredsFile is a NATS credentials file (user JWT and nkey seed;
	// OWED_NATS_CREDS_FILE); empty for a server without authentication.
	CredsFile string `envconfig:"NATS_CREDS_FILE"`
	// Stream holds the queue (OWED_NATS_STREAM): WorkQueue retention,
	// message schedules allowed, subjects Subject and Subject.delayed.*.
	Stream string `envconfig:"NATS_STREAM"`
	// Subject is where messages due now are published and consumed
	// (OWED_NATS_SUBJECT).
	Subject string `envconfig:"NATS_SUBJECT"`
	// Consumer is the durable pull consumer every worker shares
	// (OWED_NATS_CONSUMER).
	Consumer string `envconfig:"NATS_CONSUMER"`
	// DeadLetterStream holds dead letters on DeadLetterSubject (Limits
	// retention, no consumer; OWED_NATS_DEAD_LETTER_STREAM,
	// OWED_NATS_DEAD_LETTER_SUBJECT).
	DeadLetterStream  string `envconfig:"NATS_DEAD_LETTER_STREAM"`
	DeadLetterSubject string `envconfig:"NATS_DEAD_LETTER_SUBJECT"`
	// AckWait is the consumer's ack wait, the visibility of a receive that
	// names none (OWED_NATS_ACK_WAIT).
	AckWait time.Duration `envconfig:"NATS_ACK_WAIT"`
	// Provision creates the streams and the consumer, or updates them, with
	// the settings above; without it they must exist already.
	Provision bool `ignored:"true"`
	// Replicas, DuplicateWindow and MaxAckPending are used by Provision
	// only. Replicas defaults to 1; use 3 on a cluster.
	Replicas        int           `ignored:"true"`
	DuplicateWindow time.Duration `ignored:"true"`
	MaxAckPending   int           `ignored:"true"`
	// Clock gives the instant a delayed message is scheduled from and the
	// ages in Stats; nil means clock.Real(). The server must agree with it
	// (NTP): a scheduled message fires by the server's clock.
	Clock clock.Clock `ignored:"true"`
}

// Defaults returns the Config whose OWED_NATS_* settings, but the server's
// URL and credentials, hold their defaults: what backends.LoadConfig reads
// the environment over, so a Config read from it, and `--help`, show the
// names and the ack wait in use.
func Defaults() Config {
	return Config{Stream: DefaultStream, Subject: DefaultSubject, Consumer: DefaultConsumer,
		DeadLetterStream: DefaultDeadLetterStream, DeadLetterSubject: DefaultDeadLetterSubject, AckWait: DefaultAckWait}
}

// withDefaults returns c with every empty field at its default, for a
// Config built in code rather than read over Defaults.
func (c Config) withDefaults() Config {
	d := Defaults()
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Stream, d.Stream)
	def(&c.Subject, d.Subject)
	def(&c.Consumer, d.Consumer)
	def(&c.DeadLetterStream, d.DeadLetterStream)
	def(&c.DeadLetterSubject, d.DeadLetterSubject)
	if c.AckWait == 0 {
		c.AckWait = d.AckWait
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Validate checks c with its defaults applied, naming the field and its
// environment variable. New calls it; a service calls it at start-up.
func (c Config) Validate() error { return c.withDefaults().validate() }

// validate checks c, defaults applied.
func (c Config) validate() error {
	if strings.TrimSpace(c.URL) == "" {
		return fmt.Errorf("jetstream: Config.URL (OWED_NATS_URL) is required, e.g. nats://127.0.0.1:4222")
	}
	for _, n := range []struct{ field, env, value string }{
		{"Stream", "OWED_NATS_STREAM", c.Stream}, {"Consumer", "OWED_NATS_CONSUMER", c.Consumer},
		{"DeadLetterStream", "OWED_NATS_DEAD_LETTER_STREAM", c.DeadLetterStream},
	} {
		if strings.ContainsAny(n.value, " \t\r\n.*>/\\") {
			return fmt.Errorf("jetstream: Config.%s (%s) %q must be a name without spaces, dots, slashes or wildcards", n.field, n.env, n.value)
		}
	}
	for _, s := range []struct{ field, env, value string }{
		{"Subject", "OWED_NATS_SUBJECT", c.Subject}, {"DeadLetterSubject", "OWED_NATS_DEAD_LETTER_SUBJECT", c.DeadLetterSubject},
	} {
		if !literalSubject(s.value) {
			return fmt.Errorf("jetstream: Config.%s (%s) %q must be a literal subject (dot-separated tokens, no wildcards)", s.field, s.env, s.value)
		}
	}
	if c.Stream == c.DeadLetterStream {
		return fmt.Errorf("jetstream: Config.DeadLetterStream (OWED_NATS_DEAD_LETTER_STREAM) must differ from Config.Stream (OWED_NATS_STREAM; both %q)", c.Stream)
	}
	if c.AckWait < time.Second {
		return fmt.Errorf("jetstream: Config.AckWait (OWED_NATS_ACK_WAIT) %v must be at least 1s", c.AckWait)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("jetstream: Config.Replicas %d must be between 1 and 5", c.Replicas)
	}
	if c.DuplicateWindow < 0 || c.MaxAckPending < 0 {
		return fmt.Errorf("jetstream: Config.DuplicateWindow and Config.MaxAckPending must not be negative")
	}
	return nil
}

// delayedSubjects is the wildcard under which delayed messages wait.
func (c Config) delayedSubjects() string { return c.Subject + "." + delayedToken + ".*" }

// delayedSubject is the schedule subject of the delayed message id.
func (c Config) delayedSubject(id string) string { return c.Subject + "." + delayedToken + "." + id }

func literalSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n*>") {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" {
			return false
		}
	}
	return true
}
