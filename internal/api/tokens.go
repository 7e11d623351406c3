package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
)

// TokenPrefix starts every tenant token. It lets a secret scanner recognise a
// leaked token and lets the API tell a tenant token from the service token
// without a database round trip.
const TokenPrefix = "owed_"

// tokenEntropyBytes is how much CSPRNG output a token carries: 256 bits, which
// is why a plain SHA-256 (not a slow KDF) is enough to store it.
const tokenEntropyBytes = 32

// maxTokenNameLen matches the owed_api_tokens.name column check.
const maxTokenNameLen = 128

// lastUsedResolution is how stale last_used_at may get before a request
// refreshes it: a busy token costs one write a minute, not one per request.
const lastUsedResolution = time.Minute

// ErrInvalidToken is returned for a token that is malformed, unknown or
// revoked. The three are deliberately indistinguishable to the caller.
var ErrInvalidToken = errors.New("api: invalid or revoked token")

// ErrTokenNotFound is returned when revoking a token that does not exist.
var ErrTokenNotFound = errors.New("api: token not found")

// Token describes a stored token. It never carries the plaintext or the hash.
type Token struct {
	ID         int64      `json:"id"`
	Tenant     string     `json:"tenant_id"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// Tokens stores tenant API tokens in the owed_api_tokens table. The table has no
// row-level security (a token is looked up before its tenant is known) and
// holds only SHA-256 hashes; the plaintext exists once, in Create's return
// value.
//
// Two roles use it (internal/api/sql/tokens.sql). The API, as the runtime role,
// only Authenticates: it may not read the table, and resolves a token by its
// hash through owed_token_authenticate and refreshes last_used_at through
// owed_token_touch, SECURITY DEFINER functions that answer the token's id
// and tenant and nothing of any other token. Create, Revoke, RevokeToken
// and List are owedctl tokens', as a member of owed_token_admin, the only
// role that may insert or update tokens.
//
// Create and the revokes write their line of the operators' audit trail
// (owed_operator_audit) in the same transaction as the token, naming the
// operator and reason As gave (the database login when none was).
type Tokens struct {
	db               *sql.DB
	clock            clock.Clock
	operator, reason string
}

// NewTokens returns a token store over db: the runtime role to
// Authenticate, a member of owed_token_admin for everything else.
// Its times come from clk (nil is clock.Real(): the database's clock).
func NewTokens(db *sql.DB, clk clock.Clock) *Tokens {
	if clk == nil {
		clk = clock.Real()
	}
	return &Tokens{db: db, clock: clk}
}

// As returns the store writing its audit lines as operator, with reason:
// owedctl's --operator (or the OS user) and --reason.
func (t *Tokens) As(operator, reason string) *Tokens {
	c := *t
	c.operator, c.reason = operator, reason
	return &c
}

// Every statement's $now is the clock's NowOrNil: the database's clock in
// production, the stubbed instant in tests.
const (
	qTokenCreate = `
INSERT INTO owed_api_tokens (tenant_id, token_hash, name, created_at) VALUES ($1, $2, $3, coalesce($4, now()))
RETURNING id`
	// qTokenAuthenticate finds the live token of hash $1 and also says
	// whether last_used_at is older than the resolution ($3 seconds), so a
	// fresh token costs no write (owed_token_authenticate).
	qTokenAuthenticate = `SELECT id, tenant_id, stale FROM owed_token_authenticate($1, $2, $3)`
	// qTokenTouch records the use, re-checking staleness so concurrent
	// requests write once (owed_token_touch).
	qTokenTouch = `SELECT owed_token_touch($1, $2, $3)`
	// qTokenRevoke keeps the first revocation time when revoked twice.
	qTokenRevokeByID = `
UPDATE owed_api_tokens SET revoked_at = coalesce(revoked_at, $2, now()) WHERE id = $1
RETURNING ` + tokenColumns
	qTokenRevokeByHash = `
UPDATE owed_api_tokens SET revoked_at = coalesce(revoked_at, $2, now()) WHERE token_hash = $1
RETURNING ` + tokenColumns
	qTokenList = `SELECT ` + tokenColumns + ` FROM owed_api_tokens WHERE tenant_id = $1 ORDER BY id`

	tokenColumns = `id, tenant_id, name, created_at, revoked_at, last_used_at`

	// qTokenAudit writes a token change's audit line; without an operator
	// named, the line names the database login (owed_operator_audit_record,
	// internal/ledger/sql/operator.sql).
	qTokenAudit = `SELECT owed_operator_audit_record($1, coalesce(nullif($2, ''), session_user), $3, $4, 1, $5)`
)

// audited runs write and the audit line its answer describes in one
// transaction: neither commits without the other.
func (t *Tokens) audited(ctx context.Context, write func(*sql.Tx) (action, target string, err error)) error {
	if len(t.operator) > ledger.MaxAuditOperator || len(t.reason) > ledger.MaxAuditReason {
		return fmt.Errorf("operator: at most %d bytes, reason: at most %d bytes", ledger.MaxAuditOperator, ledger.MaxAuditReason)
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	action, target, err := write(tx)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, qTokenAudit, t.clock.NowOrNil(), t.operator, action, target, t.reason); err != nil {
		return fmt.Errorf("record the audit line: %w", err)
	}
	return tx.Commit()
}

// hashToken is the stored form of a token.
func hashToken(plaintext string) []byte {
	sum := sha256.Sum256([]byte(plaintext))
	return sum[:]
}

// Create makes a token for tenant and returns its plaintext, which is shown
// to the operator once and never stored.
func (t *Tokens) Create(ctx context.Context, tenant, name string) (string, int64, error) {
	if err := ledger.ValidateTenant(tenant); err != nil {
		return "", 0, err
	}
	if len(name) > maxTokenNameLen {
		return "", 0, fmt.Errorf("name: %d bytes exceeds the limit of %d", len(name), maxTokenNameLen)
	}
	raw := make([]byte, tokenEntropyBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", 0, fmt.Errorf("generate token: %w", err)
	}
	plaintext := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	var id int64
	err := t.audited(ctx, func(tx *sql.Tx) (string, string, error) {
		if err := tx.QueryRowContext(ctx, qTokenCreate, tenant, hashToken(plaintext), name, t.clock.NowOrNil()).
			Scan(&id); err != nil {
			return "", "", fmt.Errorf("store token: %w", err)
		}
		return "token_create", fmt.Sprintf("tenant=%s token=%d name=%q", tenant, id, name), nil
	})
	if err != nil {
		return "", 0, err
	}
	return plaintext, id, nil
}

// Authenticate returns the tenant a live token is bound to, or
// ErrInvalidToken. The database compares hashes, so the plaintext never
// leaves this process and timing reveals nothing about stored tokens.
func (t *Tokens) Authenticate(ctx context.Context, bearer string) (string, error) {
	if !strings.HasPrefix(bearer, TokenPrefix) {
		return "", ErrInvalidToken
	}
	var id int64
	var tenant string
	var stale bool
	now, resolution := t.clock.NowOrNil(), lastUsedResolution.Seconds()
	err := t.db.QueryRowContext(ctx, qTokenAuthenticate, hashToken(bearer), now, resolution).
		Scan(&id, &tenant, &stale)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrInvalidToken
	}
	if err != nil {
		return "", fmt.Errorf("look up token: %w", err)
	}
	if stale {
		// last_used_at is an operator's hint, not an audit log: failing to
		// record it must not fail the request it describes.
		t.db.ExecContext(ctx, qTokenTouch, id, now, resolution)
	}
	return tenant, nil
}

// Revoke revokes the token with id. Revoking a revoked token is a no-op that
// keeps the first revocation time.
func (t *Tokens) Revoke(ctx context.Context, id int64) (Token, error) {
	return t.revoke(ctx, qTokenRevokeByID, id)
}

// RevokeToken revokes the token whose plaintext is given, for an operator who
// holds a leaked token but not its id.
func (t *Tokens) RevokeToken(ctx context.Context, plaintext string) (Token, error) {
	return t.revoke(ctx, qTokenRevokeByHash, hashToken(plaintext))
}

func (t *Tokens) revoke(ctx context.Context, query string, key any) (Token, error) {
	var tok Token
	err := t.audited(ctx, func(tx *sql.Tx) (string, string, error) {
		var err error
		if tok, err = scanToken(tx.QueryRowContext(ctx, query, key, t.clock.NowOrNil())); err != nil {
			return "", "", err
		}
		return "token_revoke", fmt.Sprintf("tenant=%s token=%d", tok.Tenant, tok.ID), nil
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, ErrTokenNotFound
	}
	return tok, err
}

// List returns tenant's tokens, revoked ones included, oldest first.
func (t *Tokens) List(ctx context.Context, tenant string) ([]Token, error) {
	if err := ledger.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	rows, err := t.db.QueryContext(ctx, qTokenList, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Token{}
	for rows.Next() {
		tok, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, tok)
	}
	return out, rows.Err()
}

type rowScanner interface{ Scan(...any) error }

func scanToken(s rowScanner) (Token, error) {
	var tok Token
	var revoked, used sql.NullTime
	if err := s.Scan(&tok.ID, &tok.Tenant, &tok.Name, &tok.CreatedAt, &revoked, &used); err != nil {
		return Token{}, err
	}
	tok.CreatedAt = tok.CreatedAt.UTC()
	if revoked.Valid {
		r := revoked.Time.UTC()
		tok.RevokedAt = &r
	}
	if used.Valid {
		u := used.Time.UTC()
		tok.LastUsedAt = &u
	}
	return tok, nil
}
