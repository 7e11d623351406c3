package upgrade_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/migrate"
)

// releaseFile pins release N: the one line that is not a comment.
const releaseFile = "testdata/release-n.txt"

// release is one build: its owedctl, sweeper and worker in bin, and the
// schema it is named by (its newest migration).
type release struct {
	name string
	bin  string
	head int64
}

func (r release) path(cmd string) string { return filepath.Join(r.bin, cmd) }

// pinnedCommit reads release N's commit.
func pinnedCommit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(releaseFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	t.Fatalf("%s names no commit", releaseFile)
	return ""
}

// buildReleases builds release N from its pinned commit (git archive into a
// temporary folder) and N+1 from this tree, without the race detector. It
// skips when the clone lacks N's commit (a shallow clone).
func buildReleases(t *testing.T) (n, next release) {
	t.Helper()
	commit := pinnedCommit(t)
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the upgrade test builds release N %s from git history", err, commit)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("release N %s (%s) is not in this clone's history (a shallow clone?): git fetch --unshallow, or fetch that commit, to run the upgrade test",
			commit, releaseFile)
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "release-n")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v %s", commit, err, stderr.Bytes())
	}
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = &tarball
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("unpack release N: %v\n%s", err, out)
	}
	n = release{name: "N (" + commit[:min(12, len(commit))] + ")", bin: filepath.Join(tmp, "bin-n")}
	next = release{name: "N+1 (this tree)", bin: filepath.Join(tmp, "bin-next")}
	if n.head, err = migrate.Head(os.DirFS(filepath.Join(src, "migrations"))); err != nil {
		t.Fatal(err)
	}
	this, err := migrate.This()
	if err != nil {
		t.Fatal(err)
	}
	next.head = this.Head
	if next.head <= n.head {
		t.Fatalf("this tree's schema %d is not past release N's %d: the test would not cross a migration. "+
			"Pin N (%s) to an earlier commit that carries the compatibility check, or add the migration this release needs",
			next.head, n.head, releaseFile)
	}
	goBuild(t, src, n.bin)
	goBuild(t, root, next.bin)
	return n, next
}

func goBuild(t *testing.T, dir, out string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out+string(filepath.Separator), "./cmd/...")
	cmd.Dir = dir
	// Never the race detector or a workspace: a plain build of that tree.
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/... in %s: %v\n%s", dir, err, b)
	}
}
