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
// Its one clock (clock.Clock, given to New) says when a run looks from; the
// ledger stamps the rows it writes by its own. The cross-tenant read of
// owed_items (SQLSource) is a SECURITY DEFINER function
// (migrations/00019); the rows are written back through the ledger in each
// item's own tenant scope.
package materialise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// Source yields upcoming items.
type Source interface {
	// Upcoming returns every item whose StartsAt is in (from, to], across
	// all tenants.
	Upcoming(ctx context.Context, from, to time.Time) ([]Item, error)
}

// Materialiser schedules a Source's upcoming items into the ledger.
type Materialiser struct {
	source Source
	ledger *ledger.Ledger
	cfg    Config
	clk    clock.Clock
}

// New returns a Materialiser configured by c that tells the time by clk
// (nil: clock.Real).
func New(src Source, l *ledger.Ledger, c Config, clk clock.Clock) *Materialiser {
	if clk == nil {
		clk = clock.Real()
	}
	return &Materialiser{source: src, ledger: l, cfg: c, clk: clk}
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

// Run materialises the items starting within the look-ahead window.
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
// Rows are written per tenant in batches of at most ledger.MaxScheduleBatch.
// A failed batch does not stop the other tenants; Run returns their errors
// joined, with the counts of what was written.
func (m *Materialiser) Run(ctx context.Context) (Result, error) {
	now := m.clk.Now()
	res := Result{From: now, To: now.Add(m.cfg.Lookahead)}
	items, err := m.source.Upcoming(ctx, res.From, res.To)
	if err != nil {
		return res, fmt.Errorf("materialise: read upcoming items: %w", err)
	}
	res.Items = len(items)

	byTenant := map[string][]ledger.NewNotification{}
	for _, it := range items {
		row, reason := m.row(it, now)
		if reason != "" {
			res.Skipped = append(res.Skipped, skip(it, reason))
			continue
		}
		byTenant[it.Tenant] = append(byTenant[it.Tenant], row)
	}
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	// A stable order makes a run's log and its failures reproducible.
	sort.Strings(tenants)

	var errs []error
	for _, tenant := range tenants {
		rows := byTenant[tenant]
		for start := 0; start < len(rows); start += ledger.MaxScheduleBatch {
			chunk := rows[start:min(start+ledger.MaxScheduleBatch, len(rows))]
			out, err := m.ledger.Schedule(ctx, tenant, chunk)
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

// row builds the ledger row for it, or says why there is none. Each item is
// validated alone so that one bad item is skipped instead of failing its
// tenant's whole batch.
func (m *Materialiser) row(it Item, now time.Time) (ledger.NewNotification, string) {
	if !it.StartsAt.After(now) {
		return ledger.NewNotification{}, fmt.Sprintf("already started at %s", it.StartsAt.UTC().Format(time.RFC3339))
	}
	lead := m.cfg.DefaultLead
	if it.Lead != nil {
		if *it.Lead < 0 {
			return ledger.NewNotification{}, fmt.Sprintf("lead %s is negative", *it.Lead)
		}
		lead = *it.Lead
	}
	// A zero lead would make due_at equal expires_at, which the ledger
	// rightly refuses (a row that expires the instant it is due is never
	// sendable): the smallest lead is one second.
	lead = max(lead, time.Second)
	start := it.StartsAt.UTC()
	row := ledger.NewNotification{Recipient: it.Recipient, Channel: it.Channel, Kind: it.Kind, RefID: it.RefID,
		DueAt: start.Add(-lead), ExpiresAt: &start, Payload: it.Payload}
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
