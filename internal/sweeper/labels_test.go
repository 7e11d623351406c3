package sweeper

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/owedhq/owed/internal/api"
	"github.com/owedhq/owed/internal/buildinfo"
	"github.com/owedhq/owed/internal/console"
	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/sweep"
	"github.com/owedhq/owed/internal/worker"
)

// recorder is a registry that remembers what was registered on it, so the
// test reads every series' labels from its description, also of a vector
// that has no series yet.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// descLabels reads a description's label names: its const labels and its
// variable labels.
var descLabels = regexp.MustCompile(`fqName: "([^"]+)".*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)

// TestMetricLabelsAreTheDocumentedOnes: every owed metric the sweeper and
// the workers export uses label names from docs/metrics.md's table of
// labels, one name per idea (the review found result, outcome, cause and
// reason saying the same thing), and every owed metric is in its table of
// metrics with exactly the labels it has.
func TestMetricLabelsAreTheDocumentedOnes(t *testing.T) {
	rec := &recorder{Registry: prometheus.NewRegistry()}
	sweep.NewMetrics(rec)
	worker.NewMetrics(rec)
	api.New(api.Options{Ledger: ledger.New(nil, nil), Metrics: rec})
	console.New(console.Options{Metrics: rec, Token: strings.Repeat("t", 16)})
	rec.MustRegister(NewBacklogCollector(nil), NewQueueCollector(nil), newQueueWatch(nil, nil),
		api.NewLimiter(api.Limits{}, nil), buildinfo.Collector(), collectors.NewDBStatsCollector(nil, "runtime"))
	srv := &Server{reg: prometheus.NewRegistry()}
	NewDueListener(srv)

	got := map[string][]string{}
	add := func(name string, labels []string) {
		if strings.HasPrefix(name, "owed_") || strings.HasPrefix(name, "go_sql_") {
			sort.Strings(labels)
			got[name] = labels
		}
	}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range rec.collectors {
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descLabels.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			var labels []string
			for _, kv := range strings.Split(m[2], ",") {
				if name, _, ok := strings.Cut(kv, "="); ok {
					labels = append(labels, name)
				}
			}
			if m[3] != "" {
				labels = append(labels, strings.Split(m[3], ",")...)
			}
			add(m[1], labels)
		}
		ch = make(chan *prometheus.Desc, 100)
	}
	families, err := srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		var labels []string
		if len(f.GetMetric()) > 0 {
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		add(f.GetName(), labels)
	}

	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	section := ""
	listed := map[string][]string{}
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\|([^|]*)\\|")
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = line
		}
		m := row.FindStringSubmatch(line)
		switch {
		case m == nil:
		case strings.Contains(section, "Labels"):
			documented[m[1]] = true
		case strings.Contains(section, "Metrics"):
			var labels []string
			for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[2], -1) {
				labels = append(labels, l[1])
			}
			sort.Strings(labels)
			listed[m[1]] = labels
		}
	}
	if len(documented) == 0 || len(listed) == 0 {
		t.Fatalf("docs/metrics.md has no table of labels or of metrics")
	}
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, l := range got[n] {
			if !documented[l] {
				t.Errorf("%s has the label %q, which docs/metrics.md's table of labels does not name: use the documented name for the idea, or document a new one", n, l)
			}
		}
		want, ok := listed[n]
		switch {
		case !ok:
			t.Errorf("%s is not in docs/metrics.md's table of metrics; its labels: %v", n, got[n])
		case !slices.Equal(want, got[n]):
			t.Errorf("docs/metrics.md lists %s with labels %v; it has %v", n, want, got[n])
		}
	}
	for n := range listed {
		if _, ok := got[n]; !ok {
			t.Errorf("docs/metrics.md lists %s, which nothing exports", n)
		}
	}
}
