// Package sqs is owed's queue on Amazon SQS (or an SQS-compatible server):
// a standard queue for messages, a second standard queue for dead letters.
//
// It maps the queue contract (queue.Queue) onto SQS's API:
// SendMessageBatch with DelaySeconds (≤ 15 min), ReceiveMessage with a
// visibility timeout and long polling, DeleteMessageBatch,
// ChangeMessageVisibility. A message's Key travels as a message attribute
// only: standard queues do not deduplicate, and owed never needs them to.
//
// Dead letters are owed's decision: DeadLetter sends a copy to the
// dead-letter queue with the reason, then deletes the original. The main
// queue's redrive policy, if any, is only a safety net, and New refuses one
// whose maxReceiveCount a provider's pace could reach. SQS cannot look a
// message up by id, so listing, redriving and deleting dead letters receive
// from the dead-letter queue, which hides the messages they look at for a
// moment (PeekVisibility) and counts as a receive of each.
//
// The package never deletes a message it has not been told to ack or
// dead-letter.
package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/owedhq/owed/internal/queue"
)

// Client is one SQS queue with its dead-letter queue. It is safe for
// concurrent use.
type Client struct {
	cfg Config
	api *awssqs.Client
}

var _ queue.Queue = (*Client)(nil)

// New builds the client from the SDK's default chain and checks that both
// queues exist and that the main queue's redrive policy, if any, is only a
// safety net.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	api, err := newAPI(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, api: api}
	if err := c.checkQueues(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func newAPI(ctx context.Context, cfg Config) (*awssqs.Client, error) {
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("sqs: no AWS region: set Config.Region (OWED_SQS_REGION) or AWS_REGION")
	}
	return awssqs.NewFromConfig(awsCfg, func(o *awssqs.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	}), nil
}

// Close releases nothing: the SDK's HTTP client needs no closing. It is
// there for the contract and safe to call twice.
func (c *Client) Close() error { return nil }

// Publish sends msgs in batches of at most MaxBatch entries and
// MaxBatchBytes. Each message gets its own result; a batch the SDK could
// not send after its retries fails each of its messages.
func (c *Client) Publish(ctx context.Context, msgs []queue.Message) ([]queue.PublishResult, error) {
	res := make([]queue.PublishResult, len(msgs))
	var batch []types.SendMessageBatchRequestEntry
	var index []int
	size := 0
	flush := func() {
		if len(batch) > 0 {
			c.sendBatch(ctx, batch, index, res)
		}
		batch, index, size = batch[:0], index[:0], 0
	}
	for i, m := range msgs {
		if err := validMessage(m); err != nil {
			res[i].Err = err
			continue
		}
		attrs := keyAttribute(m.Key)
		n := len(m.Body) + attributesSize(attrs)
		if n > MaxBatchBytes {
			res[i].Err = fmt.Errorf("sqs: message of %d bytes with its attributes exceeds %d", n, MaxBatchBytes)
			continue
		}
		if len(batch) == MaxBatch || size+n > MaxBatchBytes {
			flush()
		}
		entry := types.SendMessageBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			MessageBody:       aws.String(string(m.Body)),
			DelaySeconds:      seconds(m.Delay),
			MessageAttributes: attrs,
		}
		if c.cfg.FairQueue && m.Group != "" {
			entry.MessageGroupId = aws.String(groupID(m.Group))
		}
		batch = append(batch, entry)
		index = append(index, i)
		size += n
	}
	flush()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return res, nil
}

func (c *Client) sendBatch(ctx context.Context, batch []types.SendMessageBatchRequestEntry, index []int, res []queue.PublishResult) {
	out, err := c.api.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{
		QueueUrl: aws.String(c.cfg.QueueURL),
		Entries:  batch,
	})
	if err != nil {
		for _, i := range index {
			res[i].Err = fmt.Errorf("sqs: send: %w", err)
		}
		return
	}
	for _, ok := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(ok.Id)); err == nil && i < len(res) {
			res[i].ID = aws.ToString(ok.MessageId)
		}
	}
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i < len(res) {
			res[i].Err = fmt.Errorf("sqs: send: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	for _, i := range index {
		if res[i].ID == "" && res[i].Err == nil {
			res[i].Err = errors.New("sqs: send: the batch answer named neither success nor failure")
		}
	}
}

// validMessage refuses what SQS would refuse for the whole batch: a delay
// outside 0…15 min, and a body SQS cannot carry (it takes text only:
// UTF-8 without most control characters).
func validMessage(m queue.Message) error {
	if err := queue.CheckDelay(m.Delay); err != nil {
		return fmt.Errorf("sqs: %w", err)
	}
	if len(m.Body) == 0 {
		return errors.New("sqs: a message body must not be empty")
	}
	if !utf8.Valid(m.Body) {
		return errors.New("sqs: a message body must be UTF-8 text")
	}
	for _, r := range string(m.Body) {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF {
			return fmt.Errorf("sqs: a message body must not hold the character %U", r)
		}
	}
	return nil
}

func keyAttribute(key string) map[string]types.MessageAttributeValue {
	if key == "" {
		return nil
	}
	return map[string]types.MessageAttributeValue{AttrKey: stringAttr(key)}
}

func stringAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

// attributesSize is what SQS counts of attributes toward a message's size:
// each name, data type and value.
func attributesSize(attrs map[string]types.MessageAttributeValue) int {
	n := 0
	for name, v := range attrs {
		n += len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	return n
}

// Receive returns up to max (at most MaxBatch) messages, long-polling up to
// wait (rounded up to whole seconds) and hiding them for visibility (0 =
// the queue's visibility timeout).
func (c *Client) Receive(ctx context.Context, max int, wait, visibility time.Duration) ([]queue.Delivery, error) {
	if err := queue.CheckReceive(max, wait, visibility); err != nil {
		return nil, fmt.Errorf("sqs: %w", err)
	}
	msgs, err := c.receive(ctx, c.cfg.QueueURL, min(max, MaxBatch), wait, visibility)
	if err != nil {
		return nil, err
	}
	out := make([]queue.Delivery, 0, len(msgs))
	for _, m := range msgs {
		count, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		out = append(out, queue.Delivery{
			ID:           aws.ToString(m.MessageId),
			Receipt:      aws.ToString(m.ReceiptHandle),
			Key:          attr(m, AttrKey),
			Body:         []byte(aws.ToString(m.Body)),
			ReceiveCount: count,
			PublishedAt:  sentAt(m),
		})
	}
	return out, nil
}

// receive is one ReceiveMessage with the attributes owed reads.
func (c *Client) receive(ctx context.Context, queue string, max int, wait, visibility time.Duration) ([]types.Message, error) {
	in := &awssqs.ReceiveMessageInput{
		QueueUrl:            aws.String(queue),
		MaxNumberOfMessages: int32(max),
		WaitTimeSeconds:     seconds(wait),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
		},
		MessageAttributeNames: []string{AttrKey, AttrReason, AttrMessageID},
		// The deprecated spelling of the same request, for SQS-compatible
		// servers that read only it (local-aws-sqs 2.0); SQS takes both.
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeName(types.MessageSystemAttributeNameApproximateReceiveCount),
			types.QueueAttributeName(types.MessageSystemAttributeNameSentTimestamp),
		},
	}
	if visibility > 0 {
		in.VisibilityTimeout = seconds(visibility)
	}
	out, err := c.api.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("sqs: receive: %w", err)
	}
	return out.Messages, nil
}

func attr(m types.Message, name string) string {
	return aws.ToString(m.MessageAttributes[name].StringValue)
}

func sentAt(m types.Message) time.Time {
	ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Ack deletes the messages. SQS refuses a malformed or expired receipt
// per entry; those are stale receipts, not errors. (A receipt of a message
// received again since is accepted, and SQS may then delete nothing.)
func (c *Client) Ack(ctx context.Context, receipts ...string) error {
	return c.deleteMessages(ctx, c.cfg.QueueURL, receipts)
}

func (c *Client) deleteMessages(ctx context.Context, queue string, receipts []string) error {
	for start := 0; start < len(receipts); start += MaxBatch {
		chunk := receipts[start:min(start+MaxBatch, len(receipts))]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, r := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r)}
		}
		out, err := c.api.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(queue), Entries: entries})
		if err != nil {
			return fmt.Errorf("sqs: delete: %w", err)
		}
		for _, f := range out.Failed {
			if !staleReceiptCode(aws.ToString(f.Code)) {
				return fmt.Errorf("sqs: delete: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
			}
		}
	}
	return nil
}

// ChangeVisibility hides the message for d (rounded up to whole seconds)
// from now; 0 makes it visible at once. A receipt whose message is no
// longer in flight is not an error.
func (c *Client) ChangeVisibility(ctx context.Context, receipt string, d time.Duration) error {
	if err := queue.CheckVisibility(d); err != nil {
		return fmt.Errorf("sqs: %w", err)
	}
	_, err := c.api.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(c.cfg.QueueURL),
		ReceiptHandle:     aws.String(receipt),
		VisibilityTimeout: seconds(d),
	})
	if err != nil && !staleReceipt(err) {
		return fmt.Errorf("sqs: change visibility: %w", err)
	}
	return nil
}

// staleReceipt reports SQS's answers to a receipt that is no longer good:
// the message is not in flight, or the handle expired or never was one.
func staleReceipt(err error) bool {
	var notInflight *types.MessageNotInflight
	var invalid *types.ReceiptHandleIsInvalid
	if errors.As(err, &notInflight) || errors.As(err, &invalid) {
		return true
	}
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && staleReceiptCode(apiErr.ErrorCode())
}

func staleReceiptCode(code string) bool {
	switch code {
	case "ReceiptHandleIsInvalid", "AWS.SimpleQueueService.ReceiptHandleIsInvalid",
		"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight",
		// SQS answers a handle of a deleted message this way.
		"InvalidParameterValue":
		return true
	}
	return false
}

// groupID is a message group id SQS takes for group: group itself when it
// is 1 to 128 of the characters SQS allows (letters, digits, punctuation),
// else a digest of it, so every tenant id maps to one valid group.
func groupID(group string) string {
	ok := len(group) <= 128
	for i := 0; ok && i < len(group); i++ {
		ok = group[i] > ' ' && group[i] <= '~'
	}
	if ok {
		return group
	}
	sum := sha256.Sum256([]byte(group))
	return "sha256-" + hex.EncodeToString(sum[:16])
}
