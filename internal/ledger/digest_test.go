package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/tenant"
)

func setDigest(t *testing.T, b *bundle, tenantID string, d Digest) DigestResult {
	t.Helper()
	res, err := b.l.SetDigest(ctx, tenantID, d)
	if err != nil {
		t.Fatalf("set digest %+v: %v", d, err)
	}
	return res
}

// Rows of a digestible kind to one recipient and channel due within one
// window share a digest: each is due at the window's close, keeps the time
// it asked for, and names the digest (its first member's id). A row due
// after the window opens a digest of its own; another recipient, channel or
// kind never joins; a replay finds its row by the time it asked for.
func TestDigestGathersOneWindow(t *testing.T) {
	b := setup(t)
	setDigest(t, b, "acme", Digest{Kind: "follow_up", Window: 10 * time.Minute})
	at := b.now.Add(time.Hour)
	var rows []NewNotification
	for i := range 10 {
		rows = append(rows, row("agent", "T-"+string(rune('a'+i)), at.Add(time.Duration(i)*30*time.Second)))
	}
	late := row("agent", "T-late", at.Add(10*time.Minute))
	other := row("agent", "T-x", at)
	other.Kind = "reminder"
	elsewhere := row("other-agent", "T-y", at)
	out := mustSchedule(t, b, "acme", append(rows, late, other, elsewhere)...)

	closes := at.Add(10 * time.Minute)
	lead := out[0].ID
	for i := range 10 {
		d := mustGet(t, b, out[i].ID)
		asked := at.Add(time.Duration(i) * 30 * time.Second)
		if d.DigestID != lead || !d.DueAt.Equal(closes) || d.DigestFrom == nil || !d.DigestFrom.Equal(asked) {
			t.Errorf("member %d: digest %d due %s asked %v; want digest %d due at %s, asked %s",
				i, d.DigestID, d.DueAt, d.DigestFrom, lead, closes, asked)
		}
	}
	if d := mustGet(t, b, out[10].ID); d.DigestID != out[10].ID || !d.DueAt.Equal(at.Add(20*time.Minute)) {
		t.Errorf("a row due as the window closes: digest %d due %s; want a digest of its own, due a window later",
			d.DigestID, d.DueAt)
	}
	if d := mustGet(t, b, out[11].ID); d.DigestID != 0 || !d.DueAt.Equal(at) {
		t.Errorf("a row of a kind not digested: digest %d due %s, want none, due as asked", d.DigestID, d.DueAt)
	}
	if d := mustGet(t, b, out[12].ID); d.DigestID != out[12].ID {
		t.Errorf("another recipient's row: digest %d, want its own", d.DigestID)
	}
	again := mustSchedule(t, b, "acme", rows[3])
	if again[0].Created || again[0].ID != out[3].ID {
		t.Errorf("replay of a member: %+v, want its row %d", again[0], out[3].ID)
	}
	// A new member after the others: it joins the digest still open.
	more := mustSchedule(t, b, "acme", row("agent", "T-z", at.Add(9*time.Minute)))
	if d := mustGet(t, b, more[0].ID); d.DigestID != lead || !d.DueAt.Equal(closes) {
		t.Errorf("a member scheduled later: digest %d due %s; want %d at %s", d.DigestID, d.DueAt, lead, closes)
	}
}

// No member is made late past its expiry: a member whose expiry falls
// before the window closes brings the digest forward to the latest due
// time its members asked for, and a row whose expiry falls inside its own
// window opens no digest and keeps its due time.
func TestDigestNeverHoldsAMemberPastItsExpiry(t *testing.T) {
	b := setup(t)
	setDigest(t, b, "acme", Digest{Kind: "follow_up", Window: 10 * time.Minute})
	at := b.now.Add(time.Hour)
	first := mustSchedule(t, b, "acme", row("agent", "T-1", at))
	short := row("agent", "T-2", at.Add(2*time.Minute))
	exp := at.Add(5 * time.Minute)
	short.ExpiresAt = &exp
	second := mustSchedule(t, b, "acme", short)
	for _, id := range []int64{first[0].ID, second[0].ID} {
		if d := mustGet(t, b, id); d.DigestID != first[0].ID || !d.DueAt.Equal(at.Add(2*time.Minute)) {
			t.Errorf("row %d: digest %d due %s; want digest %d brought forward to %s", id, d.DigestID, d.DueAt,
				first[0].ID, at.Add(2*time.Minute))
		}
	}
	alone := row("agent2", "T-3", at)
	exp2 := at.Add(time.Minute)
	alone.ExpiresAt = &exp2
	out := mustSchedule(t, b, "acme", alone)
	if d := mustGet(t, b, out[0].ID); d.DigestID != 0 || !d.DueAt.Equal(at) {
		t.Errorf("a row expiring inside its own window: digest %d due %s; want none, due at %s", d.DigestID, d.DueAt, at)
	}
}

// Turning digesting off takes the pending members back to the due time
// each asked for; a reschedule takes a member out of its digest.
func TestDigestOffAndRescheduleLeaveTheDigest(t *testing.T) {
	b := setup(t)
	setDigest(t, b, "acme", Digest{Kind: "follow_up", Window: 10 * time.Minute})
	at := b.now.Add(time.Hour)
	out := mustSchedule(t, b, "acme", row("agent", "T-1", at), row("agent", "T-2", at.Add(time.Minute)))
	if _, err := b.l.Reschedule(ctx, "acme", "follow_up", "T-2", at.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d := mustGet(t, b, out[1].ID); d.DigestID != 0 || !d.DueAt.Equal(at.Add(2*time.Hour)) {
		t.Errorf("rescheduled member: digest %d due %s; want out of its digest, due at the new time", d.DigestID, d.DueAt)
	}
	if res := setDigest(t, b, "acme", Digest{Kind: "follow_up"}); res.Undigested != 1 {
		t.Errorf("turning digests off undigested %d rows, want 1", res.Undigested)
	}
	if d := mustGet(t, b, out[0].ID); d.DigestID != 0 || !d.DueAt.Equal(at) || d.DigestFrom != nil {
		t.Errorf("after digests off: digest %d due %s; want none, due at %s again", d.DigestID, d.DueAt, at)
	}
	if ds, err := b.l.Digests(ctx, "acme"); err != nil || len(ds) != 0 {
		t.Errorf("digests after turning off: %+v %v, want none", ds, err)
	}
}

// One tenant's digest settings never touch another's rows, and the
// deployment's application role reads only its scope's settings: the
// table is FORCE ROW LEVEL SECURITY like the ledger.
func TestDigestSettingsAreTheTenantsOwn(t *testing.T) {
	b := setup(t)
	setDigest(t, b, "globex", Digest{Kind: "follow_up", Window: 10 * time.Minute})
	at := b.now.Add(time.Hour)
	out := mustSchedule(t, b, "acme", row("agent", "T-1", at), row("agent", "T-2", at.Add(time.Minute)))
	for _, s := range out {
		if d := mustGet(t, b, s.ID); d.DigestID != 0 || d.DigestFrom != nil {
			t.Errorf("acme's row %d under globex's digest: digest %d, want none", s.ID, d.DigestID)
		}
	}
	if ds, err := b.l.Digests(ctx, "acme"); err != nil || len(ds) != 0 {
		t.Errorf("acme's digests: %+v %v, want none (globex's are not acme's)", ds, err)
	}
	tx, err := b.db.App.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tenant.Enter(ctx, tx, "acme"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM owed_digests`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the application role in acme's scope reads %d digest settings, want 0", n)
	}
	if _, err := tx.Exec(`INSERT INTO owed_digests (tenant_id, kind, window_s) VALUES ('globex', 'x', 60)`); err == nil {
		t.Error("the application role in acme's scope wrote a setting of globex")
	}
}

// A window must be whole seconds up to a day; zero turns digesting off.
func TestValidateDigestNamesTheField(t *testing.T) {
	for _, c := range []struct {
		d    Digest
		want string
	}{
		{Digest{Kind: "", Window: time.Minute}, "kind: required"},
		{Digest{Kind: "k", Window: 25 * time.Hour}, "window: 25h0m0s is outside"},
		{Digest{Kind: "k", Window: 1500 * time.Millisecond}, "not a whole number of seconds"},
	} {
		err := ValidateDigest("acme", c.d)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidateDigest(%+v) = %v, want %q", c.d, err, c.want)
		}
	}
	if err := ValidateDigest("acme", Digest{Kind: "k"}); err != nil {
		t.Errorf("a zero window (off) refused: %v", err)
	}
}

// Quiet hours hold a digest's send time as they hold a row's due time: a
// window that closes after the send window does is sent at the next
// opening, every member together.
func TestDigestSendTimeIsHeldForQuietHours(t *testing.T) {
	b := setup(t)
	setQuiet(t, b, weekdays)
	setDigest(t, b, "acme", Digest{Kind: "follow_up", Window: 10 * time.Minute})
	monday := time.Date(2026, 3, 2, 19, 55, 0, 0, time.UTC)
	out := mustSchedule(t, b, "acme", row("agent", "T-1", monday), row("agent", "T-2", monday.Add(3*time.Minute)))
	tuesday := time.Date(2026, 3, 3, 8, 0, 0, 0, time.UTC)
	for _, s := range out {
		if d := mustGet(t, b, s.ID); d.DigestID != out[0].ID || !d.DueAt.Equal(tuesday) {
			t.Errorf("member %d: digest %d due %s; want digest %d held to Tuesday 08:00", s.ID, d.DigestID, d.DueAt, out[0].ID)
		}
	}
}
