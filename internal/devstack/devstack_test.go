package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/devstack/devstacktest"
	"github.com/owedhq/owed/internal/launch"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/queue/backends"
	"github.com/owedhq/owed/internal/testenv"
)

// TestStack runs the real system on each queue backend for about half a
// minute with a fast tick and a generous provider rate, and checks the
// invariants a user watches on the panel: rows are delivered, expired rows
// never reach the provider, refused rows end failed and dead-lettered in
// the backend's dead letters, nothing is sent twice, and nothing is left
// running afterwards.
func TestStack(t *testing.T) {
	for _, q := range backends.Names {
		t.Run(q, func(t *testing.T) { testStack(t, q) })
	}
}

func testStack(t *testing.T, q string) {
	if q == backends.SQS {
		if _, err := FindSQSServer(); err != nil {
			testenv.Missing(t, "the local SQS server", testenv.InstallSQS)
		}
	}
	tmp, bin, ports := setup(t)
	out := &devstacktest.Buffer{}
	s, err := New(Config{Dir: filepath.Join(tmp, "dev"), BinDir: bin, Queue: q, Tick: 2 * time.Second, Rate: "600/m",
		SweeperPort: ports[0], QueuePort: ports[1], SandboxPort: ports[2], WorkerPorts: ports[3:], Out: out})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("owedctl dev output:\n%s", out.String())
			for _, name := range []string{"queue", "sweeper", "worker-1", "scheduler"} {
				t.Logf("end of %s.log:\n%s", name, launch.Tail(filepath.Join(s.logDir(), name+".log"), 15))
			}
		}
	})
	if err := s.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	seeded := s.Seeded()
	if len(seeded.Expired) != expiredRows || len(seeded.Bounced) != bouncedRows {
		t.Fatalf("seeded %d expired and %d bounced rows, want %d and %d", len(seeded.Expired), len(seeded.Bounced), expiredRows, bouncedRows)
	}

	// Wait until the panel would show every outcome, or give up.
	var st Status
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		if st, err = s.Status(ctx); err != nil {
			t.Fatalf("status: %v", err)
		}
		if st.Delivered >= 10 && st.Expired >= expiredRows && st.Failed >= bouncedRows && st.DeadLetters >= bouncedRows &&
			calendarState(t, ctx, s) == "delivered" {
			break
		}
		select {
		case <-s.died:
			t.Fatalf("a child died: %v", s.diedErr)
		case <-time.After(time.Second):
		}
	}
	t.Logf("status: %+v", st)
	if st.Delivered < 10 {
		t.Errorf("delivered %d rows, want at least 10", st.Delivered)
	}
	if d := st.Duplicates(); d != 0 {
		t.Errorf("duplicates = %d (ledger %d, possible %d, sandbox %d), want 0", d, st.DuplicateRows, st.PossibleDuplicates, st.ProviderDuplicates)
	}

	// The first calendar item carries its own lead, so the materialiser
	// made it due within seconds of the start.
	if state := calendarState(t, ctx, s); state != "delivered" {
		t.Errorf("the first calendar item's reminder is %q, want delivered", state)
	}

	sbx := sandbox.NewClient(s.ep.SandboxURL)
	for _, r := range seeded.Expired {
		if state := rowState(t, ctx, s, r.ID); state != "expired" {
			t.Errorf("expired row %d (%s) is %q, want expired", r.ID, r.Recipient, state)
		}
		sends, err := sbx.Sends(ctx, sandbox.SendQuery{Recipient: r.Recipient})
		if err != nil {
			t.Fatal(err)
		}
		if len(sends) > 0 {
			t.Errorf("expired row %d reached the sandbox: %+v", r.ID, sends)
		}
	}

	dead, err := s.DeadLetteredRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range seeded.Bounced {
		if state := rowState(t, ctx, s, r.ID); state != "failed" {
			t.Errorf("bounced row %d (%s) is %q, want failed", r.ID, r.Recipient, state)
		}
		if !dead[r.ID] {
			t.Errorf("bounced row %d is not among the dead letters (%v)", r.ID, dead)
		}
	}

	if q == backends.REST {
		checkFirstScreenCommands(t, out.String(), tmp)
	}

	// The first screen names the console and its token, and the console
	// shows the seeded dead letters.
	if intro := out.String(); !strings.Contains(intro, s.ep.Metrics+"/console/") || !strings.Contains(intro, s.ep.ConsoleToken) {
		t.Errorf("the first screen lacks the console's URL or token:\n%s", intro)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", s.ep.Metrics+"/console/dead-letters", nil)
	req.Header.Set("Authorization", "Bearer "+s.ep.ConsoleToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), seeded.Bounced[0].Recipient) {
		t.Errorf("the console's dead letters answered %d without the seeded bounced row %q", resp.StatusCode, seeded.Bounced[0].Recipient)
	}
	// The console's actions run as on-call's login (owed_oncall, a member
	// of owed_operator), which the database records: the services' login
	// may not pause a tenant.
	form := neturl.Values{"do": {"pause-tenant"}, "name": {"devstack-check"}, "why": {"the dev stack's test"}, "confirm": {"yes"}}
	req, _ = http.NewRequestWithContext(ctx, "POST", s.ep.Metrics+"/console/pauses/action", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+s.ep.ConsoleToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var login string
	if err := s.appDB.QueryRowContext(ctx, `SELECT login FROM owed_tenant_pauses WHERE tenant_id = 'devstack-check'`).Scan(&login); err != nil ||
		login != operatorRole {
		t.Errorf("the console's tenant pause: %d, login %q (err %v), want the pause made as %s:\n%s", resp.StatusCode, login, err, operatorRole, page)
	}

	// Stop, then make sure every child, its process group and PostgreSQL
	// are gone.
	pids := []int{s.cluster.pid()}
	for _, p := range s.procs {
		pids = append(pids, p.Pid())
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, pid := range pids {
		if devstacktest.Alive(pid) {
			t.Errorf("process %d is still running after Stop", pid)
		}
	}
	for _, p := range s.procs {
		if err := syscall.Kill(-p.Pid(), 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group of %s (%d) still has members: %v", p.Name(), p.Pid(), err)
		}
	}
}

// checkFirstScreenCommands runs the first screen's database commands as
// printed, in a second shell that sources the env file from the folder
// make run builds bin/ in (here tmp): owedctl tokens connects as the token
// administrator, and the psql line sees the seeded tenant's rows where a
// plain psql, bound by row-level security, counts none.
func checkFirstScreenCommands(t *testing.T, intro, tmp string) {
	t.Helper()
	var source, tokens, psql string
	for _, l := range strings.Split(intro, "\n") {
		switch l = strings.TrimSpace(l); {
		case strings.HasPrefix(l, ". ") && strings.HasSuffix(l, "/env"):
			source = l
		case strings.HasPrefix(l, "bin/owedctl tokens list"):
			tokens = l
		case strings.Contains(l, "psql "):
			psql = l
		}
	}
	if source == "" || tokens == "" || psql == "" {
		t.Fatalf("the first screen lacks the env file, owedctl tokens list or psql line:\n%s", intro)
	}
	pgBin, err := FindPostgres()
	if err != nil {
		t.Fatal(err)
	}
	shell := func(line string) (string, error) {
		cmd := exec.Command("sh", "-c", source+"\n"+line)
		// psql from the server's own folder, as the stack runs initdb.
		cmd.Dir, cmd.Env = tmp, launch.Environ(map[string]string{"PATH": pgBin + ":" + os.Getenv("PATH")})
		b, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(b)), err
	}
	if got, err := shell(tokens); err != nil || !strings.Contains(got, "owedctl dev") {
		t.Errorf("%s: %v\n%s\nwant the dev tenant's token listed", tokens, err, got)
	}
	const count = ` -Atc 'select count(*) from owed_notifications'`
	if got, err := shell(psql + count); err != nil || got == "0" || strings.Trim(got, "0123456789") != "" {
		t.Errorf("%s%s: %v, %q; want the seeded tenant's row count", psql, count, err, got)
	}
	if got, err := shell(`psql "$OWED_DATABASE_URL"` + count); err != nil || got != "0" {
		t.Errorf("a plain psql counted %q (%v): row-level security no longer hides the rows, so the first screen's PGOPTIONS is not needed", got, err)
	}
}

// TestChildrenDieWithOwedctl starts `owedctl dev` itself, kills it with
// SIGKILL, which gives it no chance to stop anything, and checks that every
// process it started is gone all the same: the services, PostgreSQL's
// postmaster and its backends. The kernel's parent-death signal ends the
// children (internal/launch), and the backends end when their postmaster
// does.
func TestChildrenDieWithOwedctl(t *testing.T) {
	tmp, bin, ports := setup(t)
	dir := filepath.Join(tmp, "dev")
	env := filepath.Join(dir, "env")
	p, err := launch.Start(context.Background(), launch.Spec{Name: "owedctl dev", Path: filepath.Join(bin, "owedctl"),
		Args: []string{"dev", "--dir", dir, "--no-seed", "--sweeper-port", strconv.Itoa(ports[0]), "--queue-port", strconv.Itoa(ports[1]),
			"--sandbox-port", strconv.Itoa(ports[2]), "--worker-ports", strconv.Itoa(ports[3]) + "," + strconv.Itoa(ports[4])},
		Env: launch.Environ(), Log: filepath.Join(tmp, "owedctl.log"), ReadyTimeout: 2 * time.Minute,
		// The env file is written once every child answered its health
		// check.
		Ready: func(context.Context) error {
			_, err := os.Stat(env)
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	children := devstacktest.Descendants(t, p.Pid())
	t.Cleanup(func() {
		// Only when the test failed is anything left to end.
		for _, pid := range children {
			if devstacktest.Alive(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	postmaster := pidFile(t, filepath.Join(dir, "pg", "data", "postmaster.pid"))
	// queue, sandbox, sweeper, two workers, the postmaster and its helpers.
	if len(children) < 7 || !slices.Contains(children, postmaster) {
		t.Fatalf("owedctl dev runs %v, want at least 7 processes with the postmaster %d among them", children, postmaster)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	devstacktest.WaitGone(t, children, time.Minute)
}

// pidFile reads the process id on the first line of path.
func pidFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// setup skips a test without PostgreSQL (fails it under make test) and returns a folder, the binaries
// built into it, and five free ports.
func setup(t *testing.T) (tmp, bin string, ports []int) {
	if _, err := FindPostgres(); err != nil {
		testenv.Missing(t, "PostgreSQL's server binaries", testenv.InstallPostgres)
	}
	tmp = devstacktest.TempDir(t, "owed-devstack-")
	return tmp, devstacktest.BuildBinaries(t, tmp), freePorts(t, 5)
}

// freePorts reserves n loopback ports until the test ends.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, release, err := ReservePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return ports
}

// rowState reads a row through the scheduling API as the seeded tenant.
func rowState(t *testing.T, ctx context.Context, s *Stack, id int64) string {
	t.Helper()
	var row struct {
		State string `json:"state"`
	}
	getData(t, ctx, s, fmt.Sprintf("%s/v1/notifications/%d", s.ep.API, id), &row)
	return row.State
}

// calendarState is the state of the reminder the materialiser scheduled for
// the first calendar item, or "" while there is none.
func calendarState(t *testing.T, ctx context.Context, s *Stack) string {
	t.Helper()
	var page struct {
		Notifications []struct {
			State string `json:"state"`
		} `json:"notifications"`
	}
	getData(t, ctx, s, fmt.Sprintf("%s/v1/notifications?kind=meeting_soon&recipient=%s", s.ep.API, neturl.QueryEscape(calendarRecipient(0))), &page)
	if len(page.Notifications) == 0 {
		return ""
	}
	return page.Notifications[0].State
}

// getData GETs u as the seeded tenant and decodes the answer's data into
// out, failing the test unless it is a 200.
func getData(t *testing.T, ctx context.Context, s *Stack, u string, out any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+s.ep.TenantToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := struct {
		Data any `json:"data"`
	}{Data: out}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d, %v", u, resp.StatusCode, err)
	}
}
