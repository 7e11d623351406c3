package devstack

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/devstack/devstacktest"
	"github.com/owedhq/owed/internal/testenv"
)

// The dev cluster is its starter's alone: the person who started it
// connects with the env file's URL (the first screen's psql line), and
// another local user cannot connect as any
// role, neither through the socket (its folder and the socket are 0700) nor,
// were the socket opened to it, past peer authentication. Before issue 29,
// `runuser -u nobody -- psql -h <dev>/pg -U postgres` was a superuser.
func TestDevClusterIsClosedToOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: proving that another OS user cannot connect needs root, to run psql as nobody (runuser); CI runs as root")
	}
	if _, err := FindPostgres(); err != nil {
		testenv.Missing(t, "PostgreSQL's server binaries", testenv.InstallPostgres)
	}
	runuser := testenv.LookPath(t, "runuser", "sudo apt-get install util-linux")
	psql := testenv.LookPath(t, "psql", testenv.InstallPostgres)
	dir := devstacktest.TempDir(t, "owed-access-")
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := newCluster(dir, logs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(nil) })

	// The starter: the services' URLs and the README's psql hint.
	for _, role := range roles {
		db, err := sql.Open("postgres", c.url(role))
		if err == nil {
			err = db.PingContext(ctx)
			db.Close()
		}
		if err != nil {
			t.Errorf("the starter cannot connect as %s: %v", role, err)
		}
	}
	if out, err := exec.Command(psql, "-X", "-At", "-c", "SELECT 1", c.url(appRole)).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf(`psql "$OWED_DATABASE_URL" as the starter: %v\n%s`, err, out)
	}

	port := strconv.Itoa(pgPort)
	asNobody := func(role string) (string, error) {
		out, err := exec.Command(runuser, "-u", "nobody", "--", psql, "-X", "-At", "-h", c.primary.sock, "-p", port, "-U", role,
			"-d", "postgres", "-c", "SELECT current_user").CombinedOutput()
		return string(out), err
	}
	for _, role := range roles {
		if out, err := asNobody(role); err == nil {
			t.Errorf("nobody connected as %s: %s", role, out)
		}
	}
	// Were the socket reachable, peer authentication still refuses.
	sock := filepath.Join(c.primary.sock, ".s.PGSQL."+port)
	for _, p := range []struct {
		path string
		mode os.FileMode
	}{{c.primary.sock, 0o755}, {sock, 0o777}} {
		if err := os.Chmod(p.path, p.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, role := range roles {
		out, err := asNobody(role)
		if err == nil {
			t.Errorf("with the socket open, nobody connected as %s: %s", role, out)
		} else if !strings.Contains(out, "authentication failed") {
			t.Errorf("with the socket open, nobody as %s was refused by something else than authentication: %s", role, out)
		}
	}
}
