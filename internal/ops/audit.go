package ops

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
)

// Record writes an operator action's audit line: one log line with the
// operator, the action, the ids or filter it named, the count and the
// reason, and the same in owed_operator_audit. The log line is written
// first, so a database that refuses the row still leaves the record; the
// error is then the caller's to show.
func Record(ctx context.Context, l ledger.HasActions, log zerolog.Logger, a ledger.OperatorAction) error {
	Log(log, a)
	if _, err := l.ActionsRole().RecordOperatorAction(ctx, a); err != nil {
		log.Error().Err(err).Str("operator", a.Operator).Str("action", a.Action).Msg("operator action: the audit row was not written")
		return err
	}
	return nil
}

// Log writes an operator action's log line alone, for an action whose
// audit row the write itself recorded (a hold, a pause, a redrive).
func Log(log zerolog.Logger, a ledger.OperatorAction) {
	log.Info().Str("operator", a.Operator).Str("action", a.Action).Str("target", a.Target).Int("count", a.Count).
		Str("reason", a.Reason).Msg("operator action")
}
