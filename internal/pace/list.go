package pace

import (
	"context"
	"fmt"
)

var qAccounts = queries.Get("Accounts")

// List reads the state of every account with a pace row, by name.
func (a *Accounts) List(ctx context.Context) ([]AccountState, error) {
	rows, err := a.db.QueryContext(ctx, qAccounts)
	if err != nil {
		return nil, fmt.Errorf("pace: list the accounts: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pace: list the accounts: %w", err)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pace: list the accounts: %w", err)
	}
	out := make([]AccountState, 0, len(names))
	for _, n := range names {
		s, err := a.State(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
