// Package rest is owed's queue on its REST contract (docs/queue-api.md):
// publish with an idempotency key, consume with a visibility timeout, ack,
// nack, extend, dead letters and stats. Client implements queue.Queue over
// those operations, so owed runs on it as on any backend; the emulator in
// internal/queue/emulator serves the same contract, internal/queue/queuetest
// checks the wire contract against it and internal/queue/backendtest the
// queue.Queue contract through Client.
//
// The client retries what is safe to retry (throttling, 5xx, network errors)
// inside the caller's deadline and returns everything else at once as an
// *APIError. It never puts the token in an error or a log line, and it never
// acks on its own: acking is the caller's decision, taken only after the work
// is recorded.
//
// client.go holds the contract's operations, queue.go the queue.Queue
// mapping onto them, transport.go the one way a call is sent, retried and
// decoded; the JSON shapes are internal/queue/wire's, shared with the
// emulator.
package rest

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"
)

// DefaultQueueName is the queue owed's sweeper publishes to and its workers
// consume from.
const DefaultQueueName = "owed-deliveries"

// DefaultQueueDelayMax is the longest a worker returns a message to a REST
// queue for (a nack with a delay) before handing the wait to the ledger
// instead. The emulator keeps no in-flight limit, but the contract is SQS's
// (receive, visibility, nack), so a REST queue in front of another broker
// may: one minute, as for SQS.
const DefaultQueueDelayMax = time.Minute

// queueNamePattern is what a queue name may look like; the emulator enforces
// the same rule so a typo fails at start-up rather than as 400s later.
var queueNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// ValidQueueName reports whether name is an acceptable queue name: 1 to 80
// letters, digits, '-' or '_'.
func ValidQueueName(name string) bool { return queueNamePattern.MatchString(name) }

// Config is the queue client's configuration. Services embed it in their own
// envconfig struct and process it with the "OWED" prefix.
type Config struct {
	// URL is the queue's base URL, for example https://queue.example.com or
	// http://127.0.0.1:8181 for the emulator.
	URL string `envconfig:"QUEUE_URL"`
	// Token is the bearer token. It is never logged or put in an error.
	Token string `envconfig:"QUEUE_TOKEN"`
	// Name is the queue to publish to and consume from.
	Name string `envconfig:"QUEUE_NAME" default:"owed-deliveries"`
}

// Validate reports the first unusable setting, naming its variable.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("OWED_QUEUE_URL is not set: give the queue's base URL, e.g. http://127.0.0.1:8181")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("OWED_QUEUE_URL=%q is not a base URL: want http(s)://host[:port][/path]", c.URL)
	}
	if u.User != nil {
		return errors.New("OWED_QUEUE_URL must not carry credentials: put the token in OWED_QUEUE_TOKEN")
	}
	if c.Token == "" {
		return errors.New("OWED_QUEUE_TOKEN is not set: the queue requires a bearer token")
	}
	if !ValidQueueName(c.Name) {
		return fmt.Errorf("OWED_QUEUE_NAME=%q is not a queue name: want 1-80 letters, digits, '-' or '_'", c.Name)
	}
	return nil
}
