// Package backendtest is the contract every queue backend owed runs on must
// keep (Amazon SQS, NATS JetStream, the REST queue), and the one suite that
// checks it against a real server.
//
// The contract is the common subset of real queues and nothing more: batch
// publish with a per-message delay of at most 15 minutes, receive with a
// visibility timeout, ack, change visibility, and a dead-letter destination
// owed fills itself. Queue-side deduplication by Key is an optimisation a
// backend may offer; the suite never relies on it, and neither may owed: the
// ledger's claim decides what is sent.
//
// Backend is declared here until the core queue package owns it; the suite
// must never assert what one real queue cannot give (an upper bound on a
// delay, an order of delivery, a dedup window).
package backendtest

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
	Key  string
	Body []byte
	// Delay keeps the message invisible this long after publishing, at most
	// MaxDelay. Backends round it up to their granularity, never down.
	Delay time.Duration
}

// PublishResult is the outcome of one published message; Publish returns
// one per message, in order.
type PublishResult struct {
	ID  string
	Err error
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
	// OldestAge is the age of the oldest message waiting or in flight, or 0
	// when the backend cannot tell.
	OldestAge time.Duration
}

// Backend is one queue owed publishes to and consumes from.
type Backend interface {
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
	Stats(ctx context.Context) (Stats, error)
	Close() error
}
