package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// stopper records how Missing ended a test instead of ending this one. It
// embeds a testing.TB only to satisfy the interface: Missing calls nothing
// but the methods below.
type stopper struct {
	testing.TB
	skipped, failed string
}

func (s *stopper) Helper()                        {}
func (s *stopper) Skipf(format string, a ...any)  { s.skipped = fmt.Sprintf(format, a...) }
func (s *stopper) Fatalf(format string, a ...any) { s.failed = fmt.Sprintf(format, a...) }

func TestMissingSkipsAloneAndFailsUnderMakeTest(t *testing.T) {
	const what, install = "owed-sqs-server (not on PATH)", "run scripts/install-sqs.sh"
	for _, c := range []struct {
		env        string
		skip, fail bool
	}{{"", true, false}, {"0", true, false}, {"1", false, true}} {
		t.Run("OWED_TEST_REQUIRE_ALL="+c.env, func(t *testing.T) {
			t.Setenv(RequireAllVariable, c.env)
			s := &stopper{}
			Missing(s, what, install)
			if (s.skipped != "") != c.skip || (s.failed != "") != c.fail {
				t.Fatalf("skipped %q, failed %q; want skip=%v fail=%v", s.skipped, s.failed, c.skip, c.fail)
			}
			for _, want := range []string{what, install} {
				if !strings.Contains(s.skipped+s.failed, want) {
					t.Errorf("the message %q does not name %q", s.skipped+s.failed, want)
				}
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	t.Setenv(RequireAllVariable, "1")
	s := &stopper{}
	if p := LookPath(s, "sh", "apt-get install dash"); p == "" || s.failed != "" {
		t.Errorf("LookPath(sh) = %q, failed %q; want the shell's path", p, s.failed)
	}
	LookPath(s, "owed-no-such-program", "apt-get install owed-no-such-program")
	if !strings.Contains(s.failed, "owed-no-such-program") || !strings.Contains(s.failed, "apt-get install owed-no-such-program") {
		t.Errorf("LookPath of a missing program under make test failed with %q, want its name and the install command", s.failed)
	}
}
