package main

import (
	"flag"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/buildinfo"
)

// runCaptured runs owedctl's command line in this process, as main does,
// and returns its exit status, what it wrote to stdout and stderr, and
// every FlagSet the command made (onNewFlags). It swaps os.Stdout,
// os.Stderr and onNewFlags, so its callers do not run in parallel; the
// parallel tests of this package are paused until they are done.
func runCaptured(t *testing.T, args ...string) (code int, stdout, stderr string, sets []*flag.FlagSet) {
	t.Helper()
	outFile, errFile := captureFile(t), captureFile(t)
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outFile, errFile
	onNewFlags = func(fs *flag.FlagSet) { sets = append(sets, fs) }
	defer func() { os.Stdout, os.Stderr, onNewFlags = oldOut, oldErr, nil }()
	code = run(args)
	return code, readBack(t, outFile), readBack(t, errFile), sets
}

func captureFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readBack(t *testing.T, f *os.File) string {
	t.Helper()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHelpOfEveryCommandListsItsFlags runs `--help` on every command of the
// table and every action a command lists, so a command or action added
// later is covered without touching this test. Each must exit 0 and print
// usage; each flag the command defines must be in it. The flags are learnt
// from the command itself: an unknown flag makes it build and parse its
// FlagSets (onNewFlags records them) and stop with a usage error before
// doing anything.
func TestHelpOfEveryCommandListsItsFlags(t *testing.T) {
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	checked := 0
	for _, name := range names {
		c := cmds[name]
		lines := [][]string{{name}}
		for _, a := range c.actions {
			lines = append(lines, []string{name, a})
		}
		for _, line := range lines {
			code, stdout, stderr, _ := runCaptured(t, append(slices.Clone(line), "--help")...)
			help := stdout + stderr
			what := "owedctl " + strings.Join(line, " ") + " --help"
			if code != 0 || !strings.Contains(help, "usage: owedctl "+name) {
				t.Errorf("%s: exit %d, want 0 and a usage line:\n%s", what, code, help)
				continue
			}
			if len(line) == 1 {
				for _, a := range c.actions {
					if !strings.Contains(help, a) {
						t.Errorf("%s does not name the action %q:\n%s", what, a, help)
					}
				}
				if len(c.actions) > 0 {
					// The flags are the actions'; each action's help
					// lists its own.
					continue
				}
			}
			code, _, _, sets := runCaptured(t, append(slices.Clone(line), "--no-such-flag-xyz")...)
			if code != 2 {
				t.Errorf("owedctl %s --no-such-flag-xyz: exit %d, want 2 (bad usage)", strings.Join(line, " "), code)
			}
			for _, fs := range sets {
				fs.VisitAll(func(f *flag.Flag) {
					if !strings.Contains(help, "  -"+f.Name+" ") && !strings.Contains(help, "  -"+f.Name+"\n") {
						t.Errorf("%s does not list --%s:\n%s", what, f.Name, help)
					}
				})
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("checked the flags of %d commands and actions: the walk over the table is missing some", checked)
	}
}

// TestAnUnknownActionNamesEveryAction: the actions a command's errors name
// are the ones the table lists, which the help test runs.
func TestAnUnknownActionNamesEveryAction(t *testing.T) {
	for name, c := range commands() {
		if len(c.actions) == 0 {
			continue
		}
		code, _, stderr, _ := runCaptured(t, name, "no-such-action")
		if code != 2 || !strings.Contains(stderr, "one of "+strings.Join(c.actions, ", ")) {
			t.Errorf("owedctl %s no-such-action: exit %d, want 2 and the actions %v named:\n%s", name, code, c.actions, stderr)
		}
	}
}

// TestVersion: owedctl answers --version as the services do, and version.
func TestVersion(t *testing.T) {
	want := "owedctl " + buildinfo.Get().String() + "\n"
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		if code, stdout, stderr, _ := runCaptured(t, args...); code != 0 || stdout != want {
			t.Errorf("owedctl %s: exit %d, stdout %q, stderr %q; want 0 and %q", args[0], code, stdout, stderr, want)
		}
	}
	if code, _, _, _ := runCaptured(t, "version", "extra"); code != 2 {
		t.Errorf("owedctl version extra: exit %d, want 2", code)
	}
}
