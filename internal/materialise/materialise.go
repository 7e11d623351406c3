// Package materialise turns upcoming items (calendar events, follow-ups) into
// ledger rows over a look-ahead window: the work behind POST
// /cron/materialise, run every 15 minutes.
//
// An item becomes one notification due at starts_at minus its lead time (the
// item's own, else the default) and expiring at starts_at: a "your meeting
// starts in 10 minutes" nudge sent after the meeting began is wrong, not
// late. Running over the same window twice schedules nothing new, because
// every input to a row's schedule key comes from the item itself, never from
// the clock. The package never writes a row for an item that has already
// started.
//
// The rows it writes follow their items (reconcile.go): each run first
// reads every row it wrote that is still owed, with its item as it is now,
// and moves the row when the item moved or its lead changed, or cancels it
// when the item was deleted, cancelled or moved to a time already begun. It
// never changes a settled row, nor one a worker is sending: that one takes
// the change as an intent, applied when its send ends (owed_apply_intent,
// internal/ledger/sql/intents.sql). A row is the materialiser's when it is
// marked so (owed_notifications.materialised); a row
// an application scheduled through the API is never changed here.
//
// Its one clock (clock.Clock, given to New) says when a run looks from; the
// ledger stamps the rows it writes by its own. The cross-tenant reads of
// owed_items and of the rows it wrote (SQLSource) are SECURITY DEFINER
// functions (sql/items.sql); the rows are written back, and
// changed, through the ledger in each item's own tenant scope. Nothing it
// answers or logs names a recipient.
package materialise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
)

// Defaults for Config.
const (
	// DefaultLookahead is how far ahead a run looks. It exceeds the run
	// interval (15 minutes) many times over, so a missed run or two loses
	// nothing, and it should exceed the longest item lead time: an item is
	// only seen once it starts within the window.
	DefaultLookahead = 3 * time.Hour
	// DefaultLead is how long before starts_at an item without its own lead
	// time is notified.
	DefaultLead = 10 * time.Minute
)

// Config is the materialiser's configuration. Services embed it in their
// envconfig struct and process it with the "OWED" prefix. The default tags
// repeat DefaultLookahead and DefaultLead; a test keeps them equal.
type Config struct {
	// Lookahead is OWED_LOOKAHEAD: items starting within now..now+Lookahead
	// are materialised.
	Lookahead time.Duration `envconfig:"LOOKAHEAD" default:"3h"`
	// DefaultLead is OWED_DEFAULT_LEAD: the lead time of an item without its
	// own.
	DefaultLead time.Duration `envconfig:"DEFAULT_LEAD" default:"10m"`
}

// Validate reports the first unusable setting, naming its variable.
func (c Config) Validate() error {
	if c.Lookahead <= 0 {
		return fmt.Errorf("OWED_LOOKAHEAD=%s must be above zero (a duration like 3h)", c.Lookahead)
	}
	if c.DefaultLead < 0 {
		return fmt.Errorf("OWED_DEFAULT_LEAD=%s must not be negative (a duration like 10m)", c.DefaultLead)
	}
	if c.DefaultLead >= c.Lookahead {
		return fmt.Errorf("OWED_DEFAULT_LEAD=%s must be shorter than OWED_LOOKAHEAD=%s, "+
			"or every item would be found after its notification was due", c.DefaultLead, c.Lookahead)
	}
	return nil
}

// Item is one upcoming thing to notify a recipient about.
type Item struct {
	// ID is the owed_items row's id; 0 for an item from elsewhere.
	ID        int64  `json:"id,omitempty"`
	Tenant    string `json:"tenant_id"`
	Recipient string `json:"recipient"`
	Channel   string `json:"channel"`
	Kind      string `json:"kind"`
	RefID     string `json:"ref_id"`
	// StartsAt is when the thing happens; the notification expires then.
	StartsAt time.Time `json:"starts_at"`
	// Lead is the item's own "remind me this long before"; nil takes the
	// materialiser's default.
	Lead    *time.Duration  `json:"lead,omitempty"`
	Payload json.RawMessage `json:"payload"`
}

// Source yields upcoming items and the nudges already written for them.
type Source interface {
	// Upcoming returns every item whose StartsAt is in (from, to], across
	// all tenants, cancelled ones excepted.
	Upcoming(ctx context.Context, from, to time.Time) ([]Item, error)
	// Nudges returns every row the materialiser wrote that is still owed
	// and expires after now, across all tenants, ordered by tenant and id,
	// each with its item as it is now.
	Nudges(ctx context.Context, now time.Time) ([]Nudge, error)
}

// Materialiser schedules a Source's upcoming items into the ledger.
type Materialiser struct {
	source Source
	ledger *ledger.Scheduling
	cfg    Config
	clk    clock.Clock
}

// New returns a Materialiser writing through l's Scheduling role,
// configured by c, that tells the time by clk (nil: clock.Real).
func New(src Source, l ledger.HasScheduling, c Config, clk clock.Clock) *Materialiser {
	if clk == nil {
		clk = clock.Real()
	}
	m := &Materialiser{source: src, cfg: c, clk: clk}
	// A nil l is a materialiser that only plans (its tests): it writes nothing.
	if l != nil {
		m.ledger = l.SchedulingRole()
	}
	return m
}

// Result reports one run.
type Result struct {
	// From and To are the window: items starting in (From, To].
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Items counts what the source returned.
	Items int `json:"items"`
	// Scheduled counts rows this run created; Existing counts rows an
	// earlier run (or the API) had already created.
	Scheduled int `json:"scheduled"`
	Existing  int `json:"existing"`
	// Rescheduled counts rows moved because their item moved or its lead
	// changed; Cancelled counts rows cancelled because their item was
	// deleted, cancelled or moved to a time already begun (or because the
	// item had a second row). Intents counts the rows among them a worker
	// was sending, which take the change when their send ends.
	Rescheduled int `json:"rescheduled"`
	Cancelled   int `json:"cancelled"`
	Intents     int `json:"intents"`
	// Late counts rows whose due time had already passed when they were
	// written; the next sweep sends them, before their expiry.
	Late int `json:"late"`
	// Skipped lists items not scheduled, with the reason.
	Skipped []Skipped `json:"skipped,omitempty"`
}

// Skipped is an item the run did not schedule. It names the item, never
// its recipient: /cron/materialise answers with it, and the cron's logs
// are no place for contact details.
type Skipped struct {
	Tenant string `json:"tenant_id"`
	Kind   string `json:"kind"`
	RefID  string `json:"ref_id"`
	Reason string `json:"reason"`
}

func skip(it Item, reason string) Skipped {
	return Skipped{Tenant: it.Tenant, Kind: it.Kind, RefID: it.RefID, Reason: reason}
}

// Run reconciles the rows earlier runs wrote with their items (see plan),
// then materialises the items starting within the look-ahead window.
//
// A row is due at StartsAt − lead and expires at StartsAt. When that due time
// has already passed but the item has not started (a lead longer than the
// window, a run that was paused), the row keeps its computed due time in the
// past rather than "now": the sweeper has no lower bound on due_at, so it is
// sent on the next sweep, and a due time derived only from the item keeps the
// row's schedule key stable, so the next run finds it instead of scheduling
// a duplicate. Items already started are skipped, and so are invalid ones,
// each with its reason; one bad item never blocks the others.
//
// An item whose row the reconciliation holds is counted existing and not
// scheduled again. Every row written or found for an item is marked the
// materialiser's, so the next run reconciles it.
//
// Rows are written per tenant in batches of at most ledger.MaxScheduleBatch.
// A failed batch does not stop the other tenants; Run returns their errors
// joined, with the counts of what was written. A tenant whose
// reconciliation failed has nothing scheduled this run, since a new row for
// an item whose old one could not move would be a second nudge.
func (m *Materialiser) Run(ctx context.Context) (Result, error) {
	now := m.clk.Now()
	res := Result{From: now, To: now.Add(m.cfg.Lookahead)}
	nudges, err := m.source.Nudges(ctx, now)
	if err != nil {
		return res, fmt.Errorf("materialise: read materialised nudges: %w", err)
	}
	held, failed, errs := m.reconcile(ctx, nudges, now, &res)
	items, err := m.source.Upcoming(ctx, res.From, res.To)
	if err != nil {
		return res, errors.Join(append(errs, fmt.Errorf("materialise: read upcoming items: %w", err))...)
	}
	res.Items = len(items)

	byTenant := map[string][]ledger.NewNotification{}
	for _, it := range items {
		if failed[it.Tenant] {
			continue
		}
		if it.ID != 0 && held[it.ID] {
			res.Existing++
			continue
		}
		row, reason := m.row(it, now)
		if reason != "" {
			res.Skipped = append(res.Skipped, skip(it, reason))
			continue
		}
		byTenant[it.Tenant] = append(byTenant[it.Tenant], row)
	}
	for _, tenant := range sortedKeys(byTenant) {
		// Each batch is one ledger call, within its bounds.
		for chunk := range slices.Chunk(byTenant[tenant], ledger.MaxScheduleBatch) {
			// The rows and their mark are one transaction: a row written
			// unmarked would never follow its item.
			out, err := m.ledger.ScheduleMaterialised(ctx, tenant, chunk)
			if err != nil {
				errs = append(errs, fmt.Errorf("materialise: tenant %q: schedule %d rows: %w", tenant, len(chunk), err))
				continue
			}
			for i, s := range out {
				switch {
				case !s.Created:
					res.Existing++
				case chunk[i].DueAt.Before(now):
					res.Scheduled++
					res.Late++
				default:
					res.Scheduled++
				}
			}
		}
	}
	return res, errors.Join(errs...)
}

// sortedKeys lists a per-tenant map's tenants in order: a stable order
// makes a run's log and its failures reproducible.
func sortedKeys[V any](byTenant map[string]V) []string {
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	return tenants
}

// due is when an item starting at start is nudged: start − lead, the item's
// own lead or else the default. A zero lead would make due_at equal
// expires_at, which the ledger rightly refuses (a row that expires the
// instant it is due is never sendable): the smallest lead is one second.
func (m *Materialiser) due(start time.Time, lead *time.Duration) time.Time {
	d := m.cfg.DefaultLead
	if lead != nil {
		d = *lead
	}
	return start.UTC().Add(-max(d, time.Second))
}

// row builds the ledger row for it, or says why there is none. Each item is
// validated alone so that one bad item is skipped instead of failing its
// tenant's whole batch.
func (m *Materialiser) row(it Item, now time.Time) (ledger.NewNotification, string) {
	if !it.StartsAt.After(now) {
		return ledger.NewNotification{}, fmt.Sprintf("already started at %s", it.StartsAt.UTC().Format(time.RFC3339))
	}
	if it.Lead != nil && *it.Lead < 0 {
		return ledger.NewNotification{}, fmt.Sprintf("lead %s is negative", *it.Lead)
	}
	start := it.StartsAt.UTC()
	row := ledger.NewNotification{Recipient: it.Recipient, Channel: it.Channel, Kind: it.Kind, RefID: it.RefID,
		DueAt: m.due(start, it.Lead), ExpiresAt: &start, Payload: it.Payload}
	if err := ledger.Validate(it.Tenant, []ledger.NewNotification{row}); err != nil {
		var v *ledger.ValidationError
		if !errors.As(err, &v) {
			return ledger.NewNotification{}, "invalid: " + err.Error()
		}
		msgs := make([]string, len(v.Fields))
		for i, f := range v.Fields {
			msgs[i] = f.Field + ": " + f.Msg
		}
		return ledger.NewNotification{}, "invalid: " + strings.Join(msgs, "; ")
	}
	return row, ""
}
