package sqs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

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

// CreateQueues creates (or finds) the standard queues name and
// name-dead-letters with the settings docs/queues.md documents, and returns
// cfg with their URLs: for local SQS servers and development stacks.
// Production queues belong to the team's infrastructure code.
func CreateQueues(ctx context.Context, cfg Config, name string) (Config, error) {
	api, err := newAPI(ctx, cfg)
	if err != nil {
		return cfg, err
	}
	retention := strconv.Itoa(int(RetentionPeriod.Seconds()))
	dlq, err := api.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName:  aws.String(name + "-dead-letters"),
		Attributes: map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): retention},
	})
	if err != nil {
		return cfg, fmt.Errorf("sqs: create queue %s-dead-letters: %w", name, err)
	}
	arn, err := api.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl:       dlq.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return cfg, fmt.Errorf("sqs: read the dead-letter queue's ARN: %w", err)
	}
	policy, err := json.Marshal(map[string]string{
		"deadLetterTargetArn": arn.Attributes[string(types.QueueAttributeNameQueueArn)],
		"maxReceiveCount":     strconv.Itoa(DefaultMaxReceiveCount),
	})
	if err != nil {
		return cfg, err
	}
	main, err := api.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			string(types.QueueAttributeNameVisibilityTimeout):             strconv.Itoa(int(DefaultVisibility.Seconds())),
			string(types.QueueAttributeNameMessageRetentionPeriod):        retention,
			string(types.QueueAttributeNameRedrivePolicy):                 string(policy),
			string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds): "0",
		},
	})
	if err != nil {
		return cfg, fmt.Errorf("sqs: create queue %s: %w", name, err)
	}
	cfg.QueueURL, cfg.DeadLetterQueueURL = aws.ToString(main.QueueUrl), aws.ToString(dlq.QueueUrl)
	return cfg, nil
}
