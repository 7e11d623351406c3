package drill

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	owed "github.com/owedhq/owed/client"
)

// rowKind says what a workload row is there to prove.
type rowKind int

const (
	// kindOwed rows must end delivered (or failed after exhausting their
	// attempts under provider faults).
	kindOwed rowKind = iota
	// kindBacklog rows were due before the drill started: no lower bound.
	kindBacklog
	// kindExpired rows are past their expiry when scheduled: they must end
	// expired and never reach the provider.
	kindExpired
	// kindShortExpiry rows expire a few seconds after they fall due: they
	// may end delivered or expired, but are never sent after the expiry.
	kindShortExpiry
	// kindBounce rows go to a recipient the sandbox always refuses: they
	// must end failed and dead-lettered.
	kindBounce
	// kindCancel rows fall due after the fault window and are cancelled
	// during it: they must end cancelled and never be sent.
	kindCancel
)

// workloadKind is the drill's notification kind; the cancel rows use it too.
const workloadKind = "drill"

// row is one scheduled workload row.
type row struct {
	id        int64
	kind      rowKind
	refID     string
	dueAt     time.Time
	expiresAt *time.Time
}

// input is one row to schedule.
type input = owed.Notification

// plan builds the workload: most rows fall due spread over the window,
// some were due before it, and a few of each special kind.
func plan(cfg Config, start time.Time, rng *rand.Rand) ([]row, []input) {
	n := cfg.Rows
	special := max(2, n/100)
	// A slice, not a map, so one seed always plans the same workload.
	kinds := []struct {
		k     rowKind
		count int
	}{{kindExpired, special}, {kindShortExpiry, special}, {kindCancel, special}, {kindBacklog, n / 10}}
	if cfg.has(ProviderPermanent) {
		kinds = append(kinds, struct {
			k     rowKind
			count int
		}{kindBounce, special})
	}
	var rows []row
	var ins []input
	add := func(k rowKind, due time.Time, expires *time.Time, recipient string) {
		i := len(rows)
		ref := fmt.Sprintf("D-%d", i)
		r := row{kind: k, refID: ref, dueAt: due.UTC().Truncate(time.Microsecond), expiresAt: expires}
		in := input{Recipient: recipient, Channel: "email", Kind: workloadKind, RefID: ref, DueAt: r.dueAt,
			ExpiresAt: expires, Payload: owed.Payload{Subject: fmt.Sprintf("Drill %d", i), Text: fmt.Sprintf("Fault drill row %d.", i)}}
		rows, ins = append(rows, r), append(ins, in)
	}
	within := func() time.Time { return start.Add(time.Duration(rng.Int64N(int64(cfg.Spread)))) }
	for _, kc := range kinds {
		k := kc.k
		for range kc.count {
			i := len(rows)
			switch k {
			case kindBacklog:
				add(k, start.Add(-time.Duration(rng.Int64N(int64(10*time.Minute)))), nil, fmt.Sprintf("drill-%d@example.com", i))
			case kindExpired:
				due := start.Add(-2 * time.Minute)
				exp := due.Add(time.Minute)
				add(k, due, &exp, fmt.Sprintf("drill-%d@example.com", i))
			case kindShortExpiry:
				due := within()
				exp := due.Add(5 * time.Second)
				add(k, due, &exp, fmt.Sprintf("drill-%d@example.com", i))
			case kindBounce:
				add(k, within(), nil, fmt.Sprintf("drill-%d-bounce@example.com", i))
			case kindCancel:
				add(k, start.Add(cfg.Spread+2*time.Minute), nil, fmt.Sprintf("drill-%d@example.com", i))
			}
		}
	}
	for len(rows) < n {
		add(kindOwed, within(), nil, fmt.Sprintf("drill-%d@example.com", len(rows)))
	}
	return rows, ins
}

// client calls the scheduling API as the drill's tenant, with the Go client
// applications use.
type client struct{ api *owed.Client }

// newClient returns the drill's client of the API at url holding token;
// timeout bounds one request.
func newClient(url, token string, timeout time.Duration) *client {
	return &client{api: owed.New(url, token, owed.WithHTTPClient(&http.Client{Timeout: timeout}))}
}

// scheduleBatch is how many rows one call carries: the API's most, well
// under its 1 MiB body limit.
const scheduleBatch = 1000

// schedule schedules the workload and fills in the ids the API gave.
func (c *client) schedule(ctx context.Context, rows []row, ins []input) error {
	for lo := 0; lo < len(ins); lo += scheduleBatch {
		hi := min(lo+scheduleBatch, len(ins))
		out, err := c.api.ScheduleMany(ctx, ins[lo:hi])
		if err != nil {
			return fmt.Errorf("schedule rows %d to %d: %w", lo, hi, err)
		}
		if len(out.Notifications) != hi-lo {
			return fmt.Errorf("scheduled %d rows, the API answered for %d", hi-lo, len(out.Notifications))
		}
		for i, n := range out.Notifications {
			rows[lo+i].id = n.ID
		}
	}
	return nil
}

// cancel cancels one subject.
func (c *client) cancel(ctx context.Context, refID string) error {
	_, err := c.api.Cancel(ctx, workloadKind, refID)
	return err
}
