// Package wire holds the JSON shapes of the queue's REST contract (see
// docs/queue-api.md), shared by the client in internal/queue/rest and the emulator
// in internal/queue/emulator so the two cannot drift apart field by field.
// It owns no behaviour: validation lives in the emulator, retries in the
// client. Every POST body embeds QueueRef, so the emulator checks the queue a
// request names in one place.
package wire

import (
	"encoding/json"
	"time"
)

// Limits of the contract. A hosted queue and the emulator enforce them; the
// client splits batches to MaxBatch.
const (
	// MaxPayloadBytes is the largest payload, measured as its JSON text.
	MaxPayloadBytes = 256 << 10
	// MaxBatch is the most entries one publish_batch may carry.
	MaxBatch = 100
	// MaxConsumeMessages is the most messages one consume may return.
	MaxConsumeMessages = 10
	// MaxWaitSeconds is the longest long-poll wait of one consume.
	MaxWaitSeconds = 20
	// MaxVisibilitySeconds is the longest visibility timeout (12 hours).
	MaxVisibilitySeconds = 12 * 60 * 60
	// MaxDelaySeconds is the longest publish or nack delay (12 hours), so a
	// delayed message cannot be parked beyond the dedup window by accident.
	MaxDelaySeconds = 12 * 60 * 60
	// MaxIdempotencyKeyBytes bounds an Idempotency-Key.
	MaxIdempotencyKeyBytes = 256
	// MaxDeadLetterPage is the most dead letters one list call returns.
	MaxDeadLetterPage = 100
	// MaxIDs is the most message ids one ack, redrive or delete may name.
	MaxIDs = 1000
)

// IdempotencyKeyHeader carries the key of a single publish.
const IdempotencyKeyHeader = "Idempotency-Key"

// Status values of one publish_batch entry.
const (
	StatusCreated      = "created"
	StatusDeduplicated = "deduplicated"
	StatusFailed       = "failed"
)

// Error codes the queue answers with.
const (
	CodeInvalidRequest  = "invalid_request"
	CodePayloadTooLarge = "payload_too_large"
	CodeUnauthorized    = "unauthorized"
	CodeNotFound        = "not_found"
	CodeMethodNotAllow  = "method_not_allowed"
	CodeThrottled       = "throttled"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal"
)

// Data wraps every success body: {"data": …}.
type Data[T any] struct {
	Data T `json:"data"`
}

// ErrorBody is every error body: {"error": {"code", "message", "retryable"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the server's account of a failed request.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// QueueRef is the "queue" every POST body names.
type QueueRef struct {
	Queue string `json:"queue"`
}

// QueueName is the queue the request works on.
func (q QueueRef) QueueName() string { return q.Queue }

// PublishRequest is the body of POST /queue/publish; the key travels in the
// Idempotency-Key header.
type PublishRequest struct {
	QueueRef
	Payload      json.RawMessage `json:"payload"`
	DelaySeconds int             `json:"delay_seconds,omitempty"`
}

// PublishResponse answers a publish.
type PublishResponse struct {
	MessageID    string `json:"message_id"`
	Deduplicated bool   `json:"deduplicated"`
}

// PublishBatchRequest is the body of POST /queue/publish_batch.
type PublishBatchRequest struct {
	QueueRef
	Messages []BatchEntry `json:"messages"`
}

// BatchEntry is one message of a batch, with its own key.
type BatchEntry struct {
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key"`
	DelaySeconds   int             `json:"delay_seconds,omitempty"`
}

// PublishBatchResponse has one result per entry, in the request's order.
type PublishBatchResponse struct {
	Results []BatchResult `json:"results"`
}

// BatchResult is the outcome of one batch entry.
type BatchResult struct {
	Status    string `json:"status"`
	MessageID string `json:"message_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// ConsumeRequest is the body of POST /queue/consume.
type ConsumeRequest struct {
	QueueRef
	MaxMessages              int `json:"max_messages"`
	WaitSeconds              int `json:"wait_seconds"`
	VisibilityTimeoutSeconds int `json:"visibility_timeout_seconds"`
}

// ConsumeResponse carries the delivered messages, possibly none.
type ConsumeResponse struct {
	Messages []Message `json:"messages"`
}

// Message is one delivery.
type Message struct {
	MessageID      string          `json:"message_id"`
	Payload        json.RawMessage `json:"payload"`
	ReceiveCount   int             `json:"receive_count"`
	IdempotencyKey string          `json:"idempotency_key"`
	PublishedAt    time.Time       `json:"published_at"`
}

// AckRequest is the body of POST /queue/ack.
type AckRequest struct {
	QueueRef
	MessageIDs []string `json:"message_ids"`
}

// AckResponse says how many of the ids were still queued and are now gone.
type AckResponse struct {
	Acked int `json:"acked"`
}

// NackRequest is the body of POST /queue/nack. CountAsFailure is a pointer
// because the contract requires it unless DeadLetter is set: a nack that
// forgot to say would otherwise silently never dead-letter.
type NackRequest struct {
	QueueRef
	MessageID      string `json:"message_id"`
	DelaySeconds   int    `json:"delay_seconds"`
	CountAsFailure *bool  `json:"count_as_failure,omitempty"`
	DeadLetter     bool   `json:"dead_letter,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// NackResponse says whether the nack moved the message to the dead letters.
type NackResponse struct {
	DeadLettered bool `json:"dead_lettered"`
}

// ExtendRequest is the body of POST /queue/extend.
type ExtendRequest struct {
	QueueRef
	MessageID                string `json:"message_id"`
	VisibilityTimeoutSeconds int    `json:"visibility_timeout_seconds"`
}

// ExtendResponse says until when the message stays invisible.
type ExtendResponse struct {
	VisibleAt time.Time `json:"visible_at"`
}

// DeadLetter is one dead-lettered message: the message as it was last
// delivered, and when and why it was dead-lettered.
type DeadLetter struct {
	Message
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	LastError      string    `json:"last_error"`
}

// DeadLettersResponse is one page of GET /queue/dead_letters.
type DeadLettersResponse struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  string       `json:"next_cursor,omitempty"`
}

// RedriveRequest is the body of POST /queue/dead_letters/redrive: either
// some ids or all of them.
type RedriveRequest struct {
	QueueRef
	MessageIDs []string `json:"message_ids,omitempty"`
	All        bool     `json:"all,omitempty"`
}

// RedriveResponse says how many dead letters went back to the queue.
type RedriveResponse struct {
	Redriven int `json:"redriven"`
}

// DeleteDeadLettersRequest is the body of POST /queue/dead_letters/delete.
type DeleteDeadLettersRequest struct {
	QueueRef
	MessageIDs []string `json:"message_ids"`
}

// DeleteDeadLettersResponse says how many dead letters were removed.
type DeleteDeadLettersResponse struct {
	Deleted int `json:"deleted"`
}

// Stats is the body of GET /queue/stats.
type Stats struct {
	Visible          int64   `json:"visible"`
	InFlight         int64   `json:"in_flight"`
	Delayed          int64   `json:"delayed"`
	DeadLetterDepth  int64   `json:"dead_letter_depth"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}
