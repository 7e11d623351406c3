package ledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/lib/pq"
)

// Digest declares one kind of a tenant's notifications digestible
// (owed_digests, sql/digests.sql): rows of the kind to one recipient on one
// channel whose due times fall within one Window go out as one provider
// call listing them, when the window closes (the first member's due time
// plus Window), or earlier when a member's expiry falls before that.
type Digest struct {
	Kind string `json:"kind"`
	// Window is how long a digest gathers after its first member's due
	// time; zero turns digesting off for the kind.
	Window time.Duration `json:"-"`
}

// MaxDigestWindow bounds a digest's window: every member waits up to that
// long for the digest, so a longer one is a different product.
const MaxDigestWindow = 24 * time.Hour

// DigestResult counts what a change of digest settings did to the
// tenant's pending rows.
type DigestResult struct {
	// Undigested counts rows taken out of digests not yet leased (their
	// kind stopped being digestible), each back at the due time it was
	// asked for.
	Undigested int `json:"undigested"`
}

// The statements of digests, beside their callers.
var (
	qDigests       = queries.Get("Digests")
	qUpsertDigest  = queries.Get("UpsertDigest")
	qDeleteDigest  = queries.Get("DeleteDigest")
	qUndigestKind  = queries.Get("UndigestKind")
	qDigestLock    = queries.Get("DigestLock")
	qDigestReplays = queries.Get("DigestReplays")
	qOpenDigests   = queries.Get("OpenDigests")
	qJoinDigests   = queries.Get("JoinDigests")
	qMoveDigest    = queries.Get("MoveDigest")
	qDigestMembers = queries.Get("DigestMembers")
	qSweepDigests  = queries.Get("SweepDigests")
)

// ValidateDigest checks what SetDigest checks, naming the field.
func ValidateDigest(tenant string, d Digest) error {
	v := &ValidationError{}
	checkTenant(v, tenant)
	checkText(v, -1, "kind", d.Kind, maxKindLen)
	switch {
	case d.Window < 0 || d.Window > MaxDigestWindow:
		v.add(-1, "window", "%s is outside 1s to %s (0 turns digesting off)", d.Window, MaxDigestWindow)
	case d.Window%time.Second != 0:
		v.add(-1, "window", "%s is not a whole number of seconds", d.Window)
	}
	return v.orNil()
}

// SetDigest declares d.Kind of tenant digestible with d.Window, or turns
// digesting off for it when the window is zero. Turning it off takes the
// kind's pending rows out of the digests not yet leased, back at the due
// time each was asked for, in the same transaction; a digest already
// leased goes out as it is. A new window applies to the digests opened
// from then on.
func (l *Scheduling) SetDigest(ctx context.Context, tenant string, d Digest) (DigestResult, error) {
	if err := ValidateDigest(tenant, d); err != nil {
		return DigestResult{}, err
	}
	var res DigestResult
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		if d.Window > 0 {
			_, err := tx.Exec(qUpsertDigest, tenant, d.Kind, int(d.Window/time.Second), l.now())
			return err
		}
		if _, err := tx.Exec(qDeleteDigest, tenant, d.Kind); err != nil {
			return err
		}
		r, err := tx.Exec(qUndigestKind, tenant, d.Kind, l.now())
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		res.Undigested = int(n)
		return err
	})
	return res, err
}

// Digests lists tenant's digestible kinds, by kind.
func (l *Reads) Digests(ctx context.Context, tenant string) ([]Digest, error) {
	if err := ValidateTenant(tenant); err != nil {
		return nil, err
	}
	var out []Digest
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		m, err := loadDigests(tx, tenant)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out = append(out, Digest{Kind: k, Window: m[k]})
		}
		return err
	})
	return out, err
}

func loadDigests(tx *txn, tenant string) (map[string]time.Duration, error) {
	res, err := tx.Query(qDigests, tenant)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	m := map[string]time.Duration{}
	for res.Next() {
		var kind string
		var secs int
		if err := res.Scan(&kind, &secs); err != nil {
			return nil, err
		}
		m[kind] = time.Duration(secs) * time.Second
	}
	return m, res.Err()
}

// digestKey is what one digest gathers: one recipient, channel and kind.
type digestKey struct{ recipient, channel, kind string }

// openDigest is a digest a row being scheduled may join.
type openDigest struct {
	key digestKey
	// id is the digest's id; 0 for one this batch opens (its first
	// member's id once written).
	id int64
	// sendAt is when the digest goes out; opens and latest are the
	// earliest and latest due times its members asked for.
	sendAt, opens, latest time.Time
	window                time.Duration
	refs                  map[string]bool
	// moved says an existing digest's send time was brought forward.
	moved bool
}

// joins reports whether a row asked for at due, with expiry exp and ref,
// may join d, and the digest's send time if it does. The row must be due
// within the digest's window and no later than its send time (a digest
// never sends a member early), and must not share d's member's ref_id (one
// subject once per digest, and the schedule key stays unique). A member
// whose expiry is not after the send time brings the digest forward to the
// latest due time of its members, the earliest instant every member is
// due; the row does not join when even that is not before its expiry.
func (d *openDigest) joins(due time.Time, exp *time.Time, ref string) (time.Time, bool) {
	if due.Before(d.opens) || !due.Before(d.opens.Add(d.window)) || due.After(d.sendAt) || d.refs[ref] {
		return time.Time{}, false
	}
	send := d.sendAt
	if exp != nil && !exp.After(send) {
		send = maxTime(d.latest, due)
		if !exp.After(send) {
			return time.Time{}, false
		}
	}
	return send, true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// digestPlan is what digestRows decided for a batch: each row's digest
// (in[i] < 0: none) among digests, to name once the rows are written.
type digestPlan struct {
	of      []int
	digests []*openDigest
}

// digestRows puts the rows of a digestible kind being scheduled in their
// digests: a row joins an open digest of its recipient, channel and kind
// (openDigest.joins) or opens one, whose send time is its due time plus
// the window, and is written with that send time as its due_at and the due
// time it asked for as its digest_from. A row whose expiry falls inside
// its own window opens none and is sent alone at its due time. A replay
// (the row exists, by the due time it asked for) is given its row's due_at,
// so it meets the row's schedule key and creates nothing. Digests this
// batch brings forward are moved at once; the rows' digest ids are written
// after the rows (nameDigests). A row in expire (quiet hours settle it
// expired once written) joins none. The caller holds the send times for
// quiet hours again (holdRows): a digest's members share its send time and
// its rule, so they share its opening.
func (l *Scheduling) digestRows(tx *txn, tenant string, rows []NewNotification, expire []int) ([]NewNotification, *digestPlan, error) {
	windows, err := loadDigests(tx, tenant)
	if err != nil || len(windows) == 0 {
		return rows, nil, err
	}
	var asked []int
	for i, r := range rows {
		// A row quiet hours expire (expire) is never sent, so it is in no
		// digest.
		if windows[r.Kind] > 0 && !slices.Contains(expire, i) {
			asked = append(asked, i)
		}
	}
	if len(asked) == 0 {
		return rows, nil, nil
	}
	out := append([]NewNotification(nil), rows...)
	plan := &digestPlan{of: make([]int, len(rows))}
	for i := range plan.of {
		plan.of[i] = -1
	}
	due := func(i int) time.Time { return out[i].DueAt.UTC().Truncate(time.Microsecond) }

	// One schedule at a time opens or joins the digests of a key.
	keys := map[digestKey]bool{}
	var hashes []int32
	var recipients, kinds, refs []string
	var dues []string
	for _, i := range asked {
		r := out[i]
		k := digestKey{r.Recipient, r.Channel, r.Kind}
		if !keys[k] {
			keys[k] = true
			h := fnv.New32a()
			fmt.Fprintf(h, "%d:%s\x00%s\x00%s", len(tenant), tenant, k.recipient+"\x00"+k.channel, k.kind)
			hashes = append(hashes, int32(h.Sum32()))
		}
		recipients, kinds, refs = append(recipients, r.Recipient), append(kinds, r.Kind), append(refs, r.RefID)
		dues = append(dues, sqlTime(due(i)))
	}
	if _, err := tx.Exec(qDigestLock, pq.Array(hashes)); err != nil {
		return nil, nil, fmt.Errorf("lock the digests: %w", err)
	}

	// Replays keep their row's due time and join nothing.
	replay := map[int]time.Time{}
	res, err := tx.Query(qDigestReplays, tenant, pq.Array(recipients), pq.Array(kinds), pq.Array(refs), pq.Array(dues))
	if err != nil {
		return nil, nil, fmt.Errorf("find replayed rows: %w", err)
	}
	for res.Next() {
		var k int
		var at time.Time
		if err := res.Scan(&k, &at); err != nil {
			res.Close()
			return nil, nil, err
		}
		replay[asked[k-1]] = at.UTC()
	}
	res.Close()
	if err := res.Err(); err != nil {
		return nil, nil, err
	}

	open := map[digestKey][]*openDigest{}
	var kr, kc, kk []string
	var order []digestKey
	for k := range keys {
		order = append(order, k)
		kr, kc, kk = append(kr, k.recipient), append(kc, k.channel), append(kk, k.kind)
	}
	res, err = tx.Query(qOpenDigests, tenant, pq.Array(kr), pq.Array(kc), pq.Array(kk))
	if err != nil {
		return nil, nil, fmt.Errorf("read the open digests: %w", err)
	}
	for res.Next() {
		var k int
		d := &openDigest{refs: map[string]bool{}}
		var memberRefs []string
		if err := res.Scan(&k, &d.id, &d.sendAt, &d.opens, &d.latest, pq.Array(&memberRefs)); err != nil {
			res.Close()
			return nil, nil, err
		}
		d.key = order[k-1]
		d.window = windows[d.key.kind]
		d.sendAt, d.opens, d.latest = d.sendAt.UTC(), d.opens.UTC(), d.latest.UTC()
		for _, r := range memberRefs {
			d.refs[r] = true
		}
		open[d.key] = append(open[d.key], d)
	}
	res.Close()
	if err := res.Err(); err != nil {
		return nil, nil, err
	}

	for _, i := range asked {
		if at, ok := replay[i]; ok {
			out[i].DueAt = at
			continue
		}
		r := out[i]
		k := digestKey{r.Recipient, r.Channel, r.Kind}
		at := due(i)
		var exp *time.Time
		if r.ExpiresAt != nil {
			e := r.ExpiresAt.UTC().Truncate(time.Microsecond)
			exp = &e
		}
		var found *openDigest
		send := time.Time{}
		for _, d := range open[k] {
			if s, ok := d.joins(at, exp, r.RefID); ok && (found == nil || s.Before(send)) {
				found, send = d, s
			}
		}
		if found == nil {
			w := windows[r.Kind]
			if exp != nil && !exp.After(at.Add(w)) {
				// Its expiry falls inside its own window: it goes alone, on
				// time, and opens no digest.
				continue
			}
			found = &openDigest{key: k, sendAt: at.Add(w), opens: at, latest: at, window: w, refs: map[string]bool{}}
			send = found.sendAt
			open[k] = append(open[k], found)
			plan.digests = append(plan.digests, found)
		} else if !slices.Contains(plan.digests, found) {
			plan.digests = append(plan.digests, found)
		}
		if send.Before(found.sendAt) {
			found.sendAt, found.moved = send, found.id != 0
		}
		found.latest = maxTime(found.latest, at)
		found.refs[r.RefID] = true
		from := at
		out[i].DigestFrom = &from
		plan.of[i] = slices.Index(plan.digests, found)
	}
	// Every member is written at its digest's final send time.
	for i, d := range plan.of {
		if d >= 0 {
			out[i].DueAt = plan.digests[d].sendAt
		}
	}
	for _, d := range plan.digests {
		if d.moved {
			if _, err := tx.Exec(qMoveDigest, tenant, d.id, d.sendAt, l.now()); err != nil {
				return nil, nil, fmt.Errorf("bring digest %d forward: %w", d.id, err)
			}
		}
	}
	return out, plan, nil
}

// nameDigests writes each new member's digest id once the rows are
// written: a digest this batch opened takes its first member's id. A row
// the batch did not create (a replay, or a key another row of the batch
// took) is left alone.
func nameDigests(tx *txn, tenant string, plan *digestPlan, out []Scheduled) error {
	if plan == nil {
		return nil
	}
	var ids, digests []int64
	for i, d := range plan.of {
		if d < 0 || !out[i].Created {
			continue
		}
		dg := plan.digests[d]
		if dg.id == 0 {
			dg.id = out[i].ID
		}
		ids, digests = append(ids, out[i].ID), append(digests, dg.id)
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(qJoinDigests, tenant, pq.Array(ids), pq.Array(digests))
	return err
}

// DigestKey is the idempotency key of a digest's send: derived from its
// members' ids, sorted, so a resend of the same digest carries the same key
// and a digest that lost a member (cancelled before the send) is a new
// message with a new one.
func DigestKey(prefix string, digest int64, members []int64) string {
	ids := slices.Sorted(slices.Values(members))
	h := sha256.New()
	var b [8]byte
	for _, id := range ids {
		binary.BigEndian.PutUint64(b[:], uint64(id))
		h.Write(b[:])
	}
	return fmt.Sprintf("%sd%d-%x", prefix, digest, h.Sum(nil)[:8])
}

// DigestsOf answers which of the rows ids (the sweep's leased rows) are in
// a digest, and its id; a row sent alone is absent.
func (l *Sweep) DigestsOf(ctx context.Context, ids []int64) (map[int64]int64, error) {
	out := map[int64]int64{}
	if len(ids) == 0 {
		return out, nil
	}
	err := l.queryAllTenants(ctx, qSweepDigests, []any{pq.Array(ids)}, func(rows *sql.Rows) error {
		var id, digest int64
		if err := rows.Scan(&id, &digest); err != nil {
			return err
		}
		out[id] = digest
		return nil
	})
	return out, err
}

// ClaimDigest is the worker's claim of one digest's message: every owed
// member of tenant's digest whose due time is dueAt, the digest's send
// time, claimed in one set-based statement (ClaimForSendBatch) in the
// tenant's scope. A member cancelled, settled or moved since is not among
// them. It answers the members' claims by id; none when the digest has no
// owed member left.
func (l *Work) ClaimDigest(ctx context.Context, tenant string, digest int64, dueAt time.Time, p ClaimParams) ([]Claim, error) {
	if err := checkClaim(ClaimRequest{Tenant: tenant, ID: digest, DueAt: dueAt}); err != nil {
		return nil, err
	}
	due := dueAt.UTC().Truncate(time.Microsecond)
	var reqs []ClaimRequest
	err := l.withTenant(ctx, tenant, func(tx *txn) error {
		res, err := tx.Query(qDigestMembers, tenant, digest, due)
		if err != nil {
			return err
		}
		defer res.Close()
		for res.Next() {
			var id int64
			if err := res.Scan(&id); err != nil {
				return err
			}
			reqs = append(reqs, ClaimRequest{Tenant: tenant, ID: id, DueAt: due})
		}
		return res.Err()
	})
	if err != nil || len(reqs) == 0 {
		return nil, err
	}
	claims, errs, err := l.ClaimForSendBatch(ctx, reqs, p)
	if err != nil {
		return nil, err
	}
	out := claims[:0]
	for i, c := range claims {
		// A member another transaction settled or removed between the
		// look-up and the claim is simply not in the digest.
		if errs[i] == nil {
			out = append(out, c)
		}
	}
	return out, nil
}
