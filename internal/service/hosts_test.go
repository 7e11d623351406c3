package service

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/testdb"
)

// get asks addr for path with the Host header host.
func get(t *testing.T, addr, path, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The operator listener refuses a Host it does not know, which is what a
// DNS-rebinding page sends, and serves loopback, IP addresses (a probe's
// pod IP) and the names OWED_OPERATOR_HOSTS adds. The public listener is
// not its business.
func TestOperatorListenerChecksHost(t *testing.T) {
	db := testdb.New(t)
	p, err := Start("test", Basics{LogLevel: "info", DatabaseURL: db.AppURL, DBMaxConns: 2, ListenAddr: "127.0.0.1:0",
		Operations: Operations{MetricsAddr: "127.0.0.1:0", OperatorHosts: []string{"owed-sweeper.internal"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served") })
	done := make(chan error, 1)
	go func() { done <- p.Serve(ok, ok) }()
	defer func() {
		p.Shutdown()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	ops, public := p.Metrics.Addr().String(), p.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(ops)
	for _, c := range []struct {
		host string
		want int
	}{
		{"evil.example", http.StatusMisdirectedRequest},
		{"evil.example:" + port, http.StatusMisdirectedRequest},
		{"localhost.evil.example", http.StatusMisdirectedRequest},
		{"127.1:" + port, http.StatusMisdirectedRequest},
		{"localhost", http.StatusOK},
		{"LocalHost.:" + port, http.StatusOK},
		{"127.0.0.1:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"10.1.2.3:" + port, http.StatusOK},
		{"owed-sweeper.internal:" + port, http.StatusOK},
	} {
		for _, path := range []string{"/metrics", "/readyz", "/console/"} {
			code, body := get(t, ops, path, c.host)
			if code != c.want {
				t.Errorf("GET %s with Host %q answered %d, want %d", path, c.host, code, c.want)
			}
			if code == http.StatusMisdirectedRequest && (!strings.Contains(body, OperatorHostsVariable) || strings.Count(body, "\n") != 1) {
				t.Errorf("the refusal is not one line naming %s: %q", OperatorHostsVariable, body)
			}
		}
	}
	if code, _ := get(t, public, "/v1/", "evil.example"); code != http.StatusOK {
		t.Errorf("the public listener answered %d to Host evil.example, want 200: the check is the operator listener's", code)
	}
}

func TestOperatorHostsAreNames(t *testing.T) {
	for _, bad := range []string{"http://owed.example", "owed.example:8081", "owed example", "*.example"} {
		if _, err := NewHosts([]string{bad}, ""); err == nil || !strings.Contains(err.Error(), OperatorHostsVariable) || !strings.Contains(err.Error(), bad) {
			t.Errorf("NewHosts(%q) = %v, want an error naming %s and the value", bad, err, OperatorHostsVariable)
		}
	}
	h, err := NewHosts([]string{" ops.example ", ""}, "sweeper:8081")
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"ops.example", "OPS.example.", "sweeper:8081", "", "[fe80::1%25eth0]:8081"} {
		if !h.Allows(host) {
			t.Errorf("Allows(%q) = false", host)
		}
	}
}
