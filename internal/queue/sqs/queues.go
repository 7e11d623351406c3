package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/owedhq/owed/internal/queue"
)

// Stats reads the queues' approximate depths. OldestAge is always 0: SQS
// reports the age of the oldest message only as the CloudWatch metric
// ApproximateAgeOfOldestMessage, and a peek would count as a receive of the
// message it shows. InFlightLimit is the documented quota, InFlightLimit.
func (c *Client) Stats(ctx context.Context) (queue.Stats, error) {
	main, err := c.attributes(ctx, c.cfg.QueueURL)
	if err != nil {
		return queue.Stats{}, err
	}
	dead, err := c.attributes(ctx, c.cfg.DeadLetterQueueURL)
	if err != nil {
		return queue.Stats{}, err
	}
	n := func(attrs map[string]string, name types.QueueAttributeName) int64 {
		v, _ := strconv.ParseInt(attrs[string(name)], 10, 64)
		return v
	}
	return queue.Stats{
		Visible:  n(main, types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(main, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(main, types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
		// A dead letter a listing is looking at is still a dead letter.
		DeadLetterDepth: n(dead, types.QueueAttributeNameApproximateNumberOfMessages) +
			n(dead, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible) +
			n(dead, types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
		// SQS does not report the quota; its documented value stands.
		InFlightLimit: InFlightLimit,
	}, nil
}

func (c *Client) attributes(ctx context.Context, queue string) (map[string]string, error) {
	out, err := c.api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(queue),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("sqs: attributes of %s: %w", queue, err)
	}
	return out.Attributes, nil
}

// redrivePolicy is SQS's RedrivePolicy attribute. maxReceiveCount arrives
// as a number or as a string, depending on who set it.
type redrivePolicy struct {
	DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
	MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
}

// checkQueues fails start-up when a queue is missing or when the main
// queue's redrive policy could dead-letter a healthy message.
func (c *Client) checkQueues(ctx context.Context) error {
	main, err := c.attributes(ctx, c.cfg.QueueURL)
	if err != nil {
		return fmt.Errorf("%w (check Config.QueueURL, OWED_SQS_QUEUE_URL)", err)
	}
	if _, err := c.attributes(ctx, c.cfg.DeadLetterQueueURL); err != nil {
		return fmt.Errorf("%w (check Config.DeadLetterQueueURL, OWED_SQS_DEAD_LETTER_QUEUE_URL)", err)
	}
	raw := main[string(types.QueueAttributeNameRedrivePolicy)]
	if raw == "" {
		return nil
	}
	var p redrivePolicy
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return fmt.Errorf("sqs: queue %s has a redrive policy owed cannot read: %q", c.cfg.QueueURL, raw)
	}
	count, err := strconv.Atoi(string(trimQuotes(p.MaxReceiveCount)))
	if err != nil || count < MinMaxReceiveCount {
		return fmt.Errorf("sqs: queue %s has maxReceiveCount %s in its redrive policy; owed needs at least %d "+
			"(SQS counts every receive, and owed's ledger decides dead letters: the policy is only a safety net)",
			c.cfg.QueueURL, p.MaxReceiveCount, MinMaxReceiveCount)
	}
	return nil
}

func trimQuotes(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}

// CreateQueues creates the standard queues name and name-dead-letters, or
// updates them, with the settings docs/queues.md documents (Provision),
// and returns cfg with their URLs: for local SQS servers and development
// stacks.
func CreateQueues(ctx context.Context, cfg Config, name string) (Config, error) {
	return provision(ctx, cfg, name, name+"-dead-letters")
}

// Provision creates the queues cfg's URLs name (their last path segment),
// or updates their settings to docs/queues.md's: what `owedctl queue
// provision` runs. It is idempotent: run at every install and upgrade,
// it changes only a setting that differs.
func Provision(ctx context.Context, cfg Config) (Config, error) {
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return provision(ctx, cfg, queueName(cfg.QueueURL), queueName(cfg.DeadLetterQueueURL))
}

// Settings are the queues' attributes Provision sets, the main queue's
// redrive policy naming the dead-letter queue by deadLetterARN.
func Settings(deadLetterARN string) (main, dead map[string]string) {
	retention := strconv.Itoa(int(RetentionPeriod.Seconds()))
	// The keys are written in full, json.Marshal cannot fail on strings.
	policy, _ := json.Marshal(map[string]string{
		"deadLetterTargetArn": deadLetterARN,
		"maxReceiveCount":     strconv.Itoa(DefaultMaxReceiveCount),
	})
	main = map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout):             strconv.Itoa(int(DefaultVisibility.Seconds())),
		string(types.QueueAttributeNameMessageRetentionPeriod):        retention,
		string(types.QueueAttributeNameRedrivePolicy):                 string(policy),
		string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds): "0",
	}
	dead = map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): retention}
	return main, dead
}

// queueName is a queue URL's last path segment, the queue's name.
func queueName(queueURL string) string {
	return queueURL[strings.LastIndex(queueURL, "/")+1:]
}

func provision(ctx context.Context, cfg Config, name, deadName string) (Config, error) {
	api, err := newAPI(ctx, cfg)
	if err != nil {
		return cfg, err
	}
	_, deadAttrs := Settings("")
	deadURL, err := ensureQueue(ctx, api, deadName, deadAttrs)
	if err != nil {
		return cfg, err
	}
	arn, err := api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(deadURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return cfg, fmt.Errorf("sqs: read the dead-letter queue's ARN: %w", err)
	}
	mainAttrs, _ := Settings(arn.Attributes[string(types.QueueAttributeNameQueueArn)])
	mainURL, err := ensureQueue(ctx, api, name, mainAttrs)
	if err != nil {
		return cfg, err
	}
	cfg.QueueURL, cfg.DeadLetterQueueURL = mainURL, deadURL
	return cfg, nil
}

// ensureQueue creates the queue name with attrs or, when it exists, sets
// attrs on it (CreateQueue refuses an existing name with other settings),
// and returns its URL.
func ensureQueue(ctx context.Context, api *awssqs.Client, name string, attrs map[string]string) (string, error) {
	got, err := api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	var missing *types.QueueDoesNotExist
	switch {
	case errors.As(err, &missing):
		made, err := api.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			return "", fmt.Errorf("sqs: create queue %s: %w", name, err)
		}
		return aws.ToString(made.QueueUrl), nil
	case err != nil:
		return "", fmt.Errorf("sqs: look up queue %s: %w", name, err)
	}
	if _, err := api.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: got.QueueUrl, Attributes: attrs}); err != nil {
		return "", fmt.Errorf("sqs: update queue %s: %w", name, err)
	}
	return aws.ToString(got.QueueUrl), nil
}
