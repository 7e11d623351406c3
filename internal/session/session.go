// Package session keeps the console's sessions on the server, in
// owed_console_sessions (internal/session/sql/sessions.sql), so every
// sweeper replica knows the same sessions, logout revokes a session
// everywhere at once, and a restart forgets none.
//
// A session is named by an id of IDBytes random bytes, which the cookie
// carries; the table stores only its SHA-256 (Handle), so the table, a
// backup of it or the sessions page gives nobody a cookie. The handle names
// a session wherever its id must not be shown: the sessions page, the
// revoke form, an audit line.
//
// The store runs as on-call's login (owed_operator, the console's
// OWED_OPERATOR_DATABASE_URL): the runtime role has nothing on the table.
// It never decides who may log in; the console does.
package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// IDBytes is the length of a session's id before encoding.
const IDBytes = 32

// Bounds the table checks, in bytes.
const (
	MaxOperator = 256
	MaxSource   = 256
)

const (
	qCreate = `SELECT owed_console_session_create($1, $2, $3, $4, $5)`
	qCheck  = `SELECT operator, source, created_at, expires_at FROM owed_console_session_check($1, $2)`
	qRevoke = `SELECT owed_console_session_revoke($1, $2)`
	// qRevokeOperator ends every active session of operator $1.
	qRevokeOperator = `SELECT owed_console_session_revoke_operator($1, $2)`
	qList           = `SELECT id_hash, operator, source, created_at, expires_at FROM owed_console_session_list($1)`
)

// Session is one login, as the store holds it.
type Session struct {
	// Handle is the hex SHA-256 of the session's id: it names the session
	// on the sessions page and in a revoke, and cannot be turned back into
	// the id.
	Handle   string
	Operator string
	// Source is where the login came from (the client's address).
	Source  string
	Created time.Time
	Expires time.Time
}

// NewID returns a fresh session id: IDBytes from the operating system's
// CSPRNG, URL-safe base64, fit for a cookie.
func NewID() (string, error) {
	b := make([]byte, IDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session: read random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Handle is the handle of the session id names.
func Handle(id string) string { return hex.EncodeToString(hashID(id)) }

// hashOf decodes a handle; a string that is not one is an error naming it.
func hashOf(handle string) ([]byte, error) {
	b, err := hex.DecodeString(handle)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("session: handle %q is not a session's handle (%d hex digits)", handle, 2*sha256.Size)
	}
	return b, nil
}

// hashID is what the table stores of id.
func hashID(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// Store is the sessions over a pool of on-call's login.
type Store struct{ db *sql.DB }

// NewStore returns the sessions over db, a member of owed_operator.
func NewStore(db *sql.DB) *Store { return &Store{db: db} }

// Create records the session id names, for operator logged in from source
// at now, letting its cookie in until expires.
func (s *Store) Create(ctx context.Context, id, operator, source string, now, expires time.Time) (Session, error) {
	var errs []error
	if id == "" {
		errs = append(errs, errors.New("session: an id is required (NewID)"))
	}
	if operator == "" || len(operator) > MaxOperator {
		errs = append(errs, fmt.Errorf("session: operator must be 1 to %d bytes", MaxOperator))
	}
	if len(source) > MaxSource {
		errs = append(errs, fmt.Errorf("session: source must be at most %d bytes (got %d)", MaxSource, len(source)))
	}
	if !expires.After(now) {
		errs = append(errs, fmt.Errorf("session: expiry %s must be after the login at %s", expires, now))
	}
	if err := errors.Join(errs...); err != nil {
		return Session{}, err
	}
	if _, err := s.db.ExecContext(ctx, qCreate, hashID(id), operator, source, now, expires); err != nil {
		return Session{}, fmt.Errorf("session: create: %w", err)
	}
	return Session{Handle: Handle(id), Operator: operator, Source: source, Created: now.UTC(), Expires: expires.UTC()}, nil
}

// Check answers the session a cookie's id names while it lets the cookie
// in at now: not revoked, not expired. ok is false otherwise, and for an id
// no session ever had.
func (s *Store) Check(ctx context.Context, id string, now time.Time) (x Session, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, qCheck, hashID(id), now).Scan(&x.Operator, &x.Source, &x.Created, &x.Expires)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Session{}, false, nil
	case err != nil:
		return Session{}, false, fmt.Errorf("session: check: %w", err)
	}
	x.Handle, x.Created, x.Expires = Handle(id), x.Created.UTC(), x.Expires.UTC()
	return x, true, nil
}

// Revoke ends the session handle names at now (logout passes
// Handle(id)) and reports whether it was active.
func (s *Store) Revoke(ctx context.Context, handle string, now time.Time) (bool, error) {
	h, err := hashOf(handle)
	if err != nil {
		return false, err
	}
	var revoked bool
	if err := s.db.QueryRowContext(ctx, qRevoke, h, now).Scan(&revoked); err != nil {
		return false, fmt.Errorf("session: revoke: %w", err)
	}
	return revoked, nil
}

// RevokeOperator ends every active session of operator at now and reports
// how many there were.
func (s *Store) RevokeOperator(ctx context.Context, operator string, now time.Time) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, qRevokeOperator, operator, now).Scan(&n); err != nil {
		return 0, fmt.Errorf("session: revoke the sessions of %q: %w", operator, err)
	}
	return n, nil
}

// List returns the sessions active at now, newest first.
func (s *Store) List(ctx context.Context, now time.Time) ([]Session, error) {
	rows, err := s.db.QueryContext(ctx, qList, now)
	if err != nil {
		return nil, fmt.Errorf("session: list: %w", err)
	}
	defer rows.Close()
	out := []Session{}
	for rows.Next() {
		var (
			x Session
			h []byte
		)
		if err := rows.Scan(&h, &x.Operator, &x.Source, &x.Created, &x.Expires); err != nil {
			return nil, fmt.Errorf("session: list: %w", err)
		}
		x.Handle, x.Created, x.Expires = hex.EncodeToString(h), x.Created.UTC(), x.Expires.UTC()
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("session: list: %w", err)
	}
	return out, nil
}
