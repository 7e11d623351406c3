package ledger

import (
	"testing"
)

// mustClaim claims row id of tenant for a send and returns the claim's
// Hold, failing the test unless the claim took the row.
func mustClaim(t *testing.T, b *bundle, tenant string, id int64, p ClaimParams) Hold {
	t.Helper()
	c, err := b.l.ClaimForSend(ctx, tenant, id, p)
	if err != nil || c.Outcome != ClaimSend {
		t.Fatalf("claim of row %d: %v %v, want send", id, c.Outcome, err)
	}
	return c.Hold
}
