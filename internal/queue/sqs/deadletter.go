package sqs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/owedhq/owed/internal/queue"
)

const (
	// DefaultDeadLetterPage is the listing size of a DeadLetters call that
	// names none.
	DefaultDeadLetterPage = 100
	// MaxDeadLetterPage bounds one listing.
	MaxDeadLetterPage = 1000
	// scanWait is the long poll of a dead-letter scan: a wait makes SQS ask
	// every one of its servers, where a short poll samples some and may
	// answer empty while messages wait.
	scanWait = time.Second
	// releaseTimeout bounds making scanned dead letters visible again, which
	// runs even when the scan's context has ended.
	releaseTimeout = 10 * time.Second
)

// DeadLetter sends a copy of d to the dead-letter queue with the reason and
// the original id, then deletes d. Should the delete fail, the message
// comes back and a second DeadLetter leaves a second copy: SQS standard
// queues cannot deduplicate it.
func (c *Client) DeadLetter(ctx context.Context, d queue.Delivery, reason string) error {
	attrs := map[string]types.MessageAttributeValue{AttrReason: stringAttr(reason)}
	if d.Key != "" {
		attrs[AttrKey] = stringAttr(d.Key)
	}
	if d.ID != "" {
		attrs[AttrMessageID] = stringAttr(d.ID)
	}
	if _, err := c.api.SendMessage(ctx, &awssqs.SendMessageInput{
		QueueUrl:          aws.String(c.cfg.DeadLetterQueueURL),
		MessageBody:       aws.String(string(d.Body)),
		MessageAttributes: attrs,
	}); err != nil {
		return fmt.Errorf("sqs: dead-letter %s: %w", d.ID, err)
	}
	return c.Ack(ctx, d.Receipt)
}

// DeadLetters lists up to limit dead letters, in no order. SQS has no
// cursor over a queue, so one call is the whole listing: the cursor it
// returns is always "" and it takes none. The listing receives each dead
// letter it shows, hiding it for a moment; it makes them visible again
// before it returns.
func (c *Client) DeadLetters(ctx context.Context, limit int, cursor string) ([]queue.DeadLetter, string, error) {
	if cursor != "" {
		return nil, "", fmt.Errorf("sqs: dead-letter cursor %q: SQS listings have no further pages", cursor)
	}
	if limit <= 0 {
		limit = DefaultDeadLetterPage
	}
	limit = min(limit, MaxDeadLetterPage)
	var out []queue.DeadLetter
	err := c.scanDeadLetters(ctx, func(m types.Message) (bool, bool, error) {
		reason := attr(m, AttrReason)
		if _, ok := m.MessageAttributes[AttrReason]; !ok {
			reason = ReasonRedrivePolicy
		}
		out = append(out, queue.DeadLetter{
			ID:             aws.ToString(m.MessageId),
			Key:            attr(m, AttrKey),
			Reason:         reason,
			Body:           []byte(aws.ToString(m.Body)),
			DeadLetteredAt: sentAt(m),
		})
		return false, len(out) == limit, nil
	})
	if err != nil {
		return nil, "", err
	}
	return out, "", nil
}

// Redrive sends each named dead letter back to the main queue, with its
// Key, and deletes it from the dead-letter queue.
func (c *Client) Redrive(ctx context.Context, ids ...string) (int, error) {
	return c.takeDeadLetters(ctx, ids, func(m types.Message) error {
		_, err := c.api.SendMessage(ctx, &awssqs.SendMessageInput{
			QueueUrl:          aws.String(c.cfg.QueueURL),
			MessageBody:       m.Body,
			MessageAttributes: keyAttribute(attr(m, AttrKey)),
		})
		if err != nil {
			return fmt.Errorf("sqs: redrive %s: %w", aws.ToString(m.MessageId), err)
		}
		return nil
	})
}

// DeleteDeadLetters deletes the named dead letters.
func (c *Client) DeleteDeadLetters(ctx context.Context, ids ...string) (int, error) {
	return c.takeDeadLetters(ctx, ids, func(types.Message) error { return nil })
}

// takeDeadLetters scans the dead-letter queue for ids, runs do on each one
// found and then deletes it; it says how many it took.
func (c *Client) takeDeadLetters(ctx context.Context, ids []string, do func(types.Message) error) (int, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if len(want) == 0 {
		return 0, nil
	}
	taken := 0
	err := c.scanDeadLetters(ctx, func(m types.Message) (bool, bool, error) {
		id := aws.ToString(m.MessageId)
		if !want[id] {
			return false, false, nil
		}
		if err := do(m); err != nil {
			return false, true, err
		}
		if err := c.deleteMessages(ctx, c.cfg.DeadLetterQueueURL, []string{aws.ToString(m.ReceiptHandle)}); err != nil {
			return false, true, err
		}
		delete(want, id)
		taken++
		return true, len(want) == 0, nil
	})
	return taken, err
}

// scanDeadLetters receives dead letters, hidden for PeekVisibility, and
// calls visit on each until visit says stop, the queue answers empty, or
// every message of a receive was seen before (the first ones are visible
// again). visit says whether it consumed the message (deleted it); every
// message not consumed is made visible again when the scan ends.
func (c *Client) scanDeadLetters(ctx context.Context, visit func(types.Message) (consumed, stop bool, err error)) (err error) {
	seen := map[string]bool{}
	var release []string
	defer func() {
		if rerr := c.release(ctx, release); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for {
		msgs, err := c.receive(ctx, c.cfg.DeadLetterQueueURL, MaxBatch, scanWait, PeekVisibility)
		if err != nil {
			return err
		}
		fresh, stop := false, false
		for _, m := range msgs {
			id := aws.ToString(m.MessageId)
			if stop || seen[id] {
				release = append(release, aws.ToString(m.ReceiptHandle))
				continue
			}
			seen[id], fresh = true, true
			consumed, s, err := visit(m)
			if !consumed {
				release = append(release, aws.ToString(m.ReceiptHandle))
			}
			if err != nil {
				return err
			}
			stop = s
		}
		if stop || !fresh {
			return nil
		}
	}
}

// release makes scanned dead letters visible again. It runs on a context
// of its own, so an ended scan does not leave them hidden.
func (c *Client) release(ctx context.Context, receipts []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var errs []error
	for start := 0; start < len(receipts); start += MaxBatch {
		chunk := receipts[start:min(start+MaxBatch, len(receipts))]
		entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(chunk))
		for i, r := range chunk {
			entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), ReceiptHandle: aws.String(r), VisibilityTimeout: 0,
			}
		}
		out, err := c.api.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{
			QueueUrl: aws.String(c.cfg.DeadLetterQueueURL), Entries: entries,
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range out.Failed {
			if !staleReceiptCode(aws.ToString(f.Code)) {
				errs = append(errs, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqs: make scanned dead letters visible again (they return after %v anyway): %w", PeekVisibility, err)
	}
	return nil
}
