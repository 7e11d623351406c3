-- Every statement the pace runs (internal/pace), by name; queries.go and
-- list.go bind each to a variable when the package is initialised. The
-- tables and functions they run on are this folder's other files.
--
-- Parameters common to all of them: $1 is the account, and the last one is
-- the injected clock, NULL in production so the database's
-- clock_timestamp() decides (see the package doc for why).
--
-- clock_timestamp() rather than now(): now() is frozen at the start of the
-- transaction, before the statement waited for the row lock behind other
-- processes, so a slot computed from it could already lie in the past and
-- let two sends through closer than one interval. clock_timestamp() in
-- ReserveN's UPDATE (which joins the row its locked CTE holds) and in SET
-- and WHERE of ON CONFLICT DO UPDATE is read after the lock is held.
--
-- The writes are SECURITY DEFINER functions owned by owed_definer
-- (pace.sql, account.sql, tenant_pauses.sql), each holding the statement
-- described below: the pace rows are every tenant's, and the runtime role
-- may read them but write them only through these functions. The comments
-- say what each function's SQL does; its parameters are numbered as here.

-- name: ReserveN
-- ReserveN takes up to $5 slots in one statement, or reports the
-- earliest one without taking any (owed_pace_reserve). locked reads the
-- account's row FOR UPDATE: it waits for a concurrent reservation and
-- then sees that reservation's version, not the statement's snapshot.
-- taken computes "now" ($4, or clock_timestamp()) once, after that lock
-- (a sub-select in SET, so tat and updated_at agree to the
-- microsecond): the first slot starts at greatest(tat, now,
-- paused_until) (greatest ignores a NULL paused_until), and tat moves
-- past as many slots, one interval ($2 microseconds) each, as start
-- within max wait ($3 microseconds), at most $5. Granted slots are
-- therefore never closer than one interval, whichever process took them.
--
-- A first slot beyond max wait takes nothing: the WHERE leaves the row
-- as it is (but locked) and taken answers nothing. The answer is the row
-- as locked, and, when slots were taken, tat as left and the "now" they
-- were computed from (updated_at); from those ReserveN works out the
-- first slot and the count exactly. Without slots taken, the "now" is
-- read again for the refusal's wait. An account without a row answers
-- nothing: ReserveN creates it (Create) and asks again.
SELECT tat, paused_until, new_tat, computed_at FROM owed_pace_reserve($1, $2, $3, $4, $5)

-- name: Create
-- Create creates an account's row with nothing reserved
-- (owed_pace_create): its tat is now, so the first slot starts at the
-- first reservation's now.
SELECT owed_pace_create($1, $2)

-- name: GiveBack
-- GiveBack moves tat back by $3 microseconds (the last slots of a
-- reservation) only if it still ends where that reservation left it
-- ($2), and answers whether it did (owed_pace_give_back): then no
-- process took a slot after them, and the next reservation starts at
-- the first slot given back (or now, or the pause's end, whichever is
-- latest). Anything else (a later reservation, a pause that moved tat)
-- leaves the row alone.
SELECT owed_pace_give_back($1, $2, $3, $4)

-- name: Pause
-- Pause records a 429: no slot starts before now + Retry-After ($2
-- microseconds) (owed_pace_pause). greatest() keeps a longer pause
-- another process recorded. tat moves to the pause's end too, so State
-- shows the truth and the slots handed out after the pause follow one
-- another an interval apart from its end. The minute is also recorded in
-- owed_provider_limited_minutes, the history behind owedctl stats'
-- "minutes the provider limited us".
SELECT owed_pace_pause($1, $2, $3)

-- fragment: clockState
-- clockState is "now" in State: the injected instant if any, otherwise
-- the database's wall clock at the moment of evaluation.
coalesce($2::timestamptz, clock_timestamp())

-- name: State
-- State reads an account's pace for metrics and owedctl. The left join
-- answers with the clock even for an account that never reserved.
SELECT c.now, p.tat, p.paused_until
  FROM (SELECT {{clockState}} AS now) c
  LEFT JOIN owed_provider_pace p ON p.account = $1

-- name: RecordLimitedMinute
-- RecordLimitedMinute records a 429 of an unlimited account, whose pace
-- lives in process memory (owed_pace_record_limited_minute).
SELECT owed_pace_record_limited_minute($1, $2)

-- name: LimitedMinutes
-- LimitedMinutes counts the minutes since $1 in which any account was
-- refused.
SELECT count(DISTINCT minute) FROM owed_provider_limited_minutes WHERE minute >= date_trunc('minute', $1::timestamptz)

-- name: AccountState
-- AccountState reads an account's pause, circuit and hold
-- (Accounts.State); like State it answers the clock for an account
-- without a row.
SELECT c.now, p.paused_until, p.account_reason, p.account_error, p.account_paused_at,
       coalesce(p.hold_reason, ''), coalesce(p.hold_actor, ''), p.held_at
  FROM (SELECT {{clockState}} AS now) c
  LEFT JOIN owed_provider_pace p ON p.account = $1

-- name: AccountTrip
-- AccountTrip opens the circuit for $2 microseconds with the reason $3
-- and the provider's message $4 (owed_provider_account_trip).
SELECT owed_provider_account_trip($1, $2, $3, $4, $5)

-- name: AccountProbe
-- AccountProbe takes the probe of an open circuit whose pause passed,
-- holding the others back $2 microseconds (owed_provider_account_probe).
SELECT owed_provider_account_probe($1, $2, $3)

-- name: AccountResume
-- AccountResume closes the circuit (owed_provider_account_resume).
SELECT owed_provider_account_resume($1, $2)

-- name: AccountHold
-- AccountHold holds the account for on-call: $2 the reason, $3 the
-- actor; the function writes the audit line (owed_provider_account_hold,
-- sql/account.sql).
SELECT owed_provider_account_hold($1, $2, $3, $4)

-- name: AccountUnhold
-- AccountUnhold lifts the hold and closes the circuit for on-call, $2
-- the operator and $3 the reason of the audit line
-- (owed_provider_account_unhold).
SELECT owed_provider_account_unhold($1, $2, $3, $4)

-- name: TenantPause
-- TenantPause pauses the tenant $1 for on-call, with its audit line
-- (owed_tenant_pause).
SELECT owed_tenant_pause($1, $2, $3, $4)

-- name: TenantResume
-- TenantResume lifts the tenant's pause, $2 the operator and $3 the
-- reason of the audit line (owed_tenant_resume).
SELECT owed_tenant_resume($1, $2, $3, $4)

-- name: Pauses
-- Pauses reads every operator pause, held accounts and paused tenants
-- alike, longest paused first (ReadPauses): both tables hold a handful
-- of rows at most, and a worker reads them once a second, not per send.
SELECT 'account', account, hold_reason, hold_actor, held_at FROM owed_provider_pace WHERE held_at IS NOT NULL
UNION ALL
SELECT 'tenant', tenant_id, reason, actor, paused_at FROM owed_tenant_pauses
ORDER BY 5, 2

-- name: Accounts
-- Accounts names every provider account with a pace row: each account a
-- worker reserved on, paused, tripped or on-call held (the operator
-- console's list, internal/console).
SELECT account FROM owed_provider_pace ORDER BY account

