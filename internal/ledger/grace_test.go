package ledger

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/tenant"
)

func TestParseGraceAndOverrides(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Grace{"24h": {D: 24 * time.Hour}, "none": {None: true}, " 10m ": {D: 10 * time.Minute}} {
		if g, err := ParseGrace(in); err != nil || g != want {
			t.Errorf("ParseGrace(%q) = %+v, %v; want %+v", in, g, err, want)
		}
	}
	for _, in := range []string{"", "0s", "-1h", "500ms", "forever"} {
		if _, err := ParseGrace(in); err == nil {
			t.Errorf("ParseGrace(%q) accepted it", in)
		}
	}
	o, err := ParseGraceOverrides("kind:meeting_nudge=10m, channel:sms=2h,kind:digest=none")
	if err != nil || o.String() != "kind:meeting_nudge=10m0s,channel:sms=2h0m0s,kind:digest=none" {
		t.Errorf("overrides: %v (err %v)", o, err)
	}
	for in, says := range map[string]string{
		"kind:x":              "has no grace",
		"meeting=10m":         "kind:<kind> or channel:<channel>",
		"kind:=10m":           "names no kind",
		"channel:pager=1h":    "the channel is one of",
		"kind:x=1h,kind:x=2h": "given twice",
		"kind:x=soon":         "kind:x",
	} {
		if _, err := ParseGraceOverrides(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseGraceOverrides(%q): %v, want an error saying %q", in, err, says)
		}
	}
}

// The default grace is the database's rule, so every writer gets it: rows
// the API schedules and rows an application inserts with SQL alike expire
// their grace after their due time, a kind's override winning over a
// channel's and a channel's over the default, none keeping a row
// unexpiring; a row already past its grace is stored expired with the
// reason; a row that names its expiry keeps it.
func TestTheDefaultGraceIsAppliedToEveryWriter(t *testing.T) {
	b := setup(t)
	o, err := ParseGraceOverrides("kind:meeting_nudge=10m,channel:email=2h,kind:digest=none")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.l.SetDefaultGrace(ctx, Grace{D: 24 * time.Hour}, o); err != nil {
		t.Fatal(err)
	}
	own := b.now.Add(time.Minute)
	rows := []NewNotification{
		row("a", "T-default", b.now),
		{Recipient: "a@example.com", Channel: "email", Kind: "follow_up", RefID: "T-channel", DueAt: b.now,
			Payload: []byte(`{"subject":"s","text":"t"}`)},
		{Recipient: "a@example.com", Channel: "email", Kind: "meeting_nudge", RefID: "T-kind", DueAt: b.now,
			Payload: []byte(`{"subject":"s","text":"t"}`)},
		{Recipient: "a", Channel: "sms", Kind: "digest", RefID: "T-none", DueAt: b.now, Payload: textPayload("x")},
		row("a", "T-late", b.now.Add(-25*time.Hour)),
		row("a", "T-own", b.now),
	}
	rows[5].ExpiresAt = &own
	out := mustSchedule(t, b, "acme", rows...)
	want := []*time.Time{ptr(b.now.Add(24 * time.Hour)), ptr(b.now.Add(2 * time.Hour)), ptr(b.now.Add(10 * time.Minute)),
		nil, ptr(b.now.Add(-time.Hour)), &own}
	for i, s := range out {
		d := mustGet(t, b, s.ID)
		if (d.ExpiresAt == nil) != (want[i] == nil) || (d.ExpiresAt != nil && !d.ExpiresAt.Equal(*want[i])) {
			t.Errorf("%s: expires %v, want %v", rows[i].RefID, d.ExpiresAt, want[i])
		}
	}
	if s := out[4]; s.State != StateExpired {
		t.Errorf("the row past its grace was answered %s, want expired", s.State)
	}
	if d := mustGet(t, b, out[4].ID); d.State != StateExpired || !strings.Contains(d.LastError, "OWED_DEFAULT_GRACE") {
		t.Errorf("the row past its grace: %s %q, want expired with the reason", d.State, d.LastError)
	}

	// An application's own SQL gets the same rule.
	var exp sql.NullTime
	if err := tenant.InTx(ctx, b.db.App, "acme", func(tx *sql.Tx) error {
		return tx.QueryRow(`INSERT INTO owed_notifications (tenant_id, recipient, channel, kind, ref_id, due_at, payload)
			VALUES ('acme', 'b', 'sms', 'follow_up', 'T-sql', $1, '{"text":"x"}') RETURNING expires_at`, b.now).Scan(&exp)
	}); err != nil {
		t.Fatal(err)
	}
	if !exp.Valid || !exp.Time.Equal(b.now.Add(24*time.Hour)) {
		t.Errorf("a row an application inserted expires %v, want %s", exp, b.now.Add(24*time.Hour))
	}

	// A row due at the last instant the ledger holds has no room for an
	// expiry and keeps none; one just before gets the last instant.
	last := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	far := mustSchedule(t, b, "acme", row("a", "T-last", last), row("a", "T-almost", last.Add(-time.Hour)))
	if d := mustGet(t, b, far[0].ID); d.ExpiresAt != nil {
		t.Errorf("the row due at the last instant expires %v, want none", d.ExpiresAt)
	}
	if d := mustGet(t, b, far[1].ID); d.ExpiresAt == nil || !d.ExpiresAt.Equal(last) {
		t.Errorf("the row due an hour before it expires %v, want %s", d.ExpiresAt, last)
	}

	// none, stored later, turns it off again.
	if err := b.l.SetDefaultGrace(ctx, Grace{None: true}, nil); err != nil {
		t.Fatal(err)
	}
	if d := mustGet(t, b, mustSchedule(t, b, "acme", row("a", "T-after", b.now))[0].ID); d.ExpiresAt != nil {
		t.Errorf("with the grace none a row expires %v, want never", d.ExpiresAt)
	}
}

func ptr(t time.Time) *time.Time { return &t }
