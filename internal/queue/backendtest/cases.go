package backendtest

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue"
)

// Case names, for Skip.
const (
	CasePublishReceiveAck     = "PublishReceiveAck"
	CaseBatchResultsInOrder   = "BatchResultsInOrder"
	CaseRejectsBadArguments   = "RejectsBadArguments"
	CaseLongPollWaits         = "LongPollWaits"
	CaseDelayNotBefore        = "DelayNotBefore"
	CaseVisibilityRedelivers  = "VisibilityTimeoutRedelivers"
	CaseChangeVisibilityHolds = "ChangeVisibilityExtends"
	CaseChangeVisibilityBack  = "ChangeVisibilityReturns"
	CaseStaleReceipt          = "StaleReceiptIsNotAnError"
	CaseDeadLetterRedrive     = "DeadLetterRedriveDelete"
	CaseDeadLetterPaging      = "DeadLetterPaging"
	CaseStatsDepths           = "StatsDepths"
)

var cases = []contractCase{
	{CasePublishReceiveAck, publishReceiveAck},
	{CaseBatchResultsInOrder, batchResultsInOrder},
	{CaseRejectsBadArguments, rejectsBadArguments},
	{CaseLongPollWaits, longPollWaits},
	{CaseDelayNotBefore, delayNotBefore},
	{CaseVisibilityRedelivers, visibilityRedelivers},
	{CaseChangeVisibilityHolds, changeVisibilityExtends},
	{CaseChangeVisibilityBack, changeVisibilityReturns},
	{CaseStaleReceipt, staleReceipt},
	{CaseDeadLetterRedrive, deadLetterRedriveDelete},
	{CaseDeadLetterPaging, deadLetterPaging},
	{CaseStatsDepths, statsDepths},
}

func publishReceiveAck(t *testing.T, b queue.Queue) {
	if res, err := b.Publish(testContext(t), nil); err != nil || len(res) != 0 {
		t.Fatalf("Publish(nil) = %v, %v; want no results and no error", res, err)
	}
	start := time.Now()
	body := []byte(`{"row":1,"text":"héllo"}`)
	ids := publish(t, b, queue.Message{Key: "owed-1-1700000000000000", Body: body})
	d := receiveOne(t, b, time.Second)
	if d.ID != ids[0] || d.Key != "owed-1-1700000000000000" || !bytes.Equal(d.Body, body) {
		t.Fatalf("received id %s key %q body %q; published id %s", d.ID, d.Key, d.Body, ids[0])
	}
	if d.ReceiveCount != 1 {
		t.Fatalf("first receive count %d, want 1", d.ReceiveCount)
	}
	if skew := d.PublishedAt.Sub(start); d.PublishedAt.IsZero() || skew < -time.Minute || skew > time.Hour {
		t.Fatalf("PublishedAt %v is not the publish instant (publish began %v)", d.PublishedAt, start)
	}
	ack(t, b, d.Receipt)
	// The receive hid it for a second only: an ack that did not delete it
	// would let it surface again here.
	expectNothing(t, b, 3*time.Second)
	waitForStats(t, b, "empty after ack", depths(0, 0, 0, 0))
}

func batchResultsInOrder(t *testing.T, b queue.Queue) {
	const n = 23 // more than one SQS batch of 10, not a multiple of it
	const bad = 7
	msgs := make([]queue.Message, n)
	for i := range msgs {
		msgs[i] = queue.Message{Key: fmt.Sprintf("batch-%d", i), Body: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	msgs[bad].Delay = queue.MaxDelay + time.Second
	res, err := b.Publish(testContext(t), msgs)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(res) != n {
		t.Fatalf("Publish returned %d results for %d messages", len(res), n)
	}
	byID := map[string][]byte{}
	for i, r := range res {
		if i == bad {
			if r.Err == nil {
				t.Fatalf("message %d with a delay over %v was accepted (id %q)", i, queue.MaxDelay, r.ID)
			}
			continue
		}
		if r.Err != nil || r.ID == "" {
			t.Fatalf("message %d: id %q err %v", i, r.ID, r.Err)
		}
		if _, dup := byID[r.ID]; dup {
			t.Fatalf("message %d: id %s given twice", i, r.ID)
		}
		byID[r.ID] = msgs[i].Body
	}
	ds := receive(t, b, n-1, hold)
	receipts := make([]string, 0, len(ds))
	for _, d := range ds {
		want, ok := byID[d.ID]
		if !ok || !bytes.Equal(d.Body, want) {
			t.Fatalf("received id %s body %q; the results said that id is %q", d.ID, d.Body, want)
		}
		delete(byID, d.ID)
		receipts = append(receipts, d.Receipt)
	}
	ack(t, b, receipts...)
	waitForStats(t, b, "empty after acking the batch", depths(0, 0, 0, 0))
}

func rejectsBadArguments(t *testing.T, b queue.Queue) {
	ctx := testContext(t)
	if _, err := b.Receive(ctx, 0, 0, 0); err == nil {
		t.Fatal("Receive(max 0) succeeded")
	}
	if _, err := b.Receive(ctx, 1, queue.MaxWait+time.Second, 0); err == nil {
		t.Fatalf("Receive(wait %v) succeeded", queue.MaxWait+time.Second)
	}
	res, err := b.Publish(ctx, []queue.Message{{Body: text("early"), Delay: -time.Second}, {Body: text("fine")}})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(res) != 2 || res[0].Err == nil || res[1].Err != nil {
		t.Fatalf("Publish(negative delay, fine) = %+v; want the first refused, the second accepted", res)
	}
}

func longPollWaits(t *testing.T, b queue.Queue) {
	ctx := testContext(t)
	published := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		_, err := b.Publish(ctx, []queue.Message{{Key: "late", Body: text("late")}})
		published <- err
	}()
	ds, err := b.Receive(ctx, 10, 10*time.Second, hold)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if err := <-published; err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if len(ds) != 1 || !isText(ds[0].Body, "late") {
		t.Fatalf("a receive waiting 10 s for a message published after 0.5 s got %d message(s)", len(ds))
	}
}

func delayNotBefore(t *testing.T, b queue.Queue) {
	const delay = 2 * time.Second
	start := time.Now()
	publish(t, b, queue.Message{Key: "later", Body: text("later"), Delay: delay}, queue.Message{Key: "now", Body: text("now")})
	var receipts []string
	for range 2 {
		d := receiveOne(t, b, hold)
		if isText(d.Body, "later") {
			notBefore(t, "the delayed message surfaced", start, delay)
		}
		receipts = append(receipts, d.Receipt)
	}
	ack(t, b, receipts...)
}

func visibilityRedelivers(t *testing.T, b queue.Queue) {
	publish(t, b, queue.Message{Key: "vis", Body: text("vis")})
	start := time.Now()
	first := receiveOne(t, b, time.Second)
	second := receiveOne(t, b, hold)
	notBefore(t, "redelivered", start, time.Second)
	sameMessage(t, second, first)
	ack(t, b, second.Receipt)
	waitForStats(t, b, "empty after ack", depths(0, 0, 0, 0))
}

func changeVisibilityExtends(t *testing.T, b queue.Queue) {
	publish(t, b, queue.Message{Key: "extend", Body: text("extend")})
	// The extension must land while the receive's own visibility still
	// runs, or the message was visible again for a moment and nothing
	// follows. On a slow machine the receive and the extension can take
	// longer than that: then the message is handed back and the setup
	// repeated with a longer visibility.
	const extended = time.Minute
	own := 2 * time.Second
	var (
		d     queue.Delivery
		start time.Time
	)
	for {
		start = time.Now()
		d = receiveOne(t, b, own)
		err := b.ChangeVisibility(testContext(t), d.Receipt, extended)
		took := time.Since(start)
		if took < own-timerSlack {
			if err != nil {
				t.Fatalf("ChangeVisibility(%v): %v", extended, err)
			}
			break
		}
		if own >= extended/4 {
			t.Fatalf("receive and ChangeVisibility took %v, longer than a %v visibility (err %v)", took, own, err)
		}
		t.Logf("receive and ChangeVisibility took %v, longer than the %v visibility: repeating with %v (err %v)", took, own, 2*own, err)
		if err == nil {
			changeVisibility(t, b, d.Receipt, 0)
		}
		own *= 2
	}
	// Past the receive's own visibility, still inside the extension.
	expectNothing(t, b, time.Until(start.Add(2*own)))
	// The holder of an extended message can still ack it.
	ack(t, b, d.Receipt)
	waitForStats(t, b, "empty after acking an extended message", depths(0, 0, 0, 0))
}

func changeVisibilityReturns(t *testing.T, b queue.Queue) {
	const back = 2 * time.Second
	publish(t, b, queue.Message{Key: "return", Body: text("return")})
	first := receiveOne(t, b, hold)
	start := time.Now()
	changeVisibility(t, b, first.Receipt, back)
	second := receiveOne(t, b, hold)
	notBefore(t, "returned", start, back)
	sameMessage(t, second, first)
	ack(t, b, second.Receipt)
}

func staleReceipt(t *testing.T, b queue.Queue) {
	publish(t, b, queue.Message{Key: "stale", Body: text("stale")})
	first := receiveOne(t, b, time.Second)
	second := receiveOne(t, b, hold)
	sameMessage(t, second, first)
	ack(t, b, first.Receipt)
	ack(t, b, second.Receipt)
	ack(t, b, second.Receipt)
	ack(t, b)
	if err := b.ChangeVisibility(testContext(t), second.Receipt, 0); err != nil {
		t.Fatalf("ChangeVisibility of an acked message: %v", err)
	}
	waitForStats(t, b, "empty after acks", depths(0, 0, 0, 0))
	expectNothing(t, b, 2*time.Second)
}

func deadLetterRedriveDelete(t *testing.T, b queue.Queue) {
	ctx := testContext(t)
	publish(t, b, queue.Message{Key: "poison", Body: text("poison")}, queue.Message{Key: "fine", Body: text("fine")})
	ds := receive(t, b, 2, hold)
	poison, fine := ds[0], ds[1]
	if !isText(poison.Body, "poison") {
		poison, fine = fine, poison
	}
	const reason = "provider answered 400: unknown recipient"
	if err := b.DeadLetter(ctx, poison, reason); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	ack(t, b, fine.Receipt)
	dls := waitForDeadLetters(t, b, 1)
	dl := dls[0]
	if dl.ID == "" || dl.Key != "poison" || dl.Reason != reason || !isText(dl.Body, "poison") || dl.DeadLetteredAt.IsZero() {
		t.Fatalf("dead letter %+v; want key, reason, body and time of the poison message", dl)
	}
	// DeadLetter acked the original: nothing is in flight or visible.
	waitForStats(t, b, "one dead letter, main queue empty", depths(0, 0, 0, 1))
	expectNothing(t, b, 2*time.Second)

	if n, err := b.Redrive(ctx, dl.ID); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v; want 1", n, err)
	}
	if n, err := b.Redrive(ctx, dl.ID); err != nil || n != 0 {
		t.Fatalf("second Redrive of one dead letter = %d, %v; want 0", n, err)
	}
	back := receiveOne(t, b, hold)
	if !isText(back.Body, "poison") || back.Key != "poison" {
		t.Fatalf("redriven message body %q key %q", back.Body, back.Key)
	}
	waitForDeadLetters(t, b, 0)

	if err := b.DeadLetter(ctx, back, "again"); err != nil {
		t.Fatalf("DeadLetter of the redriven message: %v", err)
	}
	again := waitForDeadLetters(t, b, 1)[0]
	if again.Reason != "again" {
		t.Fatalf("second dead letter reason %q", again.Reason)
	}
	if n, err := b.DeleteDeadLetters(ctx, again.ID); err != nil || n != 1 {
		t.Fatalf("DeleteDeadLetters = %d, %v; want 1", n, err)
	}
	if n, err := b.DeleteDeadLetters(ctx, again.ID); err != nil || n != 0 {
		t.Fatalf("second DeleteDeadLetters = %d, %v; want 0", n, err)
	}
	if n, err := b.Redrive(ctx, "no-such-dead-letter"); err != nil || n != 0 {
		t.Fatalf("Redrive(unknown id) = %d, %v; want 0, nil", n, err)
	}
	waitForDeadLetters(t, b, 0)
	waitForStats(t, b, "everything gone", depths(0, 0, 0, 0))
}

func deadLetterPaging(t *testing.T, b queue.Queue) {
	const n = 5
	msgs := make([]queue.Message, n)
	for i := range msgs {
		msgs[i] = queue.Message{Key: fmt.Sprintf("page-%d", i), Body: text(fmt.Sprintf("page-%d", i))}
	}
	publish(t, b, msgs...)
	for _, d := range receive(t, b, n, hold) {
		if err := b.DeadLetter(testContext(t), d, "paging"); err != nil {
			t.Fatalf("DeadLetter: %v", err)
		}
	}
	waitForDeadLetters(t, b, n)
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		if page > n {
			t.Fatalf("still paging after %d pages of 2 over %d dead letters", page, n)
		}
		dls, next, err := b.DeadLetters(testContext(t), 2, cursor)
		if err != nil {
			t.Fatalf("DeadLetters(2, %q): %v", cursor, err)
		}
		if len(dls) > 2 {
			t.Fatalf("a page of limit 2 held %d", len(dls))
		}
		for _, dl := range dls {
			if slices.Contains(seen, dl.ID) {
				t.Fatalf("dead letter %s listed on two pages", dl.ID)
			}
			seen = append(seen, dl.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != n {
		t.Fatalf("paging listed %d dead letters, want %d", len(seen), n)
	}
}

func statsDepths(t *testing.T, b queue.Queue) {
	publish(t, b,
		queue.Message{Key: "s1", Body: text("s1")},
		queue.Message{Key: "s2", Body: text("s2")},
		queue.Message{Key: "s3", Body: text("s3")},
		queue.Message{Key: "s4", Body: text("s4"), Delay: 10 * time.Minute},
	)
	held := receiveOne(t, b, hold)
	s := waitForStats(t, b, "2 visible, 1 in flight, 1 delayed", depths(2, 1, 1, 0))
	if s.OldestAge < 0 {
		t.Fatalf("negative oldest age %v", s.OldestAge)
	}
	if err := b.DeadLetter(testContext(t), held, "stats"); err != nil {
		t.Fatalf("DeadLetter: %v", err)
	}
	waitForStats(t, b, "2 visible, 1 delayed, 1 dead letter", depths(2, 0, 1, 1))
}
