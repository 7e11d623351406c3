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
	// DefaultRequestTimeout bounds one request to the server (an ack, a
	// publish acknowledgement) whose context has no deadline.
	DefaultRequestTimeout = 10 * time.Second

	// delayedToken is the subject token under Subject that holds scheduled
	// (delayed) messages, one subject per message: the server keeps one
	// schedule per subject.
	delayedToken = "delayed"
)

// Config locates the streams and consumer owed uses on a NATS server.
type Config struct {
	// URL is the server's URL (OWED_NATS_URL), e.g. nats://127.0.0.1:4222;
	// several may be given, comma separated.
	URL string
	// CredsFile is a NATS credentials file (user JWT and nkey seed); empty
	// for a server without authentication.
	CredsFile string
	// Stream holds the queue: WorkQueue retention, message schedules
	// allowed, subjects Subject and Subject.delayed.*.
	Stream string
	// Subject is where messages due now are published and consumed.
	Subject string
	// Consumer is the durable pull consumer every worker shares.
	Consumer string
	// DeadLetterStream holds dead letters on DeadLetterSubject (Limits
	// retention, no consumer).
	DeadLetterStream  string
	DeadLetterSubject string
	// AckWait is the consumer's ack wait, the visibility of a receive that
	// names none.
	AckWait time.Duration
	// Provision creates the streams and the consumer, or updates them, with
	// the settings above; without it they must exist already.
	Provision bool
	// Replicas, DuplicateWindow and MaxAckPending are used by Provision
	// only. Replicas defaults to 1; use 3 on a cluster.
	Replicas        int
	DuplicateWindow time.Duration
	MaxAckPending   int
	// Clock gives the instant a delayed message is scheduled from and the
	// ages in Stats; nil means clock.Real(). The server must agree with it
	// (NTP): a scheduled message fires by the server's clock.
	Clock clock.Clock
}

// withDefaults returns c with every empty field at its default.
func (c Config) withDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Stream, DefaultStream)
	def(&c.Subject, DefaultSubject)
	def(&c.Consumer, DefaultConsumer)
	def(&c.DeadLetterStream, DefaultDeadLetterStream)
	def(&c.DeadLetterSubject, DefaultDeadLetterSubject)
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
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

// validate checks c once, naming the field and its environment variable.
func (c Config) validate() error {
	if strings.TrimSpace(c.URL) == "" {
		return fmt.Errorf("jetstream: Config.URL (OWED_NATS_URL) is required, e.g. nats://127.0.0.1:4222")
	}
	for _, n := range []struct{ field, value string }{
		{"Stream", c.Stream}, {"Consumer", c.Consumer}, {"DeadLetterStream", c.DeadLetterStream},
	} {
		if strings.ContainsAny(n.value, " \t\r\n.*>/\\") {
			return fmt.Errorf("jetstream: Config.%s %q must be a name without spaces, dots, slashes or wildcards", n.field, n.value)
		}
	}
	for _, s := range []struct{ field, value string }{
		{"Subject", c.Subject}, {"DeadLetterSubject", c.DeadLetterSubject},
	} {
		if !literalSubject(s.value) {
			return fmt.Errorf("jetstream: Config.%s %q must be a literal subject (dot-separated tokens, no wildcards)", s.field, s.value)
		}
	}
	if c.Stream == c.DeadLetterStream {
		return fmt.Errorf("jetstream: Config.DeadLetterStream must differ from Config.Stream (both %q)", c.Stream)
	}
	if c.AckWait < time.Second {
		return fmt.Errorf("jetstream: Config.AckWait %v must be at least 1s", c.AckWait)
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
