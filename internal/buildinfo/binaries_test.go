package buildinfo_test

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/owedhq/owed"
	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/config"
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

// helpDefaults reads the DEFAULT column of a service's --help table.
func helpDefaults(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	head := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "VARIABLE ") })
	if head < 0 {
		t.Fatalf("--help has no VARIABLE table:\n%s", out)
	}
	from, to := strings.Index(lines[head], "DEFAULT"), strings.Index(lines[head], "MEANING")
	got := map[string]string{}
	for _, l := range lines[head+1:] {
		if strings.HasPrefix(l, "OWED_") && len(l) > to {
			got[strings.Fields(l)[0]] = strings.TrimSpace(l[from:to])
		}
	}
	return got
}

// readmeDefaults is the README's default cell of each variable, for the
// service name: its own section's row first, else another's (the worker's
// table says "as above" for the queue's variables). A row naming several
// variables gives each its own part of the cell when it has one part per
// variable (`OWED`, `owed.deliveries`, `owed-workers`), else the whole cell.
func readmeDefaults(name string, known []string) map[string]string {
	out := map[string]string{}
	for _, own := range []bool{true, false} {
		for _, s := range config.Settings(owed.README, known) {
			if own != strings.Contains(s.Section, buildinfo.ReadmeSection(name)) {
				continue
			}
			parts := strings.Split(s.Default, ", ")
			for i, k := range s.Keys {
				if _, done := out[k]; done {
					continue
				}
				if len(parts) == len(s.Keys) {
					out[k] = parts[i]
				} else {
					out[k] = s.Default
				}
			}
		}
	}
	return out
}

var readmeLiteral = regexp.MustCompile("^`([^`]+)`$")

// sameDefault compares a README literal with a --help default: durations
// (and lists of them) by value, 60s being 1m0s; anything else as text.
func sameDefault(readme, help string) bool {
	r, h := strings.Split(readme, ","), strings.Split(help, ",")
	if len(r) != len(h) {
		return false
	}
	for i := range r {
		rd, rerr := time.ParseDuration(r[i])
		hd, herr := time.ParseDuration(h[i])
		if rerr == nil && herr == nil {
			if rd != hd {
				return false
			}
		} else if r[i] != h[i] {
			return false
		}
	}
	return true
}

// TestHelpDefaultsAgreeWithTheREADME: `sweeper --help` and `worker --help`
// show the default the code applies, which is the one the README gives.
// "-" (no default) is only for a variable the README says is empty or off;
// where the README gives one literal, --help shows that value.
func TestHelpDefaultsAgreeWithTheREADME(t *testing.T) {
	t.Parallel()
	dir := buildServices(t)
	for _, name := range []string{"sweeper", "worker"} {
		code, out, errOut := run(t, filepath.Join(dir, name), nil, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d\n%s", name, code, errOut)
		}
		help := helpDefaults(t, out)
		known := make([]string, 0, len(help))
		for k := range help {
			known = append(known, k)
		}
		readme := readmeDefaults(name, known)
		for _, k := range slices.Sorted(maps.Keys(help)) {
			h, r := help[k], readme[k]
			switch lit := readmeLiteral.FindStringSubmatch(r); {
			case r == "":
				t.Errorf("%s --help lists %s, which the README's tables lack", name, k)
			case h == "-" && !strings.HasPrefix(r, "—") && !strings.HasPrefix(r, "empty") && !strings.HasPrefix(r, "off"):
				t.Errorf("%s --help shows no default for %s; the README says %s", name, k, r)
			case lit != nil && h != "-" && !sameDefault(lit[1], h):
				t.Errorf("%s --help shows %s's default as %q; the README says %s", name, k, h, r)
			}
		}
	}
}
