package sqs

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Limits of Amazon SQS that owed keeps to (standard queues).
const (
	// MaxBatch is the most entries one SendMessageBatch, DeleteMessageBatch
	// or ChangeMessageVisibilityBatch takes, and the most messages one
	// ReceiveMessage returns.
	MaxBatch = 10
	// MaxBatchBytes bounds one SendMessageBatch: the sum of its messages'
	// bodies and attributes. SQS took 256 KiB for years; owed keeps to it so
	// local SQS servers accept what AWS does.
	MaxBatchBytes = 256 << 10
	// MinMaxReceiveCount is the lowest maxReceiveCount New accepts in the
	// main queue's redrive policy. SQS counts every receive, and owed's
	// ledger decides dead letters: the policy is a safety net that pace
	// waits and 429s must never reach.
	MinMaxReceiveCount = 100
	// DefaultMaxReceiveCount is the redrive policy Provision sets.
	DefaultMaxReceiveCount = 1000
	// DefaultVisibility is the queue's visibility timeout Provision sets:
	// the visibility of a receive that names none.
	DefaultVisibility = 30 * time.Second
	// RetentionPeriod is how long Provision keeps messages: SQS's
	// maximum, 14 days, on both queues.
	RetentionPeriod = 14 * 24 * time.Hour
	// PeekVisibility hides the dead letters a listing, a redrive or a
	// delete has looked at while it scans the dead-letter queue; the scan
	// makes the ones it leaves visible again when it ends.
	PeekVisibility = 30 * time.Second
	// InFlightLimit is the in-flight quota of one queue, standard or FIFO
	// ("approximately 120,000", https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html;
	// AWS Support can raise it). A long-polling receive at the quota gets
	// nothing and no error, so every tenant's deliveries stop: Stats reports
	// it as the InFlightLimit the owed_queue_in_flight_limit gauge and its
	// alert compare against.
	InFlightLimit = 120000
	// DefaultQueueDelayMax is the longest a worker returns a message to an
	// SQS queue for (ChangeMessageVisibility) before handing the wait to the
	// ledger instead: a returned message counts in flight for its whole
	// delay, so only waits about as long as a send stay in the queue.
	DefaultQueueDelayMax = time.Minute
)

// Message attributes owed sets.
const (
	AttrKey       = "OwedKey"
	AttrReason    = "OwedReason"
	AttrMessageID = "OwedMessageId"
)

// ReasonRedrivePolicy is the reason a dead letter shows when SQS's own
// redrive policy moved it (owed's DeadLetter always names one).
const ReasonRedrivePolicy = "moved by the queue's redrive policy (maxReceiveCount reached)"

// Config locates the queues. Credentials and, unless Region is set, the
// region come from the AWS SDK's default chain (environment, shared config
// files, web identity, container or instance role). Services read it from
// OWED_SQS_* variables (envconfig, prefix "OWED"; see queue/backends).
type Config struct {
	// QueueURL is the main queue (OWED_SQS_QUEUE_URL), a standard queue:
	// a FIFO queue has no per-message delay.
	QueueURL string `envconfig:"SQS_QUEUE_URL"`
	// DeadLetterQueueURL is where owed moves dead letters
	// (OWED_SQS_DEAD_LETTER_QUEUE_URL); also the target of the main
	// queue's redrive policy, if it has one.
	DeadLetterQueueURL string `envconfig:"SQS_DEAD_LETTER_QUEUE_URL"`
	// Endpoint overrides the SQS endpoint, for a local SQS-compatible
	// server (OWED_SQS_ENDPOINT), e.g. http://127.0.0.1:9324.
	Endpoint string `envconfig:"SQS_ENDPOINT"`
	// Region overrides the default chain's region (OWED_SQS_REGION).
	Region string `envconfig:"SQS_REGION"`
	// FairQueue sends each message's group (the row's tenant) as its
	// MessageGroupId (OWED_SQS_FAIR_QUEUE), which makes a standard queue an
	// SQS fair queue: SQS delivers other groups' messages ahead of one
	// group's backlog, so one tenant's burst does not delay another's rows.
	// Off by default: a server that predates fair queues refuses a group id
	// on a standard queue.
	FairQueue bool `envconfig:"SQS_FAIR_QUEUE"`
	// Credentials overrides the default chain, e.g. static credentials for
	// a local server; nil uses the chain.
	Credentials aws.CredentialsProvider `ignored:"true"`
}

// Validate checks c, naming the field and its environment variable. New
// calls it; a service calls it at start-up.
func (c Config) Validate() error {
	for _, u := range []struct{ field, env, value string }{
		{"QueueURL", "OWED_SQS_QUEUE_URL", c.QueueURL},
		{"DeadLetterQueueURL", "OWED_SQS_DEAD_LETTER_QUEUE_URL", c.DeadLetterQueueURL},
	} {
		p, err := url.Parse(u.value)
		if u.value == "" || err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return fmt.Errorf("sqs: Config.%s (%s) %q must be a queue URL, e.g. https://sqs.eu-west-1.amazonaws.com/123456789012/owed", u.field, u.env, u.value)
		}
		if strings.HasSuffix(u.value, ".fifo") {
			return fmt.Errorf("sqs: Config.%s (%s) %q is a FIFO queue; owed needs a standard queue (FIFO queues have no per-message delay)", u.field, u.env, u.value)
		}
	}
	if c.QueueURL == c.DeadLetterQueueURL {
		return fmt.Errorf("sqs: Config.DeadLetterQueueURL (OWED_SQS_DEAD_LETTER_QUEUE_URL) must differ from Config.QueueURL (OWED_SQS_QUEUE_URL)")
	}
	if c.Endpoint != "" {
		if p, err := url.Parse(c.Endpoint); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return fmt.Errorf("sqs: Config.Endpoint (OWED_SQS_ENDPOINT) %q must be an http(s) URL", c.Endpoint)
		}
	}
	return nil
}

// seconds rounds d up to whole seconds, so a delay or a visibility is never
// shorter than asked.
func seconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}
