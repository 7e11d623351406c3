package worker

import (
	"context"
	"time"
)

// batcher gathers what concurrent senders submit and hands it to flush in
// batches of up to size, or whatever has gathered after linger (with no
// linger: whatever gathered while the previous batch was flushed), so that
// many messages share one ledger commit or one queue call. A sender that
// waits for its result is held at most linger plus one flush: batching
// changes when work reaches the database, never its order within a message
// (a claim before its send, a settle before its ack).
type batcher[T, R any] struct {
	in     chan batchItem[T, R]
	size   int
	linger time.Duration
	// flush handles one batch and answers one result and one error per
	// item, in order.
	flush func(ctx context.Context, items []T) ([]R, []error)
	done  chan struct{}
}

type batchItem[T, R any] struct {
	v   T
	res chan batchResult[R] // nil: nobody waits
}

type batchResult[R any] struct {
	r   R
	err error
}

// newBatcher returns a batcher that start runs until stop.
func newBatcher[T, R any](size int, linger time.Duration,
	flush func(context.Context, []T) ([]R, []error)) *batcher[T, R] {
	return &batcher[T, R]{in: make(chan batchItem[T, R], size), size: size, linger: linger, flush: flush,
		done: make(chan struct{})}
}

// start runs the batcher until stop; it is called once. ctx should outlive
// the senders: stop drains what was submitted before it returns.
func (b *batcher[T, R]) start(ctx context.Context) { go b.run(ctx) }

// do submits v and waits for its result.
func (b *batcher[T, R]) do(v T) (R, error) {
	res := make(chan batchResult[R], 1)
	b.in <- batchItem[T, R]{v: v, res: res}
	r := <-res
	return r.r, r.err
}

// post submits v without waiting.
func (b *batcher[T, R]) post(v T) { b.in <- batchItem[T, R]{v: v} }

// stop flushes what is pending and ends the batcher. Nothing may be
// submitted after it.
func (b *batcher[T, R]) stop() {
	close(b.in)
	<-b.done
}

func (b *batcher[T, R]) run(ctx context.Context) {
	defer close(b.done)
	batch := make([]batchItem[T, R], 0, b.size)
	values := make([]T, 0, b.size)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		values = values[:0]
		for _, it := range batch {
			values = append(values, it.v)
		}
		rs, errs := b.flush(ctx, values)
		for i, it := range batch {
			if it.res == nil {
				continue
			}
			var res batchResult[R]
			if i < len(rs) {
				res.r = rs[i]
			}
			if i < len(errs) {
				res.err = errs[i]
			}
			it.res <- res
		}
		batch = batch[:0]
	}
	timer := time.NewTimer(b.linger)
	timer.Stop()
	for {
		select {
		case it, ok := <-b.in:
			if !ok {
				flush()
				return
			}
			batch = append(batch, it)
			if b.linger == 0 {
				// No linger: take what is already waiting (it gathered while
				// the last flush ran) and flush at once. Under load batches
				// fill by themselves; when idle nothing waits.
				closed := b.drain(&batch)
				flush()
				if closed {
					return
				}
				continue
			}
			if len(batch) == 1 {
				timer.Reset(b.linger)
			}
			if len(batch) == b.size {
				timer.Stop()
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

// drain moves items that are already waiting into batch, up to the batch
// size, without blocking, and reports whether the input was closed.
func (b *batcher[T, R]) drain(batch *[]batchItem[T, R]) bool {
	for len(*batch) < b.size {
		select {
		case it, ok := <-b.in:
			if !ok {
				return true
			}
			*batch = append(*batch, it)
		default:
			return false
		}
	}
	return false
}

// fill returns n copies of err, the answer of a batch that failed whole.
func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
