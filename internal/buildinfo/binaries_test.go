package buildinfo_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// built holds the binaries buildServices made, once per test binary.
var built struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildServices builds the sweeper, the worker and owedctl as the release
// does, with the version and revision set by -ldflags -X, once.
func buildServices(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "owed-buildinfo-"); built.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags",
			"-X github.com/owedhq/owed/internal/buildinfo.version=v9.8.7 -X github.com/owedhq/owed/internal/buildinfo.revision=feedc0de",
			"-o", built.dir+string(filepath.Separator), "./cmd/sweeper", "./cmd/worker", "./cmd/owedctl")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

// run runs a built binary with only env set and returns its exit status and
// output.
func run(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return code, stdout.String(), stderr.String()
}

func TestServiceBinariesCommandLine(t *testing.T) {
	t.Parallel()
	dir := buildServices(t)
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer healthy.Close()
	_, port, _ := net.SplitHostPort(healthy.Listener.Addr().String())
	const secret = "do-not-print-this-cron-secret"
	// A configuration that would stop either service at start-up: --help
	// must not care, and must not repeat the secret.
	broken := []string{"OWED_SWEEP_BATCH=many", "OWED_WORKER_CONCURRENCY=lots", "OWED_CRON_SECRET=" + secret,
		"OWED_WEBHOOK_SECRET=" + secret, "OWED_DATABASE_URL=postgres://u:" + secret + "@db/owed"}
	for _, c := range []struct {
		name    string
		mustSay []string
		// healthEnv points the binary's healthcheck at the test listener.
		healthEnv string
	}{
		{"sweeper", []string{"OWED_SWEEP_BATCH", "OWED_LOOKAHEAD", "OWED_RECEIPT_BASE_URL", "OWED_QUEUE_URL", "OWED_NATS_URL",
			"OWED_SQS_QUEUE_URL", "OWED_METRICS_ADDR", "OWED_CRON_SECRET"}, "OWED_METRICS_ADDR=127.0.0.1:" + port},
		{"worker", []string{"OWED_WORKER_CONCURRENCY", "OWED_WEBHOOK_URL", "OWED_RETRY_SCHEDULE", "OWED_SENDGRID_FROM_NAME",
			"OWED_QUEUE_URL", "OWED_NATS_URL", "OWED_SQS_QUEUE_URL", "OWED_METRICS_ADDR"}, "OWED_LISTEN_ADDR=:" + port},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := filepath.Join(dir, c.name)
			code, out, _ := run(t, bin, nil, "--version")
			if code != 0 || !strings.HasPrefix(out, c.name+" v9.8.7 (revision feedc0de, go") {
				t.Errorf("%s --version: exit %d, %q; want the -ldflags version and revision", c.name, code, out)
			}
			code, out, errOut := run(t, bin, broken, "--help")
			if code != 0 {
				t.Fatalf("%s --help under a broken configuration: exit %d\n%s", c.name, code, errOut)
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("%s --help printed a secret set in its environment", c.name)
			}
			rows := map[string]string{}
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "OWED_") {
					if len(f) < 4 {
						t.Errorf("%s --help: %q has no default or meaning", c.name, line)
					}
					rows[f[0]] = line
				}
			}
			for _, k := range c.mustSay {
				if rows[k] == "" {
					t.Errorf("%s --help does not list %s:\n%s", c.name, k, out)
				}
			}
			if len(rows) < 30 {
				t.Errorf("%s --help lists %d variables: the walk over its configuration is missing some", c.name, len(rows))
			}
			if code, _, errOut := run(t, bin, []string{c.healthEnv}, "healthcheck"); code != 0 {
				t.Errorf("%s healthcheck against a healthy /healthz: exit %d\n%s", c.name, code, errOut)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := ln.Addr().String()
			ln.Close()
			down := strings.SplitN(c.healthEnv, "=", 2)[0] + "=" + closed
			if code, _, _ := run(t, bin, []string{down}, "healthcheck"); code != 1 {
				t.Errorf("%s healthcheck with nothing listening: exit %d, want 1", c.name, code)
			}
		})
	}
}

func TestOwedctlVersionAndHealthcheck(t *testing.T) {
	t.Parallel()
	dir := buildServices(t)
	bin := filepath.Join(dir, "owedctl")
	if code, out, _ := run(t, bin, nil, "version"); code != 0 || !strings.HasPrefix(out, "owedctl v9.8.7 (revision feedc0de, go") {
		t.Errorf("owedctl version: exit %d, %q; want the -ldflags version and revision", code, out)
	}
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer healthy.Close()
	_, port, _ := net.SplitHostPort(healthy.Listener.Addr().String())
	if code, _, errOut := run(t, bin, nil, "healthcheck", ":"+port); code != 0 {
		t.Errorf("owedctl healthcheck on a healthy listener: exit %d\n%s", code, errOut)
	}
	if code, _, _ := run(t, bin, nil, "healthcheck"); code != 2 {
		t.Errorf("owedctl healthcheck without an address: exit %d, want 2 (usage)", code)
	}
}
