package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/provider"
)

// Undeliverable recipients (owed_undeliverable,
// internal/ledger/sql/undeliverable.sql; docs/providers.md): a
// recipient's permanent failure (provider.Error.Recipient: a STOP reply, a
// blocked bot, an inactive or invalid address) marks the resolved address
// undeliverable on its channel in the row's tenant, and a later row to that
// address is settled skipped before it reaches the provider, until
// `owedctl recipients clear` removes the mark. Options.NoUndeliverable
// (OWED_UNDELIVERABLE=false) turns both off.

// undeliverable checks the mark of the row's resolved address and, when
// there is one, settles the row skipped with the mark's provider, code and
// time instead of sending. It returns true when the row was settled or
// released instead. When the address is the row's recipient (the recipient
// resolver) the claim read the mark already (ledger.Claim.Undeliverable);
// an address a resolver mapped the recipient to is looked up (one read by
// the table's key in the tenant's scope).
func (e *executor) undeliverable(ctx context.Context, dl *delivery) bool {
	if e.noUndeliverable {
		return false
	}
	u, marked, err := e.mark(ctx, dl)
	switch {
	case err != nil:
		// Not knowing is no reason to send to an address that may have
		// opted out, nor to fail the row: it comes back, at no attempt.
		e.completer.unknown(ctx, dl, "undeliverable look-up failed", err)
		return true
	case !marked:
		return false
	}
	reason := fmt.Sprintf("recipient undeliverable: %s %s since %s", u.Provider, u.Code, u.MarkedAt.UTC().Format(time.RFC3339))
	dl.log.Info().Str("channel", u.Channel).Str("reason", reason).Msg("recipient marked undeliverable; the row is skipped, not sent")
	e.completer.skip(ctx, dl, reason, "undeliverable")
	return true
}

// mark is the undeliverable mark of dl's resolved address, from the claim
// when the address is the recipient, otherwise from the ledger.
func (e *executor) mark(ctx context.Context, dl *delivery) (ledger.Undeliverable, bool, error) {
	if dl.request.Recipient == dl.row.Recipient {
		if dl.mark == nil {
			return ledger.Undeliverable{}, false, nil
		}
		return *dl.mark, true, nil
	}
	return e.ledger.LookupUndeliverable(ctx, dl.row.Tenant, dl.row.Channel, dl.request.Recipient)
}

// markUndeliverable records the row's resolved address as undeliverable
// after the provider refused it as the recipient's (pe.Recipient). It runs
// after the failed settle, on its own detached context: a mark that fails
// is logged and the row's failure stands.
func (c *completer) markUndeliverable(ctx context.Context, dl *delivery, pe *provider.Error) {
	if c.noUndeliverable {
		return
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	err := c.ledger.MarkUndeliverable(ctx, ledger.Undeliverable{Tenant: dl.row.Tenant, Channel: dl.row.Channel,
		Address: dl.request.Recipient, Provider: pe.Provider, Code: pe.Code, Reason: pe.Error(), NotificationID: dl.row.ID})
	if err != nil {
		dl.log.Warn().Err(err).Msg("could not mark the recipient undeliverable; the row is settled failed all the same")
	}
}
