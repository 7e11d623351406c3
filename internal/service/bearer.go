package service

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Bearer is a shared secret that requests present as
// "Authorization: Bearer <secret>". It keeps only the secret's SHA-256, and
// compares digests in constant time, so neither the secret's bytes nor its
// length can be learned by timing. The zero Bearer matches nothing. A server
// builds its Bearer once, at construction, and keeps it.
type Bearer struct {
	sum [sha256.Size]byte
	set bool
}

// NewBearer returns the check for secret; an empty secret matches nothing.
func NewBearer(secret string) Bearer {
	if secret == "" {
		return Bearer{}
	}
	return Bearer{sum: sha256.Sum256([]byte(secret)), set: true}
}

// Matches reports whether token is the secret.
func (b Bearer) Matches(token string) bool {
	if !b.set {
		return false
	}
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], b.sum[:]) == 1
}

// Authorized reports whether r carries the secret as its bearer token.
func (b Bearer) Authorized(r *http.Request) bool {
	token, ok := BearerToken(r)
	return ok && b.Matches(token)
}

// BearerToken returns the token of r's "Authorization: Bearer <token>"
// header (the scheme is case-insensitive, surrounding blanks are ignored),
// and false when there is none.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}
