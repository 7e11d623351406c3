package materialise

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/tenant"
	"github.com/owedhq/owed/internal/testdb"
)

var ctx = context.Background()

// bundle is one test's materialiser and ledger, sharing a stubbed clock
// that reads now.
type bundle struct {
	db     *testdb.DB
	ledger *ledger.Ledger
	m      *Materialiser
	clk    *clock.Stub
	now    time.Time
}

var config = Config{Lookahead: DefaultLookahead, DefaultLead: DefaultLead}

// advance moves the clock, and now, by d.
func (b *bundle) advance(d time.Duration) { b.now = b.clk.Advance(d) }

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	b := &bundle{db: testdb.New(t), now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	b.clk = clock.NewStub(b.now)
	b.ledger = ledger.New(b.db.App, b.clk)
	b.m = New(NewSQLSource(b.db.App), b.ledger, config, b.clk)
	return b
}

// addItem inserts an item the way an application does: as the application
// role, in its own tenant's scope.
func addItem(t *testing.T, db *sql.DB, tenantID, recipient, ref string, startsAt time.Time, leadSeconds *int) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tenant.Enter(ctx, tx, tenantID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at, lead_seconds, payload)
		VALUES ($1, $2, 'sms', 'meeting_soon', $3, $4, $5, '{"text":"Your meeting starts soon"}')`,
		tenantID, recipient, ref, startsAt, leadSeconds); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func seconds(n int) *int { return &n }

func (b *bundle) rows(t *testing.T, tenant, ref string) []ledger.Notification {
	t.Helper()
	out, err := b.ledger.Find(ctx, tenant, ledger.Filter{RefID: ref})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *bundle) run(t *testing.T) Result {
	t.Helper()
	res, err := b.m.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

func TestRunTwiceSchedulesNothingNew(t *testing.T) {
	b := setup(t)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", b.now.Add(time.Hour), nil)
	addItem(t, b.db.App, "acme", "+15550002", "CAL-1", b.now.Add(time.Hour), seconds(1800))
	addItem(t, b.db.App, "globex", "+15550003", "CAL-9", b.now.Add(2*time.Hour), nil)

	first := b.run(t)
	if first.Items != 3 || first.Scheduled != 3 || first.Existing != 0 || len(first.Skipped) != 0 {
		t.Fatalf("first run %+v, want 3 items scheduled", first)
	}
	second := b.run(t)
	if second.Items != 3 || second.Scheduled != 0 || second.Existing != 3 {
		t.Fatalf("second run %+v, want nothing new and 3 existing", second)
	}
	// Each row lands in its item's own tenant.
	if n := len(b.rows(t, "acme", "CAL-1")); n != 2 {
		t.Errorf("acme has %d rows, want 2", n)
	}
	if n := len(b.rows(t, "globex", "CAL-9")); n != 1 {
		t.Errorf("globex has %d rows, want 1", n)
	}
	if n := len(b.rows(t, "globex", "CAL-1")); n != 0 {
		t.Errorf("globex sees %d of acme's rows", n)
	}
}

func TestLeadTimeRule(t *testing.T) {
	b := setup(t)
	start := b.now.Add(time.Hour)
	addItem(t, b.db.App, "acme", "+15550001", "OWN", start, seconds(1800))
	addItem(t, b.db.App, "acme", "+15550001", "DEFAULT", start, nil)
	b.run(t)
	for ref, lead := range map[string]time.Duration{"OWN": 30 * time.Minute, "DEFAULT": DefaultLead} {
		rows := b.rows(t, "acme", ref)
		if len(rows) != 1 {
			t.Fatalf("%s: %d rows, want 1", ref, len(rows))
		}
		n := rows[0]
		if !n.DueAt.Equal(start.Add(-lead)) || n.ExpiresAt == nil || !n.ExpiresAt.Equal(start) {
			t.Errorf("%s: due %s expires %v; want due %s (starts_at − %s) and expiring at starts_at %s",
				ref, n.DueAt, n.ExpiresAt, start.Add(-lead), lead, start)
		}
		if n.Channel != "sms" || n.Kind != "meeting_soon" || !strings.Contains(string(n.Payload), "starts soon") {
			t.Errorf("%s: row %+v does not carry the item's channel, kind and payload", ref, n)
		}
	}
}

func TestWindowBounds(t *testing.T) {
	b := setup(t)
	addItem(t, b.db.App, "acme", "+15550001", "INSIDE", b.now.Add(DefaultLookahead), nil)
	addItem(t, b.db.App, "acme", "+15550001", "BEYOND", b.now.Add(DefaultLookahead+time.Minute), nil)
	addItem(t, b.db.App, "acme", "+15550001", "STARTED", b.now.Add(-time.Minute), nil)
	res := b.run(t)
	if res.Items != 1 || res.Scheduled != 1 {
		t.Fatalf("run %+v, want only the item starting inside the window", res)
	}
	if len(b.rows(t, "acme", "BEYOND")) != 0 || len(b.rows(t, "acme", "STARTED")) != 0 ||
		len(b.rows(t, "acme", "INSIDE")) != 1 {
		t.Fatal("the window is (now, now+lookahead]: only INSIDE may be scheduled")
	}
	// Once time moves on, the item that was beyond the window is in it.
	b.advance(15 * time.Minute)
	if res := b.run(t); res.Scheduled != 1 || res.Existing != 1 {
		t.Fatalf("later run %+v, want BEYOND scheduled and INSIDE existing", res)
	}
}

func TestPassedFireTimeKeepsItsDueTime(t *testing.T) {
	b := setup(t)
	start := b.now.Add(20 * time.Minute)
	addItem(t, b.db.App, "acme", "+15550001", "SOON", start, seconds(3600))
	res := b.run(t)
	if res.Scheduled != 1 || res.Late != 1 {
		t.Fatalf("run %+v, want one late row", res)
	}
	rows := b.rows(t, "acme", "SOON")
	if len(rows) != 1 || !rows[0].DueAt.Equal(start.Add(-time.Hour)) || !rows[0].ExpiresAt.Equal(start) {
		t.Fatalf("rows %+v, want one row due at starts_at − 1h (already past), expiring at starts_at", rows)
	}
	// A later run computes the same due time, so it is the same row.
	b.advance(15 * time.Minute)
	if res := b.run(t); res.Scheduled != 0 || res.Existing != 1 {
		t.Fatalf("later run %+v, want the row found, not duplicated", res)
	}
}

// staticSource returns fixed items, for cases the database refuses to hold.
type staticSource []Item

func (s staticSource) Upcoming(context.Context, time.Time, time.Time) ([]Item, error) { return s, nil }

func (s staticSource) Nudges(context.Context, time.Time) ([]Nudge, error) { return nil, nil }

func TestSkipsStartedAndInvalidItemsWithReasons(t *testing.T) {
	b := setup(t)
	negative := -time.Minute
	item := func(ref string, start time.Time) Item {
		return Item{Tenant: "acme", Recipient: "+15550001", Channel: "sms", Kind: "meeting_soon", RefID: ref,
			StartsAt: start, Payload: []byte(`{"text":"soon"}`)}
	}
	started := item("STARTED", b.now)
	badChannel := item("BAD", b.now.Add(time.Hour))
	badChannel.Channel = "fax"
	badLead := item("LEAD", b.now.Add(time.Hour))
	badLead.Lead = &negative
	b.m = New(staticSource{started, badChannel, item("GOOD", b.now.Add(time.Hour)), badLead}, b.ledger, config, b.clk)
	res := b.run(t)
	if res.Scheduled != 1 || len(res.Skipped) != 3 {
		t.Fatalf("run %+v, want GOOD scheduled and three skipped", res)
	}
	want := map[string]string{"STARTED": "already started", "BAD": "channel", "LEAD": "negative"}
	for _, s := range res.Skipped {
		if !strings.Contains(s.Reason, want[s.RefID]) {
			t.Errorf("%s skipped because %q, want a reason mentioning %q", s.RefID, s.Reason, want[s.RefID])
		}
	}
}

func TestLargeTenantIsWrittenInBatches(t *testing.T) {
	b := setup(t)
	n := ledger.MaxScheduleBatch + 250
	items := make(staticSource, n)
	for i := range items {
		items[i] = Item{Tenant: "acme", Recipient: fmt.Sprintf("+1555%07d", i), Channel: "sms", Kind: "meeting_soon",
			RefID: "ALLHANDS", StartsAt: b.now.Add(time.Hour), Payload: []byte(`{"text":"soon"}`)}
	}
	b.m = New(items, b.ledger, config, b.clk)
	if res := b.run(t); res.Scheduled != n {
		t.Fatalf("run %+v, want %d scheduled", res, n)
	}
	rows, err := b.ledger.Find(ctx, "acme", ledger.Filter{RefID: "ALLHANDS", Limit: ledger.MaxFindLimit})
	if err != nil || len(rows) != ledger.MaxFindLimit {
		t.Fatalf("find: %d rows (%v)", len(rows), err)
	}
}

func TestItemsTableIsTenantScoped(t *testing.T) {
	b := setup(t)
	addItem(t, b.db.App, "acme", "+15550001", "CAL-1", b.now.Add(time.Hour), nil)
	var n int
	if err := b.db.App.QueryRow(`SELECT count(*) FROM owed_items`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("unscoped read saw %d items (%v), want 0", n, err)
	}
	tx, err := b.db.App.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tenant.Enter(ctx, tx, "globex"); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(`SELECT count(*) FROM owed_items`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("globex saw %d of acme's items (%v)", n, err)
	}
	_, err = tx.Exec(`INSERT INTO owed_items (tenant_id, recipient, channel, kind, ref_id, starts_at)
		VALUES ('acme', 'x', 'sms', 'k', 'r', now())`)
	if err == nil || !strings.Contains(err.Error(), "row-level security") {
		t.Fatalf("globex wrote an acme item: %v", err)
	}
}

func TestConfig(t *testing.T) {
	var c Config
	if err := envconfig.Process("OWED_MATERIALISE_TEST_UNSET", &c); err != nil {
		t.Fatal(err)
	}
	if c.Lookahead != DefaultLookahead || c.DefaultLead != DefaultLead {
		t.Fatalf("defaults %+v, want the named constants %s and %s", c, DefaultLookahead, DefaultLead)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, bad := range []struct {
		c    Config
		name string
	}{
		{Config{Lookahead: 0, DefaultLead: time.Minute}, "OWED_LOOKAHEAD"},
		{Config{Lookahead: time.Hour, DefaultLead: -time.Minute}, "OWED_DEFAULT_LEAD"},
		{Config{Lookahead: time.Hour, DefaultLead: 2 * time.Hour}, "OWED_DEFAULT_LEAD"},
	} {
		if err := bad.c.Validate(); err == nil || !strings.HasPrefix(err.Error(), bad.name) {
			t.Errorf("%+v: %v, want an error naming %s", bad.c, err, bad.name)
		}
	}
	t.Setenv("OWED_LOOKAHEAD", "90m")
	if err := envconfig.Process("OWED", &c); err != nil || c.Lookahead != 90*time.Minute {
		t.Fatalf("OWED_LOOKAHEAD=90m read as %s (%v)", c.Lookahead, err)
	}
}
