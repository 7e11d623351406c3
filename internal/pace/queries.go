package pace

// Every statement the pace runs. Parameters common to all of them: $1 is the
// account, and the last one is the injected clock, NULL in production so the
// database's clock_timestamp() decides (see the package doc for why).
//
// clock_timestamp() rather than now(): now() is frozen at the start of the
// transaction, before the statement waited for the row lock behind other
// processes, so a slot computed from it could already lie in the past and let
// two sends through closer than one interval. clock_timestamp() inside SET and
// WHERE of ON CONFLICT DO UPDATE is read after the lock is held.

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

	// qReserve takes the next slot in one statement, or reports the earliest
	// one without taking it. The slot starts at greatest(tat, now,
	// paused_until) (greatest ignores a NULL paused_until) and taking it moves
	// tat one interval past that start, so granted slots are never closer than
	// one interval, whichever process took them. ON CONFLICT DO UPDATE locks
	// the row and sees its latest committed version, which is what makes
	// concurrent reservations from many processes queue up one interval apart
	// instead of sharing a slot.
	//
	// A slot further away than max wait ($3) is not taken: the WHERE leaves the
	// row as it is (but locked), nothing comes back from granted, and denied
	// reads the row to say when the earliest slot is. FOR UPDATE there makes
	// that read see the latest version (the one the upsert locked) rather than
	// the statement's snapshot, which a concurrent reservation may have
	// outdated. A first reservation inserts the row with its slot at now. A
	// row another statement inserted after this one's snapshot is invisible
	// to denied even FOR UPDATE, so a refusal racing the account's first
	// reservation answers nothing; Reserve then asks again.
	qReserve = `
WITH granted AS (
    INSERT INTO owed_provider_pace AS p (account, tat, updated_at)
    VALUES ($1, ` + clockReserve + ` + ` + intervalMicros + `, ` + clockReserve + `)
    ON CONFLICT (account) DO UPDATE
       SET tat = greatest(p.tat, ` + clockReserve + `, p.paused_until) + ` + intervalMicros + `,
           updated_at = ` + clockReserve + `
     WHERE greatest(p.tat, ` + clockReserve + `, p.paused_until) <= ` + clockReserve + ` + ` + maxWaitMicros + `
    RETURNING p.tat - ` + intervalMicros + ` AS slot_at, p.updated_at AS now
), denied AS (
    SELECT greatest(p.tat, c.now, p.paused_until) AS slot_at, c.now
      FROM owed_provider_pace p, (SELECT ` + clockReserve + ` AS now) c
     WHERE p.account = $1 AND NOT EXISTS (SELECT FROM granted)
       FOR UPDATE OF p
)
SELECT true, slot_at, now FROM granted
UNION ALL
SELECT false, slot_at, now FROM denied`

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
