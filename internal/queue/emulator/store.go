package emulator

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/queue/wire"
)

// Every statement the emulator runs is in this file. Each request is one
// autocommitted statement, so a response is only sent after its change is
// committed: killing the emulator at any point loses nothing it acknowledged.

// publishSQL enqueues a batch and records its keys in one statement. Ids are
// drawn first so a key row can point at its message; a key seen within the
// dedup window ($5 ms) is left alone and answered with its original id, an
// older one is taken over by the new message.
const publishSQL = `
WITH input AS MATERIALIZED (
	SELECT t.ord, t.payload, t.key, t.delay, nextval('owed_queue.messages_id_seq') AS id
	FROM unnest($2::bytea[], $3::text[], $4::int[]) WITH ORDINALITY AS t(payload, key, delay, ord)
), claimed AS (
	INSERT INTO owed_queue.idempotency_keys AS k (queue, key, message_id, created_at)
	SELECT $1, key, id, now() FROM input
	ON CONFLICT (queue, key) DO UPDATE
		SET message_id = excluded.message_id, created_at = excluded.created_at
		WHERE k.created_at <= now() - $5::bigint * interval '1 millisecond'
	RETURNING k.message_id
), inserted AS (
	INSERT INTO owed_queue.messages (id, queue, payload, idempotency_key, visible_at)
	SELECT i.id, $1, i.payload, i.key, now() + i.delay * interval '1 second'
	FROM input i JOIN claimed c ON c.message_id = i.id
	RETURNING id
)
SELECT i.ord, c.message_id IS NOT NULL, coalesce(c.message_id, k.message_id)
FROM input i
LEFT JOIN claimed c ON c.message_id = i.id
LEFT JOIN owed_queue.idempotency_keys k ON c.message_id IS NULL AND k.queue = $1 AND k.key = i.key
ORDER BY i.ord`

// consumeSQL leases up to $2 visible messages for $3 seconds. SKIP LOCKED
// lets any number of consumers, in any number of emulator processes, run it
// at once without handing out the same message twice. A message whose last
// delivery ran out its visibility timeout with max_receives ($4) counted
// receives already spent (a worker crashing on it, say) is dead-lettered
// here instead of being delivered again.
const consumeSQL = `
WITH picked AS (
	SELECT id, (in_flight AND receive_count - free_receives >= $4) AS exhausted
	FROM owed_queue.messages
	WHERE queue = $1 AND dead_at IS NULL AND visible_at <= now()
	ORDER BY visible_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), leased AS (
	UPDATE owed_queue.messages m SET
		receive_count = m.receive_count + CASE WHEN p.exhausted THEN 0 ELSE 1 END,
		in_flight = NOT p.exhausted,
		visible_at = CASE WHEN p.exhausted THEN m.visible_at ELSE now() + $3::int * interval '1 second' END,
		dead_at = CASE WHEN p.exhausted THEN now() END,
		last_error = CASE WHEN p.exhausted
			THEN 'visibility timeout expired after ' || m.receive_count || ' receives' ELSE m.last_error END
	FROM picked p
	WHERE m.id = p.id
	RETURNING m.id, m.payload, m.receive_count, m.idempotency_key, m.published_at, m.dead_at IS NULL AS live
)
SELECT id, payload, receive_count, idempotency_key, published_at FROM leased WHERE live ORDER BY id`

// redeliverSQL is the redelivery fault: the messages just handed out become
// visible again at once, so another consume receives them a second time.
const redeliverSQL = `
UPDATE owed_queue.messages SET visible_at = now()
WHERE queue = $1 AND id = ANY($2::bigint[]) AND dead_at IS NULL`

const ackSQL = `
DELETE FROM owed_queue.messages
WHERE queue = $1 AND id = ANY($2::bigint[]) AND dead_at IS NULL`

// nackSQL returns a message after $3 seconds. A counted failure ($4) on a
// message whose counted receives reached max_receives ($6), or an explicit
// dead_letter ($5), dead-letters it instead. An uncounted nack turns its
// delivery into a free one, never more free receives than receives.
const nackSQL = `
UPDATE owed_queue.messages SET
	free_receives = CASE WHEN $4 THEN free_receives ELSE least(receive_count, free_receives + 1) END,
	dead_at = CASE WHEN $5 OR ($4 AND receive_count - free_receives >= $6) THEN now() END,
	last_error = coalesce(nullif($7, ''), CASE WHEN $5 OR ($4 AND receive_count - free_receives >= $6)
		THEN 'nacked as a failure after ' || receive_count || ' receives' ELSE last_error END),
	visible_at = now() + $3::int * interval '1 second',
	in_flight = false
WHERE queue = $1 AND id = $2 AND dead_at IS NULL
RETURNING dead_at IS NOT NULL, visible_at <= now()`

const extendSQL = `
UPDATE owed_queue.messages SET visible_at = now() + $3::int * interval '1 second'
WHERE queue = $1 AND id = $2 AND dead_at IS NULL AND in_flight
RETURNING visible_at`

// deadLettersSQL pages dead letters by id; $4 is NULL or the ids asked for.
const deadLettersSQL = `
SELECT id, payload, receive_count, idempotency_key, published_at, dead_at, coalesce(last_error, '')
FROM owed_queue.messages
WHERE queue = $1 AND dead_at IS NOT NULL AND id > $2 AND ($4::bigint[] IS NULL OR id = ANY($4::bigint[]))
ORDER BY id
LIMIT $3`

// redriveSQL puts dead letters back with a fresh receive count; $3 means all.
const redriveSQL = `
UPDATE owed_queue.messages SET
	dead_at = NULL, receive_count = 0, free_receives = 0, in_flight = false,
	visible_at = now(), last_error = NULL
WHERE queue = $1 AND dead_at IS NOT NULL AND ($3 OR id = ANY($2::bigint[]))`

const deleteDeadLettersSQL = `
DELETE FROM owed_queue.messages
WHERE queue = $1 AND dead_at IS NOT NULL AND id = ANY($2::bigint[])`

const statsSQL = `
SELECT
	count(*) FILTER (WHERE dead_at IS NULL AND visible_at <= now()),
	count(*) FILTER (WHERE dead_at IS NULL AND visible_at > now() AND in_flight),
	count(*) FILTER (WHERE dead_at IS NULL AND visible_at > now() AND NOT in_flight),
	count(*) FILTER (WHERE dead_at IS NOT NULL),
	coalesce(extract(epoch FROM now() - min(published_at) FILTER (WHERE dead_at IS NULL)), 0)::float8
FROM owed_queue.messages
WHERE queue = $1`

// pruneKeysSQL forgets keys older than the dedup window ($1 ms), a bounded
// slice ($2) at a time so one run never holds locks for long.
const pruneKeysSQL = `
DELETE FROM owed_queue.idempotency_keys
WHERE (queue, key) IN (
	SELECT queue, key FROM owed_queue.idempotency_keys
	WHERE created_at <= now() - $1::bigint * interval '1 millisecond'
	LIMIT $2)`

// store runs the statements above, prepared once: a prepared statement is
// a single round trip per call and is planned once per connection, which on
// the consume path is a good share of PostgreSQL's work.
type store struct {
	db          *sql.DB
	dedupWindow time.Duration
	maxReceives int
	stmts       map[string]*sql.Stmt
}

func newStore(ctx context.Context, db *sql.DB, dedupWindow time.Duration, maxReceives int) (*store, error) {
	s := &store{db: db, dedupWindow: dedupWindow, maxReceives: maxReceives, stmts: map[string]*sql.Stmt{}}
	for _, q := range []string{publishSQL, consumeSQL, redeliverSQL, ackSQL, nackSQL, extendSQL,
		deadLettersSQL, redriveSQL, deleteDeadLettersSQL, statsSQL, pruneKeysSQL} {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("emulator: prepare statement: %w", err)
		}
		s.stmts[q] = st
	}
	return s, nil
}

func (s *store) close() {
	for _, st := range s.stmts {
		st.Close()
	}
}

// publishEntry is one validated message to enqueue.
type publishEntry struct {
	payload []byte
	key     string
	delay   int
}

// publishOutcome is what publish did with one entry.
type publishOutcome struct {
	id      string
	created bool
}

// publishRetries bounds re-running publish for keys a concurrent publish
// claimed while ours ran: the statement cannot see that other insert, the
// next statement can.
const publishRetries = 5

// publish enqueues entries, whose keys must be distinct, and returns one
// outcome per entry.
func (s *store) publish(ctx context.Context, queue string, entries []publishEntry) ([]publishOutcome, error) {
	out := make([]publishOutcome, len(entries))
	pending := make([]int, len(entries))
	for i := range pending {
		pending[i] = i
	}
	for try := 0; len(pending) > 0; try++ {
		if try == publishRetries {
			return nil, fmt.Errorf("publish: %d keys still contended after %d tries", len(pending), try)
		}
		payloads := make([][]byte, len(pending))
		keys := make([]string, len(pending))
		delays := make([]int64, len(pending))
		for j, i := range pending {
			payloads[j], keys[j], delays[j] = entries[i].payload, entries[i].key, int64(entries[i].delay)
		}
		rows, err := s.stmts[publishSQL].QueryContext(ctx, queue, pq.ByteaArray(payloads), pq.StringArray(keys),
			pq.Int64Array(delays), s.dedupWindow.Milliseconds())
		if err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
		var again []int
		for rows.Next() {
			var ord int
			var created bool
			var id sql.NullInt64
			if err := rows.Scan(&ord, &created, &id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("publish: %w", err)
			}
			i := pending[ord-1] // WITH ORDINALITY counts from 1.
			if !id.Valid {
				again = append(again, i)
				continue
			}
			out[i] = publishOutcome{id: strconv.FormatInt(id.Int64, 10), created: created}
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
		pending = again
	}
	return out, nil
}

// consume leases up to max messages for visibility seconds.
func (s *store) consume(ctx context.Context, queue string, max, visibility int) ([]wire.Message, error) {
	rows, err := s.stmts[consumeSQL].QueryContext(ctx, queue, max, visibility, s.maxReceives)
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	defer rows.Close()
	msgs := make([]wire.Message, 0, max)
	for rows.Next() {
		var m wire.Message
		var id int64
		var payload []byte
		if err := rows.Scan(&id, &payload, &m.ReceiveCount, &m.IdempotencyKey, &m.PublishedAt); err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
		m.MessageID = strconv.FormatInt(id, 10)
		m.Payload = json.RawMessage(payload)
		m.PublishedAt = m.PublishedAt.UTC()
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	return msgs, nil
}

func (s *store) redeliver(ctx context.Context, queue string, ids []int64) error {
	if _, err := s.stmts[redeliverSQL].ExecContext(ctx, queue, pq.Int64Array(ids)); err != nil {
		return fmt.Errorf("redeliver: %w", err)
	}
	return nil
}

func (s *store) ack(ctx context.Context, queue string, ids []int64) (int, error) {
	return s.execCount(ctx, "ack", ackSQL, queue, pq.Int64Array(ids))
}

// errNotFound is a message that is not (or no longer) where the request
// expects it.
var errNotFound = errors.New("not found")

// nack reports whether the message was dead-lettered and whether it is
// visible again right away.
func (s *store) nack(ctx context.Context, queue string, id int64, delay int, counted, deadLetter bool, reason string) (dead, visible bool, err error) {
	err = s.stmts[nackSQL].QueryRowContext(ctx, queue, id, delay, counted, deadLetter, s.maxReceives, reason).Scan(&dead, &visible)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, errNotFound
	}
	if err != nil {
		return false, false, fmt.Errorf("nack: %w", err)
	}
	return dead, visible, nil
}

func (s *store) extend(ctx context.Context, queue string, id int64, visibility int) (time.Time, error) {
	var until time.Time
	err := s.stmts[extendSQL].QueryRowContext(ctx, queue, id, visibility).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, errNotFound
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("extend: %w", err)
	}
	return until.UTC(), nil
}

// deadLetters returns up to limit dead letters after the id cursor, and the
// cursor of the next page ("" when there is none). A nil ids means any.
func (s *store) deadLetters(ctx context.Context, queue string, after int64, limit int, ids []int64) ([]wire.DeadLetter, string, error) {
	var idsArg driver.Valuer
	if ids != nil {
		idsArg = pq.Int64Array(ids)
	}
	// One row more than asked tells whether there is a next page.
	rows, err := s.stmts[deadLettersSQL].QueryContext(ctx, queue, after, limit+1, idsArg)
	if err != nil {
		return nil, "", fmt.Errorf("dead letters: %w", err)
	}
	defer rows.Close()
	out := make([]wire.DeadLetter, 0, limit)
	var next string
	for rows.Next() {
		if len(out) == limit {
			next = out[len(out)-1].MessageID
			break
		}
		var d wire.DeadLetter
		var id int64
		var payload []byte
		if err := rows.Scan(&id, &payload, &d.ReceiveCount, &d.IdempotencyKey, &d.PublishedAt, &d.DeadLetteredAt, &d.LastError); err != nil {
			return nil, "", fmt.Errorf("dead letters: %w", err)
		}
		d.MessageID = strconv.FormatInt(id, 10)
		d.Payload = json.RawMessage(payload)
		d.PublishedAt, d.DeadLetteredAt = d.PublishedAt.UTC(), d.DeadLetteredAt.UTC()
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("dead letters: %w", err)
	}
	return out, next, nil
}

func (s *store) redrive(ctx context.Context, queue string, ids []int64, all bool) (int, error) {
	return s.execCount(ctx, "redrive", redriveSQL, queue, pq.Int64Array(ids), all)
}

func (s *store) deleteDeadLetters(ctx context.Context, queue string, ids []int64) (int, error) {
	return s.execCount(ctx, "delete dead letters", deleteDeadLettersSQL, queue, pq.Int64Array(ids))
}

func (s *store) stats(ctx context.Context, queue string) (wire.Stats, error) {
	var st wire.Stats
	err := s.stmts[statsSQL].QueryRowContext(ctx, queue).Scan(&st.Visible, &st.InFlight, &st.Delayed, &st.DeadLetterDepth, &st.OldestAgeSeconds)
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// pruneBatch is how many expired keys one prune statement removes.
const pruneBatch = 10000

// pruneKeys forgets keys older than the dedup window and reports how many.
func (s *store) pruneKeys(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.execCount(ctx, "prune keys", pruneKeysSQL, s.dedupWindow.Milliseconds(), pruneBatch)
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
	}
}

func (s *store) execCount(ctx context.Context, what, query string, args ...any) (int, error) {
	res, err := s.stmts[query].ExecContext(ctx, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return int(n), nil
}
