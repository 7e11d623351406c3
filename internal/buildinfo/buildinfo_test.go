package buildinfo

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	stamp := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	const rev = "0068b7f1d2c3b4a5968778695a4b3c2d1e0f1a2b"
	for _, c := range []struct {
		name, ldVersion, ldRevision string
		bi                          *debug.BuildInfo
		want                        Info
	}{
		{"release build: the linker flags win", "v1.4.0", "abc123", stamp(rev, "true"), Info{"v1.4.0", "abc123", runtime.Version()}},
		{"go build in a clean checkout", "", "", stamp(rev, "false"), Info{"0068b7f1d2c3", rev, runtime.Version()}},
		{"go build with local changes", "", "", stamp(rev, "true"), Info{"0068b7f1d2c3-dirty", rev, runtime.Version()}},
		{"version flag only", "v1.4.0", "", stamp(rev, "false"), Info{"v1.4.0", rev, runtime.Version()}},
		{"no VCS stamp (go run, -buildvcs=false)", "", "", &debug.BuildInfo{}, Info{"devel", "unknown", runtime.Version()}},
		{"no build info at all", "", "", nil, Info{"devel", "unknown", runtime.Version()}},
	} {
		if got := resolve(c.ldVersion, c.ldRevision, c.bi); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestCollectorExposesBuildInfo(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	i := Get()
	want := `owed_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1`
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), want+"\n") {
		t.Fatalf("the exposition lacks %s:\n%s", want, rec.Body.String())
	}
}

// healthz serves /healthz with status and returns its listen address in
// the form a service is configured with (":port", no host).
func healthz(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ":" + port
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := healthz(t, http.StatusOK)
	for _, addr := range []string{ok, "0.0.0.0" + ok, "127.0.0.1" + ok} {
		if err := Healthcheck(ctx, addr); err != nil {
			t.Errorf("Healthcheck(%q) on a healthy listener: %v", addr, err)
		}
	}
	if err := Healthcheck(ctx, healthz(t, http.StatusServiceUnavailable)); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Healthcheck on a 503 /healthz: got %v, want an error naming 503", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if err := Healthcheck(ctx, closed); err == nil {
		t.Error("Healthcheck on a closed port succeeded")
	}
	if err := Healthcheck(ctx, "no-port"); err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Errorf("Healthcheck on a malformed address: got %v, want an error naming it", err)
	}
}

func TestServiceRun(t *testing.T) {
	t.Parallel()
	healthy, sick := healthz(t, http.StatusOK), healthz(t, http.StatusInternalServerError)
	service := func(addr string) Service {
		return Service{Name: "svc", Summary: "a test service",
			Specs: func() []any {
				return []any{&struct {
					X string `envconfig:"TEST_X"`
				}{X: "the-default"}}
			},
			HealthzAddr: func() (string, error) { return addr, nil }}
	}
	for _, c := range []struct {
		args    []string
		addr    string
		handled bool
		code    int
		stdout  string
	}{
		{nil, healthy, false, 0, ""},
		{[]string{"--version"}, healthy, true, 0, "svc " + Get().String() + "\n"},
		{[]string{"--help"}, healthy, true, 0, "OWED_TEST_X"},
		{[]string{"--help"}, healthy, true, 0, "the-default"},
		{[]string{"-h"}, healthy, true, 0, "svc healthcheck"},
		{[]string{"healthcheck"}, healthy, true, 0, ""},
		{[]string{"healthcheck"}, sick, true, 1, ""},
		{[]string{"--frobnicate"}, healthy, true, 2, ""},
	} {
		var stdout, stderr bytes.Buffer
		handled, code := service(c.addr).Run(c.args, &stdout, &stderr)
		if handled != c.handled || code != c.code || !strings.Contains(stdout.String(), c.stdout) {
			t.Errorf("Run(%q): handled=%v code=%d stdout=%q stderr=%q; want handled=%v code=%d stdout containing %q",
				c.args, handled, code, stdout.String(), stderr.String(), c.handled, c.code, c.stdout)
		}
	}
}
