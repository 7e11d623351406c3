package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/ops"
)

const updateExample = `owedctl notifications update 4711 --due-local 2027-03-29T09:00 --time-zone Europe/Berlin --reason "ticket 88: customer asked for the morning"`

// notificationsUpdate replaces the payload, expiry or due time of one
// unsettled row, by id (of any tenant) or by its schedule key, as PATCH
// /v1/notifications does (ledger.Update): an open row takes it at once, a
// row a worker is sending takes it as an intent, applied if the send is
// handed back. It connects as on-call's login and writes an audit line
// naming the operator and the reason once the change is made.
func notificationsUpdate(ctx context.Context, out io.Writer, args []string) error {
	fs := newFlags("notifications update",
		"notifications update ID | --tenant T --recipient R --kind K --ref X --key-due T  [--payload JSON] [--due T] [--expires T]\n"+
			"    [--due-local L] [--expires-local L] [--time-zone Z] [--disambiguation D] --reason TEXT [--operator NAME] [--json] [--database-url URL]",
		updateExample)
	tenantID := fs.String("tenant", "", "by key: the row's tenant")
	var key struct{ recipient, kind, ref, due string }
	fs.StringVar(&key.recipient, "recipient", "", "by key: the row's recipient")
	fs.StringVar(&key.kind, "kind", "", "by key: the row's kind")
	fs.StringVar(&key.ref, "ref", "", "by key: the row's ref_id")
	fs.StringVar(&key.due, "key-due", "", "by key: the row's due time as it was scheduled (RFC 3339, or 2026-12-02T09:30 in UTC)")
	payload := fs.String("payload", "", `the new payload, a JSON object as the API takes it, e.g. '{"text":"Any news?"}'`)
	due := fs.String("due", "", "the new due time (RFC 3339, or 2026-12-02T09:30 in UTC); the expiry moves with it unless given")
	expires := fs.String("expires", "", "the new expiry (as --due)")
	var local ledger.Local
	fs.StringVar(&local.Due, "due-local", "", "the new due time on the recipient's wall clock, e.g. 2027-03-29T09:00, in --time-zone or the row's zone")
	fs.StringVar(&local.Expires, "expires-local", "", "the new expiry on the recipient's wall clock (as --due-local)")
	zone := fs.String("time-zone", "", "the IANA zone of --due-local and --expires-local, recorded on the row, e.g. Europe/Berlin")
	fs.StringVar(&local.Disambiguation, "disambiguation", "", "a local time the clocks skip or repeat: "+localDisambiguations)
	audit := addAuditFlags(fs, "why, for the audit trail (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	dbURL := operatorLogin.flag(fs, "the owed database, where the row changes and the audit line is written")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	byKey := key.recipient != "" || key.kind != "" || key.ref != "" || key.due != ""
	switch {
	case len(pos) > 1:
		return usageError{"update takes one notification id"}
	case len(pos) == 1 && (byKey || *tenantID != ""):
		return usageError{"give the id, or --tenant with the key (--recipient, --kind, --ref, --key-due), not both"}
	case len(pos) == 0 && (!byKey || *tenantID == ""):
		return usageError{"name the row: its id, or --tenant, --recipient, --kind, --ref and --key-due"}
	case *audit.reason == "":
		return usageError{"--reason: say why the row changes; the audit trail records it"}
	}
	c := ledger.Change{TimeZone: *zone}
	if *payload != "" {
		if !json.Valid([]byte(*payload)) {
			return usageError{fmt.Sprintf("--payload %q is not JSON; accepted: an object like '{\"text\":\"Any news?\"}'", *payload)}
		}
		c.Payload = json.RawMessage(*payload)
	}
	if *due != "" {
		if c.DueAt, err = ops.ParseTime("--due", *due); err != nil {
			return usageError{err.Error()}
		}
	}
	if *expires != "" {
		t, err := ops.ParseTime("--expires", *expires)
		if err != nil {
			return usageError{err.Error()}
		}
		c.ExpiresAt = &t
	}
	if local != (ledger.Local{}) {
		c.Local = &local
	}
	var k ledger.Key
	if byKey {
		k = ledger.Key{Recipient: key.recipient, Kind: key.kind, RefID: key.ref}
		if key.due == "" {
			return usageError{"--key-due: the row's due time, part of its key"}
		}
		if k.DueAt, err = ops.ParseTime("--key-due", key.due); err != nil {
			return usageError{err.Error()}
		}
		if err := ledger.ValidateKey(*tenantID, k); err != nil {
			return usageError{flagNames(err, map[string]string{"due_at": "--key-due"})}
		}
	}
	who, err := audit.operatorName()
	if err != nil {
		return err
	}
	if err := checkWrites(ctx, operatorLogin.url(*dbURL)); err != nil {
		return err
	}
	l, done, err := openLedger(operatorLogin.url(*dbURL))
	if err != nil {
		return err
	}
	defer done()
	var res ledger.UpdateResult
	tenant := *tenantID
	if byKey {
		res, err = l.UpdateByKey(ctx, tenant, k, c)
	} else {
		id, perr := ops.ParseID(pos[0])
		if perr != nil {
			return usageError{perr.Error()}
		}
		d, serr := ops.ShowNotification(ctx, l, id)
		if serr != nil {
			return serr
		}
		tenant = d.Tenant
		res, err = l.Update(ctx, tenant, id, c)
	}
	var v *ledger.ValidationError
	if errors.As(err, &v) {
		return usageError{flagNames(v, nil)}
	}
	if err != nil {
		return operatorLogin.hint(err)
	}
	target := "tenant=" + tenant + " id=" + strconv.FormatInt(res.ID, 10)
	if err := ops.Record(ctx, l, zerolog.Nop(), ledger.OperatorAction{Operator: who, Action: "update", Target: target,
		Count: 1, Reason: *audit.reason}); err != nil {
		return fmt.Errorf("notification %d is updated, but its audit line was not written: %w", res.ID, err)
	}
	if *asJSON {
		return printJSON(out, res)
	}
	if res.Certain {
		fmt.Fprintf(out, "notification %d of tenant %s updated: %s\n", res.ID, tenant, res.State)
		return nil
	}
	fmt.Fprintf(out, "notification %d of tenant %s is being sent right now: the change waits on the send, applied if "+
		"the send is handed back, too late if it delivers (not certain)\n", res.ID, tenant)
	return nil
}

// localDisambiguations lists --disambiguation's values.
const localDisambiguations = "compatible (the default: a skipped time moves forward by the gap, a repeated one " +
	"takes the earlier instant), earlier, later or reject"

// flagNames is a ledger validation error with each field named as the
// flag that gives it (extra, when not nil, names some otherwise).
func flagNames(err error, extra map[string]string) string {
	var v *ledger.ValidationError
	if !errors.As(err, &v) {
		return err.Error()
	}
	flags := map[string]string{"due_at": "--due", "expires_at": "--expires", "due_local": "--due-local",
		"expires_local": "--expires-local", "time_zone": "--time-zone", "disambiguation": "--disambiguation",
		"payload": "--payload", "recipient": "--recipient", "kind": "--kind", "ref_id": "--ref", "tenant_id": "--tenant",
		"scope": "--kind or --recipient", "windows": "--window"}
	for field, flag := range extra {
		flags[field] = flag
	}
	var parts []string
	for _, f := range v.Fields {
		name := f.Field
		base, _, _ := strings.Cut(name, "[")
		base, _, _ = strings.Cut(base, ".")
		if flag, ok := flags[base]; ok {
			name = flag + strings.TrimPrefix(name, base)
		}
		parts = append(parts, name+": "+f.Msg)
	}
	return strings.Join(parts, "; ")
}
