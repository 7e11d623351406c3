package ledger

import "context"

// SetAside settles a row the sweep leased and cannot publish (its message
// cannot be encoded: a tenant id the services refuse, written straight
// into the table) as failed with reason, so it no longer stops every run
// and the reason is on the row for the operator. It reports whether the row
// was still leased.
func (l *Sweep) SetAside(ctx context.Context, id int64, reason string) (bool, error) {
	n, err := l.execAllTenants(ctx, qSetAside, id, l.now(), reason)
	return n == 1, err
}

var qSetAside = queries.Get("SetAside")
