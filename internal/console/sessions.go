package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

// Sessions live on the server: the cookie names a session and carries a MAC
// of its id, and only a session the store holds, unexpired and not revoked,
// lets the cookie in. Logging out revokes the session, so a copy of the
// cookie taken before is refused from then on; an operator can list the
// sessions and revoke any of them (the sessions page).
//
// The store is an interface so that sessions can move into a table shared by
// every sweeper replica (owed_console_sessions, docs/console.md) without
// changing the console. Until then the store is the process's own
// (MemorySessions): a session is known only to the replica it logged in on,
// and a restart ends every session. That fails closed: an unknown session is
// refused, never trusted on its MAC alone, so a revoked cookie cannot come
// back to life on another replica or after a restart.

// Session is one login.
type Session struct {
	// ID names the session in its cookie and on the sessions page. It is
	// not enough to forge the cookie, which also carries a MAC keyed on the
	// operator token.
	ID       string
	Operator string
	// Source is the address the login came from.
	Source    string
	Created   time.Time
	Expires   time.Time
	RevokedAt time.Time
}

// Active says whether s still lets its cookie in at now.
func (s Session) Active(now time.Time) bool { return s.RevokedAt.IsZero() && now.Before(s.Expires) }

// Short is the start of the id, enough to tell sessions apart on a page or
// in a log line.
func (s Session) Short() string { return s.ID[:min(len(s.ID), 8)] }

// SessionStore keeps the console's sessions.
type SessionStore interface {
	// Create records a new session.
	Create(ctx context.Context, s Session) error
	// Get returns the session id names; ok is false when there is none.
	Get(ctx context.Context, id string) (s Session, ok bool, err error)
	// Revoke ends the session id names at at; revoked is false when there
	// is no active session by that id.
	Revoke(ctx context.Context, id string, at time.Time) (revoked bool, err error)
	// List returns the sessions active at now, newest first.
	List(ctx context.Context, now time.Time) ([]Session, error)
}

// MaxSessions bounds MemorySessions: a login beyond it forgets the oldest
// session (which then has to log in again).
const MaxSessions = 1000

// MemorySessions is the process's own SessionStore.
type MemorySessions struct {
	mu   sync.Mutex
	byID map[string]Session
}

var _ SessionStore = (*MemorySessions)(nil)

// NewMemorySessions returns an empty store.
func NewMemorySessions() *MemorySessions { return &MemorySessions{byID: map[string]Session{}} }

// Create records s, first forgetting the sessions that no longer let anyone
// in and, at MaxSessions, the oldest.
func (m *MemorySessions) Create(_ context.Context, s Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, old := range m.byID {
		if !old.Active(s.Created) {
			delete(m.byID, id)
		}
	}
	for len(m.byID) >= MaxSessions {
		var oldest Session
		for _, old := range m.byID {
			if oldest.ID == "" || old.Created.Before(oldest.Created) {
				oldest = old
			}
		}
		delete(m.byID, oldest.ID)
	}
	m.byID[s.ID] = s
	return nil
}

// Get returns the session id names.
func (m *MemorySessions) Get(_ context.Context, id string) (Session, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[id]
	return s, ok, nil
}

// Revoke ends the session id names.
func (m *MemorySessions) Revoke(_ context.Context, id string, at time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[id]
	if !ok || !s.Active(at) {
		return false, nil
	}
	s.RevokedAt = at
	m.byID[id] = s
	return true, nil
}

// List returns the sessions active at now, newest first.
func (m *MemorySessions) List(_ context.Context, now time.Time) ([]Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Session
	for _, s := range m.byID {
		if s.Active(now) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Session) int { return cmp.Or(b.Created.Compare(a.Created), strings.Compare(a.ID, b.ID)) })
	return out, nil
}

// newSessionID is 128 random bits, URL-safe.
func newSessionID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

type sessionsData struct {
	Sessions []Session
	// Current is the id of the session the page was asked with, if any.
	Current string
	Result  string
	Audit   string
}

func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, op operator) {
	c.showSessions(w, r, op, http.StatusOK, sessionsData{}, "")
}

func (c *Console) showSessions(w http.ResponseWriter, r *http.Request, op operator, status int, d sessionsData, errText string) {
	list, err := c.auth.sessions.List(r.Context(), c.o.Clock.Now())
	if err != nil {
		errText = strings.TrimPrefix(errText+"; ", "; ") + "the sessions cannot be read: " + err.Error()
	}
	d.Sessions, d.Current = list, op.Session
	c.show(w, op, status, "sessions", "Sessions", d, errText)
}

// revokeSession ends one session, the operator's own or another's, and
// writes an audit line. It asks for no confirmation: revoking costs the
// session's operator a login, nothing more.
func (c *Console) revokeSession(w http.ResponseWriter, r *http.Request, op operator) {
	ctx := r.Context()
	id := r.PostFormValue("id")
	s, ok, err := c.auth.sessions.Get(ctx, id)
	switch {
	case err != nil:
		c.showSessions(w, r, op, http.StatusServiceUnavailable, sessionsData{}, "the sessions cannot be read: "+err.Error())
		return
	case !ok || !s.Active(c.o.Clock.Now()):
		c.showSessions(w, r, op, http.StatusNotFound, sessionsData{}, "no active session by that id (it may have ended already)")
		return
	}
	if _, err := c.auth.sessions.Revoke(ctx, id, c.o.Clock.Now()); err != nil {
		c.showSessions(w, r, op, http.StatusServiceUnavailable, sessionsData{}, "the session was not revoked: "+err.Error())
		return
	}
	d := sessionsData{Result: "Revoked " + s.Operator + "'s session " + s.Short() + " (from " + s.Source + ")."}
	if err := ops.Record(ctx, c.o.Ledger, c.o.Log, ledger.OperatorAction{Operator: op.Name, Action: "session_revoke",
		Target: "operator=" + s.Operator + " session=" + s.Short(), Count: 1}); err != nil {
		d.Audit = "the audit row was not written (the log line was): " + err.Error()
	}
	if id == op.Session {
		clearSession(w, r)
		http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
		return
	}
	c.showSessions(w, r, op, http.StatusOK, d, "")
}
