package devstack

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/owedhq/owed/internal/queue/backends"
)

// Endpoints are what a user or a test needs to reach the running stack. The
// secrets are made for this run only.
type Endpoints struct {
	API, QueueURL, SandboxURL string
	// Metrics is the first sweeper's operator listener (/metrics, /readyz).
	Metrics string
	// SweeperURLs lists every sweeper, API first.
	SweeperURLs            []string
	WorkerURLs             []string
	QueueToken, CronSecret string
	// QueueFaultToken opens the emulator's /admin/faults.
	QueueFaultToken           string
	ServiceToken, TenantToken string
	// ConsoleToken logs in to the operator console at Metrics/console/.
	ConsoleToken string
	// WebhookSecret signs the workers' sends to the sandbox.
	WebhookSecret string
	// AppURL is the application role's database URL.
	AppURL string
	// OperatorURL is on-call's (owed_oncall, a member of owed_operator):
	// the console's pool, and owedctl's tenants and provider pause|resume.
	OperatorURL string
	// AdminURL is the token administrator's (owed_admin): owedctl tokens
	// and apps.
	AdminURL string
}

// secret returns n random bytes, hex-encoded.
func secret(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// webhookSecret returns a Standard Webhooks secret for the sandbox and the
// workers that sign for it.
func webhookSecret() string {
	b := make([]byte, 24)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// writeEnvFile writes Dir/env, which a second shell sources to use owedctl
// and curl against this run. It holds this run's secrets, so only the
// owner may read it.
func (s *Stack) writeEnvFile() error {
	ep := s.ep
	var queueVars strings.Builder
	if s.cfg.Queue == backends.SQS {
		queueVars.WriteString("# The AWS_ variables are placeholders the local SQS server accepts; they replace this shell's own.\n")
	}
	for _, k := range slices.Sorted(maps.Keys(s.queueVars)) {
		fmt.Fprintf(&queueVars, "export %s='%s'\n", k, s.queueVars[k])
	}
	// OWED_DATABASE_URL is the application role's, as the services and
	// most of owedctl use it; owedctl tokens reads the token
	// administrator's from OWED_TOKEN_ADMIN_DATABASE_URL first.
	body := fmt.Sprintf("# owedctl dev, started %s. Source it: . %s\n"+
		"%sexport OWED_DATABASE_URL='%s'\nexport OWED_OPERATOR_DATABASE_URL='%s'\nexport OWED_TOKEN_ADMIN_DATABASE_URL='%s'\n"+
		"export OWED=%s\nexport OWED_METRICS=%s\nexport TOKEN=%s\nexport OWED_API_TOKEN=%s\nexport OWED_CRON_SECRET=%s\nexport OWED_CONSOLE_TOKEN=%s\n",
		s.started.Format(time.RFC3339), s.envPath(), queueVars.String(), ep.AppURL, ep.OperatorURL, ep.AdminURL,
		ep.API, ep.Metrics, ep.TenantToken, ep.ServiceToken, ep.CronSecret, ep.ConsoleToken)
	if err := os.WriteFile(s.envPath(), []byte(body), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", s.envPath(), err)
	}
	return nil
}

func (s *Stack) envPath() string { return filepath.Join(s.cfg.Dir, "env") }
