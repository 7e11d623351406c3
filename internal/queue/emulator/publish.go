package emulator

import (
	"io"
	"net/http"
	"strconv"

	"github.com/owedhq/owed/internal/queue/wire"
)

// The publishing endpoints: publish and publish_batch.

func (e *Emulator) publish(r *http.Request, req *wire.PublishRequest) (any, error) {
	entry, aerr := checkEntry(req.Payload, r.Header.Get(wire.IdempotencyKeyHeader), req.DelaySeconds, wire.IdempotencyKeyHeader+" header")
	if aerr != nil {
		return nil, aerr
	}
	out, err := e.store.publish(r.Context(), req.Queue, []publishEntry{entry})
	if err != nil {
		return nil, err
	}
	if out[0].created && entry.delay == 0 {
		e.waiters.notify(req.Queue)
	}
	return wire.PublishResponse{MessageID: out[0].id, Deduplicated: !out[0].created}, nil
}

// parsePublishBatch decodes and checks a publish_batch body: errors that
// reject the whole request come back as the error, an entry's own problem
// as a failed result. entries[i] is the index into results of each entry to
// store (a key repeated within the batch is stored once); dups maps a later
// repeat to the entry that carries its key.
func parsePublishBatch(body io.Reader) (req wire.PublishBatchRequest, results []wire.BatchResult, entries []publishEntry, index []int, dups map[int]int, aerr *apiError) {
	if aerr = decodeJSON(body, &req); aerr != nil {
		return
	}
	if req.Messages == nil {
		aerr = invalid("messages", "is required; want 1..%d messages", wire.MaxBatch)
		return
	}
	if n := len(req.Messages); n < 1 || n > wire.MaxBatch {
		aerr = invalid("messages", "has %d entries; want 1..%d", n, wire.MaxBatch)
		return
	}
	results = make([]wire.BatchResult, len(req.Messages))
	seen := make(map[string]int, len(req.Messages))
	for i, m := range req.Messages {
		entry, err := checkEntry(m.Payload, m.IdempotencyKey, m.DelaySeconds, "idempotency_key")
		if err != nil {
			results[i] = wire.BatchResult{Status: wire.StatusFailed, Reason: err.code + ": messages[" + strconv.Itoa(i) + "]." + err.msg}
			continue
		}
		if first, ok := seen[entry.key]; ok {
			if dups == nil {
				dups = make(map[int]int)
			}
			dups[i] = first
			continue
		}
		seen[entry.key] = i
		entries = append(entries, entry)
		index = append(index, i)
	}
	return
}

func (e *Emulator) publishBatch(r *http.Request) (any, error) {
	req, results, entries, index, dups, aerr := parsePublishBatch(http.MaxBytesReader(nil, r.Body, batchBodyLimit))
	if aerr != nil {
		return nil, aerr
	}
	if aerr := e.checkQueue(req.Queue); aerr != nil {
		return nil, aerr
	}
	if len(entries) > 0 {
		out, err := e.store.publish(r.Context(), req.Queue, entries)
		if err != nil {
			return nil, err
		}
		wake := false
		for j, o := range out {
			i := index[j]
			results[i] = wire.BatchResult{Status: wire.StatusDeduplicated, MessageID: o.id}
			if o.created {
				results[i].Status = wire.StatusCreated
				wake = wake || entries[j].delay == 0
			}
		}
		if wake {
			e.waiters.notify(req.Queue)
		}
	}
	for i, first := range dups {
		results[i] = wire.BatchResult{Status: wire.StatusDeduplicated, MessageID: results[first].MessageID}
	}
	return wire.PublishBatchResponse{Results: results}, nil
}
