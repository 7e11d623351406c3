package devstack

import (
	"strings"
	"testing"

	"github.com/owedhq/owed/internal/queue/backends"
)

func TestQueueSettingIsChecked(t *testing.T) {
	_, err := New(Config{Queue: "kafka", BinDir: t.TempDir()})
	if names := strings.Join(backends.Names, ", "); err == nil || !strings.Contains(err.Error(), "--queue") || !strings.Contains(err.Error(), names) {
		t.Errorf("New with --queue kafka = %v; want an error naming --queue and %s", err, names)
	}
	s, err := New(Config{BinDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Queue != backends.REST {
		t.Errorf("New without --queue runs %q; want the emulator (rest)", s.cfg.Queue)
	}
}

// TestMissingSQSServerNamesTheScript: `owedctl dev --queue sqs` on a machine
// without the local SQS server says which script installs it.
func TestMissingSQSServerNamesTheScript(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := FindSQSServer(); err == nil || !strings.Contains(err.Error(), "scripts/install-sqs.sh") {
		t.Errorf("sqsServer without owed-sqs-server on PATH = %v; want an error naming scripts/install-sqs.sh", err)
	}
}
