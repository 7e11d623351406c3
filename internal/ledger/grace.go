package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/owedhq/owed/internal/payload"
)

// GraceDefault is the documented default grace (OWED_DEFAULT_GRACE): a row
// scheduled without an expiry is still worth sending a day after its due
// time, not nine months after.
const GraceDefault = 24 * time.Hour

// Grace is how long after its due time a row scheduled without an
// expires_at stays worth sending: the row expires then, and a row already
// past it when scheduled is stored expired, never sent. The database applies
// it to every insert, whoever writes it (owed_apply_default_grace,
// internal/ledger/sql/grace.sql); the sweeper stores it at start-up
// (SetDefaultGrace). The zero Grace is not configured: the sweeper leaves
// what the database holds alone.
type Grace struct {
	// D is the grace when it is above zero.
	D time.Duration
	// None keeps rows without an expiry unexpiring, as owed did before it
	// had a default grace.
	None bool
}

// ParseGrace reads a grace: "none", or a Go duration of at least a second
// ("24h", "10m", "90s").
func ParseGrace(s string) (Grace, error) {
	s = strings.TrimSpace(s)
	if s == "none" {
		return Grace{None: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return Grace{}, fmt.Errorf("%q is not a grace: give a duration of at least 1s like 24h or 10m, or none", s)
	}
	return Grace{D: d}, nil
}

// Decode makes *Grace an envconfig.Decoder, so a wrong OWED_DEFAULT_GRACE
// fails at start-up with the variable's name in the message.
func (g *Grace) Decode(value string) error {
	parsed, err := ParseGrace(value)
	if err != nil {
		return err
	}
	*g = parsed
	return nil
}

// String writes g as ParseGrace reads it ("" when not configured).
func (g Grace) String() string {
	switch {
	case g.None:
		return "none"
	case g.D > 0:
		return g.D.String()
	}
	return ""
}

// configured says whether g says anything.
func (g Grace) configured() bool { return g.None || g.D > 0 }

// GraceOverride is the grace of one kind ("kind:meeting_nudge") or one
// channel ("channel:sms"), which wins over the default; a kind's wins over
// its channel's.
type GraceOverride struct {
	Scope string
	Grace Grace
}

// GraceOverrides is OWED_DEFAULT_GRACE_OVERRIDES: comma-separated
// scope=grace pairs, each scope kind:<kind> or channel:<channel>, each grace
// a duration or none, e.g. kind:meeting_nudge=10m,channel:sms=2h,kind:digest=none.
type GraceOverrides []GraceOverride

// ParseGraceOverrides reads OWED_DEFAULT_GRACE_OVERRIDES' syntax; an empty
// string is no override.
func ParseGraceOverrides(s string) (GraceOverrides, error) {
	var out GraceOverrides
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		scope, value, ok := strings.Cut(part, "=")
		scope = strings.TrimSpace(scope)
		if !ok {
			return nil, fmt.Errorf("%q has no grace: write it as %s=10m (a duration, or none)", part, scope)
		}
		what, name, _ := strings.Cut(scope, ":")
		switch {
		case what != "kind" && what != "channel":
			return nil, fmt.Errorf("%q: a scope is kind:<kind> or channel:<channel>", scope)
		case name == "":
			return nil, fmt.Errorf("%q names no %s", scope, what)
		case what == "kind" && len(name) > maxKindLen:
			return nil, fmt.Errorf("%q: a kind is at most %d bytes", scope, maxKindLen)
		case what == "channel" && !slices.Contains(payload.Channels(), name):
			return nil, fmt.Errorf("%q: the channel is one of %s", scope, strings.Join(payload.Channels(), ", "))
		case seen[scope]:
			return nil, fmt.Errorf("%q is given twice", scope)
		}
		seen[scope] = true
		g, err := ParseGrace(value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", scope, err)
		}
		out = append(out, GraceOverride{Scope: scope, Grace: g})
	}
	return out, nil
}

// Decode makes *GraceOverrides an envconfig.Decoder.
func (o *GraceOverrides) Decode(value string) error {
	parsed, err := ParseGraceOverrides(value)
	if err != nil {
		return err
	}
	*o = parsed
	return nil
}

// String writes o as ParseGraceOverrides reads it.
func (o GraceOverrides) String() string {
	parts := make([]string, len(o))
	for i, g := range o {
		parts[i] = g.Scope + "=" + g.Grace.String()
	}
	return strings.Join(parts, ",")
}

var qSetDefaultGrace = queries.Get("SetDefaultGrace")

// SetDefaultGrace stores the default grace and its overrides, which the
// database applies to every row inserted without an expiry from then on
// (Grace). A default that is not configured writes nothing at all: the
// database keeps what it holds.
func (l *Sweep) SetDefaultGrace(ctx context.Context, def Grace, overrides GraceOverrides) error {
	if !def.configured() {
		return nil
	}
	all := append(GraceOverrides{{Scope: "default", Grace: def}}, overrides...)
	scopes := make([]string, len(all))
	graces := make([]sql.NullString, len(all))
	for i, o := range all {
		scopes[i] = o.Scope
		if !o.Grace.None {
			graces[i] = sql.NullString{String: fmt.Sprintf("%d microseconds", o.Grace.D.Microseconds()), Valid: true}
		}
	}
	_, err := l.db.ExecContext(ctx, qSetDefaultGrace, pq.Array(scopes), pq.Array(graces))
	return err
}
