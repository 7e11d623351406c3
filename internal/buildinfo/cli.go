package buildinfo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"time"

	"github.com/owedhq/owed"
	"github.com/owedhq/owed/internal/config"
	"github.com/owedhq/owed/internal/service"
)

// HealthcheckTimeout bounds `<service> healthcheck`: shorter than the
// Dockerfile's and compose's HEALTHCHECK timeouts, so a hung listener is
// reported as unhealthy by the subcommand rather than killed by the engine.
const HealthcheckTimeout = 3 * time.Second

// Service is what a service binary offers on its command line besides
// running: --version, --help and healthcheck. Each one works before (and
// without) a valid configuration, except healthcheck, which needs the
// address the running process listens on.
type Service struct {
	// Name is the binary's name.
	Name string
	// Summary is the first line of --help.
	Summary string
	// Specs returns what the service's configuration loaders fill (pointers
	// to structs), holding their defaults: --help lists every OWED_*
	// variable they read, with its default and its meaning from the README's
	// settings tables.
	Specs func() []any
	// HealthzAddr is the listen address (host:port, host may be empty)
	// that serves the process's /healthz, from the same configuration.
	HealthzAddr func() (string, error)
}

// Run answers args (os.Args[1:]) when they ask for something other than
// running the service, and reports whether it did, with the exit status:
// 0 success, 1 the healthcheck failed, 2 bad usage.
func (s Service) Run(args []string, stdout, stderr io.Writer) (handled bool, code int) {
	if len(args) == 0 {
		return false, 0
	}
	switch args[0] {
	case "--version", "-version", "version":
		fmt.Fprintf(stdout, "%s %s\n", s.Name, Get())
		return true, 0
	case "--help", "-help", "-h", "help":
		fmt.Fprintf(stdout, "%s: %s\n\nusage:\n  %s               run the service, configured by the variables below\n"+
			"  %s healthcheck   GET this process's /healthz; exit 0 when it answers 200, else 1\n"+
			"  %s --version     print the version, revision and Go version\n\nvariables:\n",
			s.Name, s.Summary, s.Name, s.Name, s.Name)
		if err := variables(stdout, s.Name, s.Specs()); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", s.Name, err)
			return true, 1
		}
		return true, 0
	case "healthcheck":
		addr, err := s.HealthzAddr()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), HealthcheckTimeout)
			err = Healthcheck(ctx, addr)
			cancel()
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s healthcheck: %v\n", s.Name, err)
			return true, 1
		}
		return true, 0
	default:
		fmt.Fprintf(stderr, "%s: unknown argument %q: the service takes none (see %s --help)\n", s.Name, args[0], s.Name)
		return true, 2
	}
}

// variables writes the table of the variables the specs read, with their
// meanings from the README's section on the binary (its heading names
// `cmd/<name>`), else from another.
func variables(w io.Writer, name string, specs []any) error {
	keys, err := config.Keys("OWED", specs...)
	if err != nil {
		return err
	}
	return config.Usage(w, "OWED", config.Descriptions(owed.README, keys, ReadmeSection(name)), specs...)
}

// ReadmeSection is what the heading of the README's section on the binary
// name contains: its configuration table is the binary's own.
func ReadmeSection(name string) string { return "`cmd/" + name + "`" }

// Main runs the service's command line: the answer to args when they ask
// for one, else run.
func (s Service) Main(run func() error) {
	if handled, code := s.Run(os.Args[1:], os.Stdout, os.Stderr); handled {
		os.Exit(code)
	}
	service.Main(s.Name, run)
}

// Healthcheck GETs /healthz on addr, a listen address: an empty or
// unspecified host (":8081", "0.0.0.0:8081", "[::]:8081") is this host's
// loopback, where a process listening on every interface also answers.
func Healthcheck(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
