// Package queue is the contract between owed and the queue it runs on: the
// Queue interface and its types, and the limits every backend keeps. The
// backends are its subpackages (the Litestream shape): rest (owed's REST
// queue, served locally by rest's emulator), sqs (Amazon SQS) and jetstream
// (NATS JetStream); backends opens the one OWED_QUEUE_BACKEND names, and
// backendtest is the one suite every backend passes.
//
// The contract is the common subset of real queues and nothing more: batch
// publish with a per-message delay of at most 15 minutes, receive with a
// visibility timeout, ack, change visibility, and a dead-letter destination
// owed fills itself. Queue-side deduplication by Key is an optimisation a
// backend may offer; nothing in owed may rely on it: the ledger's claim
// decides what is sent. Nor may owed rely on a receive that does not count:
// every receive counts on SQS, so the ledger, not the queue, counts attempts
// and decides dead letters, and a backend's own receive limit is only a
// safety net.
//
// The package holds no behaviour beyond checking a call's arguments against
// the contract's limits, so every backend refuses the same calls.
package queue

import (
	"context"
	"fmt"
	"time"
)

// MaxDelay is the longest per-message delay the contract allows: SQS's
// DelaySeconds limit.
const MaxDelay = 15 * time.Minute

// MaxWait is the longest long-poll wait of one Receive: SQS's WaitTimeSeconds
// limit.
const MaxWait = 20 * time.Second

// MaxVisibility is the longest visibility the contract allows: SQS's
// 12-hour limit.
const MaxVisibility = 12 * time.Hour

// CheckDelay refuses a per-message delay outside the contract.
func CheckDelay(d time.Duration) error {
	if d < 0 || d > MaxDelay {
		return fmt.Errorf("delay %v must be between 0 and %v", d, MaxDelay)
	}
	return nil
}

// CheckVisibility refuses a visibility outside the contract.
func CheckVisibility(d time.Duration) error {
	if d < 0 || d > MaxVisibility {
		return fmt.Errorf("visibility %v must be between 0 and %v", d, MaxVisibility)
	}
	return nil
}

// CheckReceive refuses Receive arguments outside the contract.
func CheckReceive(max int, wait, visibility time.Duration) error {
	if max < 1 {
		return fmt.Errorf("receive max %d must be at least 1", max)
	}
	if wait < 0 || wait > MaxWait {
		return fmt.Errorf("receive wait %v must be between 0 and %v", wait, MaxWait)
	}
	return CheckVisibility(visibility)
}

// Message is one message to publish.
type Message struct {
	// Key is the queue-side deduplication key where the backend has one; an
	// optimisation only, never a correctness guarantee.
	Key string
	// Body is a JSON document (owed's envelope): the REST queue carries
	// JSON payloads only and SQS text only, so that is what every backend
	// takes. A compact body (encoding/json's output) comes back byte for
	// byte; the REST queue compacts any other.
	Body []byte
	// Delay keeps the message invisible this long after publishing, at most
	// MaxDelay. Backends round it up to their granularity, never down.
	Delay time.Duration
	// Group is the message's fairness group, the row's tenant: a backend
	// that serves groups fairly (SQS fair queues' message group) takes it so
	// one group's backlog does not delay another's messages; the others
	// ignore it.
	Group string
}

// PublishResult is the outcome of one published message; Publish returns
// one per message, in order. A message with a non-nil Err was not
// published.
type PublishResult struct {
	ID string
	// Deduplicated says the backend recognised the Key and kept the
	// original message (ID names it) instead of enqueueing another. It is
	// informational: a backend without deduplication never sets it.
	Deduplicated bool
	Err          error
}

// Delivery is one received message. Receipt is what Ack, ChangeVisibility
// and DeadLetter take; it belongs to this receive only.
type Delivery struct {
	ID, Receipt, Key string
	Body             []byte
	// ReceiveCount is how many times the message has been received,
	// this receive included.
	ReceiveCount int
	PublishedAt  time.Time
}

// DeadLetter is one message in the dead-letter destination. ID is the
// dead letter's own id, the one Redrive and DeleteDeadLetters take.
type DeadLetter struct {
	ID, Key, Reason string
	Body            []byte
	DeadLetteredAt  time.Time
}

// Stats are a queue's depths, approximate on every real backend.
type Stats struct {
	Visible, InFlight, Delayed, DeadLetterDepth int64
	// InFlightLimit is the most messages the backend keeps in flight before
	// it stops delivering (JetStream's MaxAckPending, SQS's in-flight
	// quota), or 0 when it has none.
	InFlightLimit int64
	// OldestAge is the age of the oldest message waiting or in flight, or 0
	// when the backend cannot tell.
	OldestAge time.Duration
}

// Queue is one queue owed publishes to and consumes from, with its
// dead-letter destination. Implementations are safe for concurrent use.
type Queue interface {
	// Publish publishes msgs and returns one result per message, in order:
	// a message the backend refused is a result with Err set. An error
	// means the call as a whole failed, and no result may be trusted.
	Publish(ctx context.Context, msgs []Message) ([]PublishResult, error)
	// Receive waits at most wait (≤ MaxWait) for up to max messages and hides
	// each for visibility (0 = the backend's default).
	Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]Delivery, error)
	// Ack deletes the received messages. A stale or unknown receipt is not
	// an error.
	Ack(ctx context.Context, receipts ...string) error
	// ChangeVisibility hides the message for d from now: extend it while
	// sending, or return it after d (0 = now). A receipt whose message is no
	// longer in flight is not an error.
	ChangeVisibility(ctx context.Context, receipt string, d time.Duration) error
	// DeadLetter copies the message to the dead-letter destination with the
	// reason, then acks the original.
	DeadLetter(ctx context.Context, d Delivery, reason string) error
	// DeadLetters lists up to limit dead letters from cursor ("" = start) and
	// returns the cursor of the next page ("" = no more).
	DeadLetters(ctx context.Context, limit int, cursor string) ([]DeadLetter, string, error)
	// Redrive moves the named dead letters back to the main queue and says
	// how many it moved; unknown ids are skipped.
	Redrive(ctx context.Context, ids ...string) (int, error)
	// DeleteDeadLetters removes the named dead letters and says how many.
	DeleteDeadLetters(ctx context.Context, ids ...string) (int, error)
	// Stats reads the queue's depths.
	Stats(ctx context.Context) (Stats, error)
	// Close releases the backend's connections; it is safe to call twice.
	Close() error
}
