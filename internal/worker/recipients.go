package worker

import (
	"context"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/pace"
)

// Per-recipient limits. Some providers limit one recipient apart from the
// account: a Telegram chat takes about one message a second, a Slack channel
// one a second, a pair of phone numbers at Twilio 30 in 30 seconds. Their
// rate-limited answer (provider.RateLimited with Error.Recipient) delays that
// row and the later rows to that recipient, never the account's other
// recipients: the account's shared pace is paused only by an account-wide
// limit.
//
// What a process knows of its recipients is kept in memory, bounded
// (recipientsTracked, least recently used first out), keyed by provider
// account and resolved address: a limit the provider set on a recipient
// ends at an instant on the worker's clock, and a per-recipient pace
// (OWED_RECIPIENT_RATE_<CHANNEL>) keeps the recipient's next slot. Before a
// row takes its turn at the account's pace (reserve), recipientTurn asks
// for the recipient's: a recipient free within the pace max wait is waited
// for, a later one gives the row back, with no attempt, for as long as the
// recipient's wait (handed back to the ledger past QueueDelayMax). Another
// process learns of a recipient's limit only from the provider's own
// answer, and a per-recipient pace is each process's own: K processes may
// together send K times the rate to one recipient.
//
// A provider's answer does not always say which limit was hit (Telegram's
// and Slack's 429s do not; their adapters take them as the recipient's,
// since owed paces the account below the account-wide limit), so the
// recipient's answers are watched too: when recipientLimitsAccountWide
// distinct recipients of one account are limited within recipientLimitWindow,
// the limit is taken to be the account's and its shared pace is paused as
// for any 429.
const (
	// recipientsTracked bounds the recipients a process remembers (about a
	// hundred bytes each).
	recipientsTracked = 100_000
	// recipientLimitsAccountWide and recipientLimitWindow say when
	// recipients' limits are the account's: this many distinct recipients
	// of one account limited within the window.
	recipientLimitsAccountWide = 5
	recipientLimitWindow       = 10 * time.Second
)

// recipientKey names one recipient of one provider account.
type recipientKey struct{ account, address string }

// recipientState is what the process knows of one recipient, as Readings
// of the worker's clock: a step of its wall clock moves none of them.
type recipientState struct {
	// limitedUntil is when the provider's limit on the recipient ends.
	limitedUntil clock.Reading
	// next is the recipient's next slot at its per-recipient pace.
	next clock.Reading
}

// recipientLimit is one recipient limited by the provider, for the
// account-wide test.
type recipientLimit struct {
	address string
	at      clock.Reading
}

// recipients is the process's per-recipient limits and paces.
type recipients struct {
	clock clock.Clock
	// rates is each channel's per-recipient pace; a channel without one
	// has no per-recipient pace.
	rates map[string]pace.Rate

	mu    sync.Mutex
	known *lru.Cache[recipientKey, *recipientState]
	// recent is, per account, the recipient limits within the window.
	recent map[string][]recipientLimit
}

func newRecipients(clk clock.Clock, rates map[string]pace.Rate) *recipients {
	known, err := lru.New[recipientKey, *recipientState](recipientsTracked)
	if err != nil {
		panic(err) // only a size below one fails
	}
	return &recipients{clock: clk, rates: rates, known: known, recent: map[string][]recipientLimit{}}
}

// turn takes the recipient's next turn if it comes within maxWait and says
// how long to wait for it; otherwise it takes nothing and says how long
// until the recipient may be sent to.
func (r *recipients) turn(account, channel, address string, maxWait time.Duration) (wait time.Duration, granted bool) {
	rate, paced := r.rates[channel]
	paced = paced && !rate.IsUnlimited()
	k := recipientKey{account, address}
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.known.Get(k)
	if !ok {
		if !paced {
			return 0, true
		}
		st = &recipientState{}
		r.known.Add(k, st)
	}
	now := clock.Read(r.clock)
	at := now
	for _, t := range []clock.Reading{st.limitedUntil, st.next} {
		if t.After(at) {
			at = t
		}
	}
	wait = at.Sub(now)
	if wait > maxWait {
		return wait, false
	}
	if paced {
		st.next = at.Add(rate.Interval())
	}
	return wait, true
}

// limited records that the provider limited the recipient for d, and
// reports whether enough of the account's recipients were limited within
// recipientLimitWindow for the limit to be the account's.
func (r *recipients) limited(account, address string, d time.Duration) (accountWide bool) {
	k := recipientKey{account, address}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := clock.Read(r.clock)
	st, ok := r.known.Get(k)
	if !ok {
		st = &recipientState{}
		r.known.Add(k, st)
	}
	if until := now.Add(d); until.After(st.limitedUntil) {
		st.limitedUntil = until
	}
	kept := r.recent[account][:0]
	distinct := map[string]bool{address: true}
	for _, l := range r.recent[account] {
		if now.Sub(l.at) < recipientLimitWindow && l.address != address {
			kept = append(kept, l)
			distinct[l.address] = true
		}
	}
	r.recent[account] = append(kept, recipientLimit{address: address, at: now})
	return len(distinct) >= recipientLimitsAccountWide
}

// recipientTurn waits for the row's recipient: a provider's limit on it, or
// its per-recipient pace. It returns false when the row was given back
// instead, with no attempt, until the recipient may be sent to.
func (e *executor) recipientTurn(ctx context.Context, dl *delivery) bool {
	wait, granted := e.recipients.turn(dl.sender.Name(), dl.row.Channel, dl.request.Recipient, e.paceMaxWait)
	if !granted {
		e.completer.release(ctx, dl, retry{after: wait, reason: "waiting for the recipient's limit at the provider"})
		e.metrics.outcome("recipient_limited")
		return false
	}
	if wait > 0 && !clock.Sleep(ctx, wait) {
		e.completer.abandon(ctx, dl, false)
		return false
	}
	return true
}

// recipientLimited handles a rate-limited answer the provider scoped to the
// row's recipient: the recipient waits after, the row comes back then with
// no attempt, and the account is not paused, unless several of its
// recipients were limited at once (recipients.limited), when it reports
// false and the caller pauses the account as for any 429.
func (e *executor) recipientLimited(ctx context.Context, dl *delivery, after time.Duration) bool {
	account := dl.sender.Name()
	if e.recipients.limited(account, dl.request.Recipient, after) {
		dl.log.Warn().Str("account", account).Int("recipients", recipientLimitsAccountWide).Dur("window", recipientLimitWindow).
			Msg("several recipients of the account were rate limited at once: taking the limit as the account's and pausing it")
		return false
	}
	e.completer.release(ctx, dl, retry{after: after, reason: "rate limited by the provider for this recipient"})
	e.metrics.outcome("recipient_limited")
	return true
}
