package api

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTokensLifecycle(t *testing.T) {
	b := setup(t)
	plain, id, err := b.admin.Create(ctx, "initech", "billing backend")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(plain, TokenPrefix) || len(plain) < len(TokenPrefix)+40 {
		t.Fatalf("token %d has the wrong shape (length %d)", id, len(plain))
	}

	// Only the hash is stored: nothing in the row equals or contains the token.
	var row string
	if err := b.db.Owner.QueryRow(`SELECT t::text FROM owed_api_tokens t WHERE id = $1`, id).Scan(&row); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(row, plain) || strings.Contains(row, strings.TrimPrefix(plain, TokenPrefix)) {
		t.Fatal("the token's plaintext is stored")
	}

	tenant, err := b.tokens.Authenticate(ctx, plain)
	if err != nil || tenant != "initech" {
		t.Fatalf("authenticate: %q, %v; want initech", tenant, err)
	}
	list, err := b.admin.List(ctx, "initech")
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Name != "billing backend" ||
		list[0].LastUsedAt == nil || !list[0].LastUsedAt.Equal(b.clk.Now()) || list[0].RevokedAt != nil {
		t.Fatalf("list %+v (%v), want the token, used now, not revoked", list, err)
	}

	// Use within the resolution does not rewrite last_used_at.
	b.clk.Advance(30 * time.Second)
	if _, err := b.tokens.Authenticate(ctx, plain); err != nil {
		t.Fatal(err)
	}
	list, _ = b.admin.List(ctx, "initech")
	if !list[0].LastUsedAt.Equal(b.clk.Now().Add(-30 * time.Second)) {
		t.Errorf("last_used_at %s rewritten within a minute", list[0].LastUsedAt)
	}

	revoked, err := b.admin.RevokeToken(ctx, plain)
	if err != nil || revoked.ID != id || revoked.RevokedAt == nil {
		t.Fatalf("revoke by token: %+v, %v", revoked, err)
	}
	if _, err := b.tokens.Authenticate(ctx, plain); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("revoked token authenticates: %v", err)
	}
	// Revoking again keeps the first revocation time.
	b.clk.Advance(time.Hour)
	again, err := b.admin.Revoke(ctx, id)
	if err != nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Fatalf("second revoke: %+v, %v; want revoked_at kept at %s", again, err, revoked.RevokedAt)
	}
	if _, err := b.admin.Revoke(ctx, id+1000); !errors.Is(err, ErrTokenNotFound) {
		t.Errorf("revoke unknown id: %v, want ErrTokenNotFound", err)
	}
	if _, _, err := b.admin.Create(ctx, "", "x"); err == nil || !strings.Contains(err.Error(), "tenant_id") {
		t.Errorf("create without tenant: %v, want an error naming tenant_id", err)
	}
}

// TestTokensOnTheDatabaseClock runs the production path, where every
// statement's $now is NULL and the database's clock decides.
func TestTokensOnTheDatabaseClock(t *testing.T) {
	b := setup(t)
	tokens, admin := NewTokens(b.db.App, nil), NewTokens(b.db.Admin, nil)
	plain, id, err := admin.Create(ctx, "initech", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokens.Authenticate(ctx, plain); err != nil {
		t.Fatal(err)
	}
	list, err := admin.List(ctx, "initech")
	if err != nil || len(list) != 1 || list[0].LastUsedAt == nil || list[0].LastUsedAt.Before(list[0].CreatedAt) {
		t.Fatalf("list %+v (%v), want the token used at or after its creation", list, err)
	}
	revoked, err := admin.Revoke(ctx, id)
	if err != nil || revoked.RevokedAt == nil || revoked.RevokedAt.Before(list[0].CreatedAt) {
		t.Fatalf("revoke: %+v, %v; want revoked at or after its creation", revoked, err)
	}
}
