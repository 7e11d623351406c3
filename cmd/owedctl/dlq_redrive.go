package main

import (
	"context"
	"fmt"

	"github.com/owedhq/owed/internal/envelope"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/queue"
)

// redriveResult is what `owedctl dlq redrive` did.
type redriveResult struct {
	// Redriven counts the dead letters whose rows the ledger reopened; those
	// dead letters are removed, since the next sweep publishes afresh.
	Redriven int               `json:"redriven"`
	Rows     []ledger.Redriven `json:"rows,omitempty"`
	// Kept are the dead letters left where they are, with the reason.
	Kept []keptDeadLetter `json:"kept,omitempty"`
}

type keptDeadLetter struct {
	DeadLetter string `json:"dead_letter"`
	Reason     string `json:"reason"`
}

// redriveDeadLetters is the operator's redrive: a ledger transition, not a
// queue move. Each dead letter's envelope names its row; the ledger reopens
// the rows that failed (and only those), giving each a new queue generation,
// and the dead letters of reopened rows are deleted because the next sweep
// publishes fresh messages for them. Moving the old message back instead
// would be refused by the worker (the row is still failed until reopened),
// and a dead letter whose row is not failed is kept for the operator to look
// at.
func redriveDeadLetters(ctx context.Context, q queue.Queue, l *ledger.Ledger, list []queue.DeadLetter) (redriveResult, error) {
	var res redriveResult
	byRow := map[int64][]string{}
	var rows []int64
	for _, d := range list {
		env, err := envelope.Decode(d.Body)
		if err != nil {
			res.Kept = append(res.Kept, keptDeadLetter{d.ID, fmt.Sprintf("not an owed message (%v); inspect it with dlq show, remove it with dlq delete", err)})
			continue
		}
		if _, seen := byRow[env.ID]; !seen {
			rows = append(rows, env.ID)
		}
		byRow[env.ID] = append(byRow[env.ID], d.ID)
	}
	if len(rows) == 0 {
		return res, nil
	}
	answers, err := l.RedriveAny(ctx, rows...)
	if err != nil {
		return res, fmt.Errorf("reopen the rows: %w", err)
	}
	res.Rows = answers
	var drop []string
	for _, a := range answers {
		if !a.Reopened {
			for _, id := range byRow[a.ID] {
				res.Kept = append(res.Kept, keptDeadLetter{id, fmt.Sprintf("row %d: %s", a.ID, a.Reason)})
			}
			continue
		}
		drop = append(drop, byRow[a.ID]...)
	}
	if len(drop) > 0 {
		// A dead letter that outlives this call (the delete failed) is
		// harmless: if it is ever moved back, the ledger's claim still
		// decides, so of it and the sweep's fresh message one sends.
		if _, err := q.DeleteDeadLetters(ctx, drop...); err != nil {
			return res, fmt.Errorf("rows reopened, but removing their dead letters failed (remove them with dlq delete): %w", err)
		}
	}
	res.Redriven = len(drop)
	return res, nil
}
