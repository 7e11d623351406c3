package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/yaml"

	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/materialise"
	"github.com/owedhq/owed/internal/provider/providers"
	"github.com/owedhq/owed/internal/queue"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/jetstream"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/queue/sqs"
	"github.com/owedhq/owed/internal/service"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/sweeper"
	"github.com/owedhq/owed/internal/testenv"
	"github.com/owedhq/owed/internal/worker"
)

// flagCodeVariables are variables read by owedctl's own code rather than
// by a config struct this test can import: cmd/owedctl is package main.
var flagCodeVariables = []string{
	// cmd/owedctl/migrate_cmd.go, tokens_cmd.go, notifications_cmd.go,
	// stats_cmd.go: the database owedctl connects to.
	"OWED_DATABASE_URL",
	// cmd/owedctl/flags.go: the logins of on-call's commands (tenants,
	// provider pause|resume) and of tokens and apps, read before
	// OWED_DATABASE_URL.
	"OWED_OPERATOR_DATABASE_URL", "OWED_TOKEN_ADMIN_DATABASE_URL",
	// cmd/owedctl/provider_cmd.go, sandboxEnv (envconfig prefix
	// OWED_SANDBOX): the sandbox provider.
	"OWED_SANDBOX_ADDR", "OWED_SANDBOX_RATE", "OWED_SANDBOX_BURST", "OWED_SANDBOX_SECRET",
	"OWED_SANDBOX_ERROR_RATE", "OWED_SANDBOX_TIMEOUT_RATE", "OWED_SANDBOX_TIMEOUT_SECONDS",
	"OWED_SANDBOX_TIMEOUT_MODE", "OWED_SANDBOX_STORM_SECONDS", "OWED_SANDBOX_STORM_RETRY_AFTER_SECONDS",
	"OWED_SANDBOX_PERMANENT_RECIPIENT",
}

// declaredVariables returns every variable the services read. Each struct is
// listed the way its LoadConfig processes it (config.Process("OWED", …)),
// and envconfig itself names the keys, so nested prefixes (providers'
// `envconfig:"WEBHOOK"` → OWED_WEBHOOK_URL) and embedded structs (the
// emulator's Faults) follow the library's rules rather than a copy of them.
func declaredVariables(t *testing.T) map[string]bool {
	t.Helper()
	specs := []any{
		&sweeper.Config{}, &materialise.Config{}, // sweeper.LoadConfig
		&backends.Config{}, &rest.Config{}, &sqs.Config{}, &jetstream.Config{}, // backends.LoadConfig
		&worker.Config{}, &providers.Config{}, // worker.LoadConfig, with backends.LoadConfig
		&emulator.Config{},    // owedctl queue serve
		&service.Operations{}, // service.LoadOperations, every service's start-up
	}
	vars := map[string]bool{}
	for _, spec := range specs {
		var buf bytes.Buffer
		if err := envconfig.Usagef("OWED", spec, &buf, "{{range .}}{{.Key}}\n{{end}}"); err != nil {
			t.Fatalf("list variables of %T: %v", spec, err)
		}
		for _, k := range strings.Fields(buf.String()) {
			vars[k] = true
		}
	}
	for _, k := range flagCodeVariables {
		vars[k] = true
	}
	return vars
}

var owedName = regexp.MustCompile(`^OWED_[A-Z0-9_]+$`)

// yamlDocuments returns every YAML document under deploy/, parsed, with
// where it came from.
func yamlDocuments(t *testing.T) map[string]any {
	t.Helper()
	docs := map[string]any{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yml" && filepath.Ext(path) != ".yaml") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, part := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			var doc any
			if err := yaml.Unmarshal([]byte(part), &doc); err != nil {
				return fmt.Errorf("%s document %d: %w", path, i+1, err)
			}
			if doc != nil {
				docs[fmt.Sprintf("%s#%d", path, i+1)] = doc
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no YAML found under deploy/")
	}
	return docs
}

// setVariables walks a parsed document and collects the OWED_* names it sets:
// keys of compose `environment:` maps and ConfigMap data, `name:` of
// Kubernetes env entries, and "NAME=value" list items.
func setVariables(node any, found map[string]bool) {
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			if owedName.MatchString(k) {
				found[k] = true
			}
			if s, ok := v.(string); ok && k == "name" && owedName.MatchString(s) {
				found[s] = true
			}
			setVariables(v, found)
		}
	case []any:
		for _, v := range n {
			if s, ok := v.(string); ok {
				if name, _, ok := strings.Cut(s, "="); ok && owedName.MatchString(name) {
					found[name] = true
				}
			}
			setVariables(v, found)
		}
	}
}

func TestManifestsSetOnlyDeclaredVariables(t *testing.T) {
	t.Parallel()
	declared := declaredVariables(t)
	for _, want := range []string{"OWED_QUEUE_URL", "OWED_WEBHOOK_SECRET", "OWED_QUEUE_FAULT_LATENCY_MS", "OWED_LOOKAHEAD"} {
		if !declared[want] {
			t.Fatalf("the declared set lacks %s: the reflection over the config structs is broken", want)
		}
	}
	docs := yamlDocuments(t)
	names := make([]string, 0, len(docs))
	for n := range docs {
		names = append(names, n)
	}
	sort.Strings(names)
	total := 0
	for _, name := range names {
		found := map[string]bool{}
		setVariables(docs[name], found)
		total += len(found)
		for v := range found {
			if !declared[v] {
				t.Errorf("%s sets %s, which no service reads: fix the name, or declare it in the config struct (or in flagCodeVariables when owedctl's flag code reads it)", name, v)
			}
		}
	}
	if total < 10 {
		t.Fatalf("found only %d OWED_* variables in the manifests: the YAML walk is missing them", total)
	}
}

// TestDockerfileBuildCommandBuilds runs the Dockerfile's go build line, with
// its output folder swapped for a temporary one and VERSION and REVISION
// set, twice: in the repository and in a copy of the build context as
// Dockerfile.dockerignore leaves it, somewhere else. A package move, a cgo
// dependency or a file the context leaves out breaks this test rather than
// the image build; the two builds must be byte for byte the same (the
// reproducible build deploy/README.md documents), and carry the version.
func TestDockerfileBuildCommandBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries twice")
	}
	t.Parallel()
	context := t.TempDir()
	copyBuildContext(t, "..", context)
	var sums []map[string][32]byte
	for _, dir := range []string{"..", context} {
		args := dockerfileBuildArgs(t)
		out := t.TempDir() + string(filepath.Separator)
		for i, a := range args {
			if a == "-o" && i+1 < len(args) {
				args[i+1] = out
			}
			args[i] = strings.NewReplacer("${VERSION}", "v9.8.7", "${REVISION}", "feedc0de").Replace(args[i])
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("in %s: go %s: %v\n%s", dir, strings.Join(args, " "), err, b)
		}
		sum := map[string][32]byte{}
		for _, bin := range []string{"sweeper", "worker", "owedctl"} {
			b, err := os.ReadFile(filepath.Join(out, bin))
			if err != nil {
				t.Fatalf("the Dockerfile's build did not produce %s, which a final stage copies: %v", bin, err)
			}
			sum[bin] = sha256.Sum256(b)
			if bytes.Contains(b, []byte(dir)) && dir != ".." {
				t.Errorf("%s contains the build folder %s: -trimpath is missing", bin, dir)
			}
		}
		if v, err := exec.Command(filepath.Join(out, "sweeper"), "--version").Output(); err != nil || !strings.HasPrefix(string(v), "sweeper v9.8.7 (revision feedc0de") {
			t.Errorf("the built sweeper --version says %q (%v), want the VERSION and REVISION build arguments", v, err)
		}
		sums = append(sums, sum)
	}
	for bin, sum := range sums[0] {
		if sums[1][bin] != sum {
			t.Errorf("%s differs between two builds of the same source in different folders: the build is not reproducible", bin)
		}
	}
}

// copyBuildContext copies the repository at src to dst as the image build
// sees it: without what Dockerfile.dockerignore excludes (its entries are
// top-level names and **/*_test.go).
func copyBuildContext(t *testing.T, src, dst string) {
	t.Helper()
	raw, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var top []string
	testFiles := false
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "**/*_test.go":
			testFiles = true
		case !strings.ContainsAny(strings.TrimPrefix(line, "/"), "/*"):
			top = append(top, strings.TrimPrefix(line, "/"))
		default:
			t.Fatalf("Dockerfile.dockerignore entry %q: copyBuildContext knows only top-level names and **/*_test.go", line)
		}
	}
	err = filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if first, _, _ := strings.Cut(rel, string(filepath.Separator)); slices.Contains(top, first) ||
			(d.Type().IsRegular() && testFiles && strings.HasSuffix(rel, "_test.go")) || strings.HasPrefix(rel, ".") && rel != "." {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dockerfileBuildArgs returns the arguments after "go" on the RUN line that
// follows the "# go-build:" marker, checking it builds with CGO_ENABLED=0:
// the final stages are scratch, where a cgo binary would not start.
func dockerfileBuildArgs(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	marked := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "# go-build:" {
			marked = true
			continue
		}
		if !marked {
			continue
		}
		words := shellWords(strings.TrimPrefix(line, "RUN "))
		if len(words) < 3 || words[0] != "CGO_ENABLED=0" || words[1] != "go" || words[2] != "build" {
			t.Fatalf("the line after # go-build: in deploy/Dockerfile must be `RUN CGO_ENABLED=0 go build …`, got %q", line)
		}
		return words[2:]
	}
	t.Fatal("deploy/Dockerfile has no `# go-build:` marker line before its go build RUN line")
	return nil
}

// shellWords splits a command line on blanks, honouring double and single
// quotes, which is all the Dockerfile's build line uses.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestMetricsPassPromtoolCheck renders the real metric constructors'
// exposition and runs `promtool check metrics` over it, so a name or help
// text Prometheus lints against fails here rather than on a dashboard.
func TestMetricsPassPromtoolCheck(t *testing.T) {
	t.Parallel()
	promtool := testenv.LookPath(t, "promtool", testenv.InstallPromtool)
	reg := prometheus.NewRegistry()
	sweep.NewMetrics(reg).Observe(sweep.Result{Complete: true, Leased: 3, Published: 3, DurationMS: 41}, time.Now())
	worker.NewMetrics(reg)
	reg.MustRegister(buildinfo.Collector())
	reg.MustRegister(sweeper.NewQueueCollector(func(context.Context) (queue.Stats, error) {
		return queue.Stats{Visible: 2, InFlight: 1, InFlightLimit: 20000, DeadLetterDepth: 4, OldestAge: 12500 * time.Millisecond}, nil
	}))

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, series := range []string{"owed_build_info{", "owed_sweep_runs_total", "owed_delivery_lag_seconds_bucket", "owed_queue_dead_letter_depth 4", "owed_queue_in_flight_limit 20000"} {
		if !strings.Contains(body, series) {
			t.Fatalf("the exposition lacks %s:\n%s", series, body)
		}
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
