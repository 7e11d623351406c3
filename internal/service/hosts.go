package service

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// The operator listener (/metrics, /readyz, the console) answers only
// requests whose Host it knows, so a web page cannot read it through DNS
// rebinding: the attacker's name, re-pointed at the listener's address,
// arrives as Host: evil.example and is refused. Known are:
//
//   - any IP address literal (127.0.0.1:8081, [::1]:8081, the pod's IP the
//     kubelet's probes and Prometheus's pod scrapes send): a browser sends
//     an address as Host only when the page's own origin is that address,
//     which DNS rebinding cannot arrange;
//   - localhost, which browsers resolve to loopback themselves;
//   - the name in the listener's own bind address (OWED_METRICS_ADDR), if
//     it has one;
//   - the names in OWED_OPERATOR_HOSTS (a reverse proxy's, a Service's).
//
// A request without a Host (HTTP/1.0) names nothing and is served.

// OperatorHostsVariable configures the names the operator listener answers
// to besides IP addresses and localhost.
const OperatorHostsVariable = "OWED_OPERATOR_HOSTS"

// Hosts is the set of names a listener answers to besides IP addresses.
type Hosts struct{ names map[string]bool }

// NewHosts returns localhost, the host of the bind address addr when it is
// a name, and names, which must be host names without a scheme or a port.
func NewHosts(names []string, addr string) (Hosts, error) {
	h := Hosts{names: map[string]bool{"localhost": true}}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !validHostName(n) {
			return Hosts{}, fmt.Errorf("%s: %q is not a host name: give names such as owed-sweeper.internal, comma-separated, "+
				"without a scheme or a port (IP addresses and localhost are always accepted)", OperatorHostsVariable, n)
		}
		h.names[canonicalHost(n)] = true
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" && validHostName(host) {
		h.names[canonicalHost(host)] = true
	}
	return h, nil
}

// Allows says whether a request with Host host (a port may follow) is for
// this listener.
func (h Hosts) Allows(host string) bool {
	if host == "" {
		return true
	}
	if name, _, err := net.SplitHostPort(host); err == nil {
		host = name
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return h.names[canonicalHost(host)]
}

// Handler serves next only to requests for this listener and answers
// others 421 Misdirected Request, saying why in one line.
func (h Hosts) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Allows(r.Host) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusMisdirectedRequest)
			fmt.Fprintf(w, "misdirected request: this operator listener answers to IP addresses, localhost and %s, not to Host %q\n",
				OperatorHostsVariable, r.Host)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// canonicalHost folds case and drops a trailing dot ("LocalHost." is
// localhost).
func canonicalHost(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }

// validHostName accepts a DNS name: letters, digits, hyphens, underscores
// and dots.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
