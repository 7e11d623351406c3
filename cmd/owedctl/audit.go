package main

import (
	"flag"
	"os"
	"os/user"
)

// Every owedctl command that writes (dlq redrive|delete, provider
// pause|resume, tenants pause|resume, tokens create|revoke, apps
// bind|unbind) names who acts and why, and the write lands in the
// operators' audit trail (owed_operator_audit) in the same transaction as
// the change: the write's own SQL function records it, or the command's
// transaction does, so a write without its line is never committed.

// auditFlags are a writing command's --operator and --reason.
type auditFlags struct {
	operator, actor, reason *string
}

// addAuditFlags registers --operator, --actor (its earlier name, kept for
// scripts) and --reason, described by reasonUsage.
func addAuditFlags(fs *flag.FlagSet, reasonUsage string) auditFlags {
	return addAuditFlagsAs(fs, "reason", reasonUsage)
}

// addAuditFlagsAs is addAuditFlags with the reason's flag named reasonFlag:
// dlq's is --why, since its --reason filters on the dead letters' reason
// (as the console's form does).
func addAuditFlagsAs(fs *flag.FlagSet, reasonFlag, reasonUsage string) auditFlags {
	return auditFlags{
		operator: fs.String("operator", "", "who acts, as the audit trail records it (default the OS user)"),
		actor:    fs.String("actor", "", "the earlier name of --operator"),
		reason:   fs.String(reasonFlag, "", reasonUsage),
	}
}

// operatorName is --operator, else --actor, else the OS user's name.
func (f auditFlags) operatorName() (string, error) {
	if *f.operator != "" {
		return *f.operator, nil
	}
	return osUserOr(*f.actor, "--operator")
}

// osUserOr is flagged, or the OS user's name when it is empty; flag names
// the flag that says who acts when the process has no user name.
func osUserOr(flagged, flag string) (string, error) {
	if flagged != "" {
		return flagged, nil
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username, nil
	}
	if name := os.Getenv("USER"); name != "" {
		return name, nil
	}
	return "", usageError{flag + ": this process has no OS user name; say who acts"}
}
