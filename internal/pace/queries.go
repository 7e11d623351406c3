package pace

// Every statement the pace runs. Parameters common to all of them: $1 is the
// account, and the last one is the injected clock, NULL in production so the
// database's clock_timestamp() decides (see the package doc for why).
//
// clock_timestamp() rather than now(): now() is frozen at the start of the
// transaction, before the statement waited for the row lock behind other
// processes, so a slot computed from it could already lie in the past and let
// two sends through closer than one interval. clock_timestamp() in
// qReserveN's UPDATE (which joins the row its locked CTE holds) and in SET
// and WHERE of ON CONFLICT DO UPDATE is read after the lock is held.

const (
	// clockReserve, clockPause and clockState are "now" in each statement:
	// the injected instant if any, otherwise the database's wall clock at the
	// moment of evaluation.
	clockReserve = `coalesce($4::timestamptz, clock_timestamp())`
	clockPause   = `coalesce($3::timestamptz, clock_timestamp())`
	clockState   = `coalesce($2::timestamptz, clock_timestamp())`

	// Durations travel as whole microseconds (Postgres's resolution) and
	// become intervals here, so no interval text is ever parsed.
	intervalMicros = `($2::bigint * interval '1 microsecond')`
	maxWaitMicros  = `($3::bigint * interval '1 microsecond')`
	pauseMicros    = `($2::bigint * interval '1 microsecond')`

	// qReserveN takes up to $5 slots in one statement, or reports the
	// earliest one without taking any. locked reads the account's row FOR
	// UPDATE: it waits for a concurrent reservation and then sees that
	// reservation's version, not the statement's snapshot. taken computes
	// "now" once, after that lock (a sub-select in SET, so tat and
	// updated_at agree to the microsecond): the first slot starts at
	// greatest(tat, now, paused_until) (greatest ignores a NULL
	// paused_until), and tat moves past as many slots, one interval each, as
	// start within max wait ($3), at most $5. Granted slots are therefore
	// never closer than one interval, whichever process took them.
	//
	// A first slot beyond max wait takes nothing: the WHERE leaves the row
	// as it is (but locked) and taken answers nothing. The answer is the row
	// as locked, and, when slots were taken, tat as left and the "now" they
	// were computed from (updated_at); from those ReserveN works out the
	// first slot and the count exactly. Without slots taken, the "now" is
	// read again for the refusal's wait. An account without a row answers
	// nothing: ReserveN creates it (qCreate) and asks again.
	qReserveN = `
WITH locked AS (
    SELECT tat, paused_until
      FROM owed_provider_pace
     WHERE account = $1
       FOR UPDATE
), taken AS (
    UPDATE owed_provider_pace p
       SET (tat, updated_at) = (
           SELECT s.start + least($5::int, floor((extract(epoch FROM s.now - s.start) * 1000000 + $3::bigint) / $2::bigint)::int + 1)
                            * ` + intervalMicros + `,
                  s.now
             FROM (SELECT greatest(l.tat, c.now, l.paused_until) AS start, c.now
                     FROM (SELECT ` + clockReserve + ` AS now) c) s)
      FROM locked l
     WHERE p.account = $1
       AND greatest(l.tat, ` + clockReserve + `, l.paused_until) <= ` + clockReserve + ` + ` + maxWaitMicros + `
    RETURNING p.tat, p.updated_at
)
SELECT l.tat, l.paused_until, t.tat, coalesce(t.updated_at, ` + clockReserve + `)
  FROM locked l LEFT JOIN taken t ON true`

	// qCreate creates an account's row with nothing reserved: its tat is
	// now, so the first slot starts at the first reservation's now.
	qCreate = `
INSERT INTO owed_provider_pace (account, tat, updated_at)
VALUES ($1, coalesce($2::timestamptz, clock_timestamp()), coalesce($2::timestamptz, clock_timestamp()))
ON CONFLICT (account) DO NOTHING`

	// qGiveBack moves tat back by $3 microseconds (the last slots of a
	// reservation) only if it still ends where that reservation left it
	// ($2): then no process took a slot after them, and the next
	// reservation starts at the first slot given back (or now, or the
	// pause's end, whichever is latest). Anything else (a later
	// reservation, a pause that moved tat) leaves the row alone.
	qGiveBack = `
UPDATE owed_provider_pace
   SET tat = tat - ($3::bigint * interval '1 microsecond'),
       updated_at = coalesce($4::timestamptz, clock_timestamp())
 WHERE account = $1 AND tat = $2`

	// qPause records a 429: no slot starts before now + Retry-After ($2).
	// greatest() keeps a longer pause another process recorded. tat moves to
	// the pause's end too, so State shows the truth and the slots handed out
	// after the pause follow one another an interval apart from its end.
	// The minute is also recorded in owed_provider_limited_minutes, the history
	// behind owedctl stats' "minutes the provider limited us".
	qPause = `
WITH limited AS (
    INSERT INTO owed_provider_limited_minutes (account, minute)
    VALUES ($1, date_trunc('minute', ` + clockPause + `))
    ON CONFLICT DO NOTHING
)
INSERT INTO owed_provider_pace AS p (account, tat, paused_until, updated_at)
VALUES ($1, ` + clockPause + ` + ` + pauseMicros + `, ` + clockPause + ` + ` + pauseMicros + `, ` + clockPause + `)
ON CONFLICT (account) DO UPDATE
   SET paused_until = greatest(p.paused_until, ` + clockPause + ` + ` + pauseMicros + `),
       tat = greatest(p.tat, ` + clockPause + ` + ` + pauseMicros + `),
       updated_at = ` + clockPause

	// qState reads an account's pace for metrics and owedctl. The left join
	// answers with the clock even for an account that never reserved.
	qState = `
SELECT c.now, p.tat, p.paused_until
  FROM (SELECT ` + clockState + ` AS now) c
  LEFT JOIN owed_provider_pace p ON p.account = $1`

	// qRecordLimitedMinute records a 429 of an unlimited account, whose pace
	// lives in process memory.
	qRecordLimitedMinute = `
INSERT INTO owed_provider_limited_minutes (account, minute)
VALUES ($1, date_trunc('minute', coalesce($2::timestamptz, clock_timestamp())))
ON CONFLICT DO NOTHING`

	// qLimitedMinutes counts the minutes since $1 in which any account was
	// refused.
	qLimitedMinutes = `SELECT count(DISTINCT minute) FROM owed_provider_limited_minutes WHERE minute >= date_trunc('minute', $1::timestamptz)`
)
