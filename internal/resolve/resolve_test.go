package resolve

import (
	"context"
	"errors"
	"testing"

	"github.com/owedhq/owed/internal/testdb"
)

func TestResolveIsTenantScoped(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	tx, err := d.Owner.Begin()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := tx.Exec(`INSERT INTO owed_contacts (tenant_id, recipient, channel, address, opted_out) VALUES
	    ('a', 'user-1', 'sms', '+15550001', false),
	    ('a', 'user-2', 'sms', '+15550002', true),
	    ('b', 'user-3', 'sms', '+15550003', false)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := NewSQL(d.App)
	if addr, skip, err := r.Resolve(ctx, "a", "user-1", "sms"); err != nil || skip || addr != "+15550001" {
		t.Errorf("user-1: %q skip=%v err=%v", addr, skip, err)
	}
	if _, skip, err := r.Resolve(ctx, "a", "user-2", "sms"); err != nil || !skip {
		t.Errorf("opted-out user-2: skip=%v err=%v, want skip", skip, err)
	}
	// Tenant a cannot resolve tenant b's contact.
	if _, _, err := r.Resolve(ctx, "a", "user-3", "sms"); !errors.Is(err, ErrNoContact) {
		t.Errorf("cross-tenant resolve: %v, want ErrNoContact", err)
	}
}
