package session_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/session"
	"github.com/owedhq/owed/internal/testdb"
)

var ctx = context.Background()

func newID(t *testing.T) string {
	t.Helper()
	id, err := session.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A session lets its cookie in until it expires or is revoked; logout
// (Revoke) ends it at once, a second revoke changes nothing, and the list
// shows the active sessions newest first by handle, never by id.
func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := session.NewStore(db.Operator)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	alice, bob := newID(t), newID(t)
	if _, err := s.Create(ctx, alice, "alice", "10.0.0.7", now, now.Add(12*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, bob, "bob", "10.0.0.8", now.Add(time.Minute), now.Add(12*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Check(ctx, alice, now.Add(time.Hour))
	if err != nil || !ok || got.Operator != "alice" || got.Source != "10.0.0.7" || got.Handle != session.Handle(alice) ||
		!got.Expires.Equal(now.Add(12*time.Hour)) {
		t.Fatalf("Check = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := s.Check(ctx, alice, now.Add(12*time.Hour)); err != nil || ok {
		t.Fatalf("Check at the expiry = %v, %v; want refused", ok, err)
	}
	if _, ok, err := s.Check(ctx, newID(t), now); err != nil || ok {
		t.Fatalf("Check of an id no session had = %v, %v", ok, err)
	}
	list, err := s.List(ctx, now.Add(time.Hour))
	if err != nil || len(list) != 2 || list[0].Operator != "bob" || list[1].Handle != session.Handle(alice) {
		t.Fatalf("List = %+v, %v; want bob's then alice's", list, err)
	}
	for _, x := range list {
		if x.Handle == alice || x.Handle == bob {
			t.Fatalf("List shows a session's id: %+v", x)
		}
	}

	if revoked, err := s.Revoke(ctx, session.Handle(alice), now.Add(2*time.Hour)); err != nil || !revoked {
		t.Fatalf("Revoke = %v, %v", revoked, err)
	}
	if _, ok, err := s.Check(ctx, alice, now.Add(2*time.Hour)); err != nil || ok {
		t.Fatalf("Check after logout = %v, %v; want refused", ok, err)
	}
	if revoked, err := s.Revoke(ctx, session.Handle(alice), now.Add(3*time.Hour)); err != nil || revoked {
		t.Fatalf("second Revoke = %v, %v; want nothing to revoke", revoked, err)
	}
	if _, err := s.Revoke(ctx, alice, now); err == nil || !strings.Contains(err.Error(), "handle") {
		t.Fatalf("Revoke by the id itself = %v, want an error naming the handle", err)
	}
	if list, err := s.List(ctx, now.Add(2*time.Hour)); err != nil || len(list) != 1 || list[0].Operator != "bob" {
		t.Fatalf("List after logout = %+v, %v", list, err)
	}
}

// Every session of one operator ends at once, and only theirs.
func TestRevokeOperator(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := session.NewStore(db.Operator)
	now := time.Now()
	ids := map[string]string{newID(t): "alice", newID(t): "alice", newID(t): "bob"}
	for id, op := range ids {
		if _, err := s.Create(ctx, id, op, "", now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.RevokeOperator(ctx, "alice", now); err != nil || n != 2 {
		t.Fatalf("RevokeOperator = %d, %v; want 2", n, err)
	}
	for id, op := range ids {
		if _, ok, err := s.Check(ctx, id, now); err != nil || ok != (op == "bob") {
			t.Errorf("%s's session after revoking alice's: active %v (err %v)", op, ok, err)
		}
	}
}

// The table holds the SHA-256 of an id, never the id; a new session
// forgets the ones that ended a week before; and nobody but on-call's
// role may touch it: the services' role is refused every function and the
// table.
func TestSessionsAreHashedAndOperatorsOnly(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := session.NewStore(db.Operator)
	old, id := newID(t), newID(t)
	now := time.Now()
	if _, err := s.Create(ctx, old, "alice", "", now.Add(-10*24*time.Hour), now.Add(-9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, id, "alice", "", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var n int
	var stored []byte
	if err := db.Owner.QueryRow(`SELECT count(*), (array_agg(id_hash))[1] FROM owed_console_sessions`).Scan(&n, &stored); err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256([]byte(id)); n != 1 || string(stored) != string(sum[:]) {
		t.Fatalf("the table holds %d sessions, the first %x; want the new one's hash %x alone", n, stored, sum)
	}
	var dump string
	if err := db.Owner.QueryRow(`SELECT string_agg(t::text, ' ') FROM owed_console_sessions t`).Scan(&dump); err != nil ||
		strings.Contains(dump, id) {
		t.Fatalf("the table's rows carry the id (err %v): %s", err, dump)
	}

	runtime := session.NewStore(db.App)
	_, err1 := runtime.Create(ctx, newID(t), "mallory", "", now, now.Add(time.Hour))
	_, _, err2 := runtime.Check(ctx, id, now)
	_, err3 := runtime.List(ctx, now)
	_, err4 := runtime.Revoke(ctx, session.Handle(id), now)
	_, err5 := runtime.RevokeOperator(ctx, "alice", now)
	_, err6 := db.App.Exec(`SELECT count(*) FROM owed_console_sessions`)
	for i, err := range []error{err1, err2, err3, err4, err5, err6} {
		var pqErr *pq.Error
		if !errors.As(err, &pqErr) || pqErr.Code != "42501" {
			t.Errorf("the services' role, call %d: %v, want permission denied", i+1, err)
		}
	}
}
