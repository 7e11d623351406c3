package devstack

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/owedhq/owed/internal/service"
)

// What `owedctl dev` prints before the panel: the start-up line, the mode
// (fresh or resumed), and the first screen.

// progress adds one step to the start-up line ("starting: postgres
// migrated queue …"), so a slow step shows where it is.
func (s *Stack) progress(step string) {
	if !s.inProgress {
		io.WriteString(s.cfg.Out, "starting:")
		s.inProgress = true
	}
	io.WriteString(s.cfg.Out, " "+step)
}

// endProgress ends the start-up line, if one is open.
func (s *Stack) endProgress(result string) {
	if s.inProgress {
		fmt.Fprintf(s.cfg.Out, " — %s\n", result)
		s.inProgress = false
	}
}

// printMode says whether this run resumes or starts fresh, and how to get
// the other.
func (s *Stack) printMode() {
	rel := relPath(s.cfg.Dir)
	switch {
	case s.cfg.DatabaseURL != "":
		fmt.Fprintf(s.cfg.Out, "owed dev: using the database in OWED_DATABASE_URL (--fresh does not wipe it); files in %s\n"+
			"owed dev: its one role migrates, so it owns the tables: the services run with %s=true and log it (development only);\n"+
			"owed dev: they also run with %s=true, logging and showing on /readyz whether a crash could lose commits there\n",
			rel, service.InsecureRoleVariable, service.AsyncCommitVariable)
	case s.resumed:
		fmt.Fprintf(s.cfg.Out, "owed dev: resuming the ledger kept in %s from the last run (--fresh starts over)\n", rel)
	default:
		fmt.Fprintf(s.cfg.Out, "owed dev: fresh ledger in %s (the next run resumes it; --fresh starts over)\n", rel)
	}
}

// psqlLine is the first screen's psql command. The application role in
// OWED_DATABASE_URL sees a tenant's rows only where owed.tenant_id names
// the tenant (the policies of internal/ledger/sql/notifications.sql), so a
// plain psql would count no notification: PGOPTIONS names the dev tenant
// for this one session. The services never start so (service.CheckRole).
const psqlLine = `PGOPTIONS='-c owed.tenant_id=` + Tenant + `' psql "$OWED_DATABASE_URL"`

// printIntro prints the first screen: what runs where, the secrets of this
// run, and the commands to look inside.
func (s *Stack) printIntro() {
	ep, cfg := s.ep, s.cfg
	w := &strings.Builder{}
	rel := relPath(cfg.Dir)
	fmt.Fprintf(w, "\n  scheduling API  %s/v1          (docs/api.md)\n", ep.API)
	fmt.Fprintf(w, "  sweeper         %s/metrics     /readyz   (the operator listener)\n", ep.Metrics)
	fmt.Fprintf(w, "  console         %s/console/    log in with any name and the token %s\n", ep.Metrics, ep.ConsoleToken)
	w.WriteString(s.queueLine())
	fmt.Fprintf(w, "  sandbox         %s/stats       %s/sends   (%s, refuses recipients matching %q)\n",
		ep.SandboxURL, ep.SandboxURL, cfg.Rate, PermanentRecipient)
	for i, u := range ep.WorkerURLs {
		fmt.Fprintf(w, "  worker-%d        %s/metrics\n", i+1, u)
	}
	if s.cluster != nil {
		fmt.Fprintf(w, "  postgres        %s\n", ep.AppURL)
	}
	fmt.Fprintf(w, "  scheduler       /cron/sweep every %s, /cron/materialise every %s\n", cfg.Tick, cfg.Tick*MaterialiseEveryTicks)
	fmt.Fprintf(w, "  logs            %s/logs/\n", rel)
	if !cfg.NoSeed {
		fmt.Fprintf(w, "\n  seeded for tenant %q: %d follow-ups owed since before the start, then %d a day; shipment exceptions\n"+
			"  fanned out to 4 recipients; %d calendar items in owed_items; %d rows already expired; %d to %q recipients.\n"+
			"  The backlog is sent oldest first at the provider's pace; its catch-up shows in p95 lag until it is drained.\n",
			Tenant, backlogFollowUps, followUpsPerDay, len(calendarItems), expiredRows, bouncedRows, PermanentRecipient)
	}
	secrets := "tenant token, service token, cron secret, console token"
	if ep.QueueToken != "" {
		secrets = "tenant token, service token, queue token, cron secret, console token"
	}
	fmt.Fprintf(w, "\n  this run's secrets and queue settings are in %s/env (%s). In another shell:\n", rel, secrets)
	fmt.Fprintf(w, "    . %s/env\n", rel)
	fmt.Fprintf(w, "    bin/owedctl dlq list                       # dead letters (the %q rows land here)\n", PermanentRecipient)
	fmt.Fprintf(w, "    bin/owedctl queue stats\n")
	fmt.Fprintf(w, "    curl -s $OWED_METRICS/metrics | grep '^owed_'\n")
	fmt.Fprintf(w, "    curl -s -H \"Authorization: Bearer $TOKEN\" \"$OWED/v1/notifications?limit=5\"\n")
	fmt.Fprintf(w, "    bin/owedctl tokens list --tenant %s          # as the token administrator, from the env file\n", Tenant)
	fmt.Fprintf(w, "    %s\n", psqlLine)
	fmt.Fprintf(w, "      (row-level security: the application role sees the rows of the tenant its session names, here %s)\n", Tenant)
	fmt.Fprintf(w, "\nCtrl-C stops everything.\n\n")
	io.WriteString(s.cfg.Out, w.String())
}

// relPath shows dir relative to the current directory when it lies below
// it, so the commands printed can be pasted as they are.
func relPath(dir string) string {
	wd, err := os.Getwd()
	if err != nil {
		return dir
	}
	rel, err := filepath.Rel(wd, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return dir
	}
	return rel
}
