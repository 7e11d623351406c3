// Package stacktest assembles, for tests, the pieces one delivery crosses: a
// fresh ledger database (as the application role), the queue emulator and
// the sandbox provider, each served over HTTP on loopback so tests exercise
// the real clients. It takes any testing.TB, so a benchmark assembles its
// stack here too. It is imported only by tests.
package stacktest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/ledger"
	"github.com/owedhq/owed/internal/pace"
	"github.com/owedhq/owed/internal/provider/sandbox"
	"github.com/owedhq/owed/internal/provider/webhook"
	"github.com/owedhq/owed/internal/queue/emulator"
	"github.com/owedhq/owed/internal/queue/rest"
	"github.com/owedhq/owed/internal/testdb"
)

// QueueToken is the emulator's bearer token in tests.
const QueueToken = "stacktest-queue-token-0123456789"

// Stack is one test's system.
type Stack struct {
	DB     *testdb.DB
	Ledger *ledger.Ledger
	// Operator is the ledger over on-call's login (owed_operator): what the
	// console runs on (OWED_OPERATOR_DATABASE_URL).
	Operator *ledger.Ledger
	Emulator *emulator.Emulator
	QueueURL string
	Queue    *rest.Client
	Sandbox  *sandbox.Server
	// SandboxURL receives webhook sends; SandboxClient reads its stats.
	SandboxURL    string
	SandboxClient *sandbox.Client
	Sender        *webhook.Client
}

// Options adjust the stack.
type Options struct {
	Emulator func(*emulator.Config)
	Sandbox  func(*sandbox.Config)
}

// New starts a stack whose parts are stopped when the test ends.
func New(t testing.TB, o Options) *Stack {
	t.Helper()
	s := &Stack{DB: testdb.New(t)}
	s.Ledger, s.Operator = ledger.New(s.DB.App, nil), ledger.New(s.DB.Operator, nil)

	ecfg := emulator.DefaultConfig()
	ecfg.Token = QueueToken
	ecfg.DatabaseURL = s.DB.OwnerURL
	ecfg.MaxConns = 8
	if o.Emulator != nil {
		o.Emulator(&ecfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	em, err := emulator.Open(ctx, ecfg, zerolog.Nop())
	if err != nil {
		t.Fatalf("stacktest: emulator: %v", err)
	}
	em.Start(ctx)
	esrv := httptest.NewServer(em)
	s.Emulator, s.QueueURL = em, esrv.URL
	name := "q-" + strings.Trim(strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), "-")
	if len(name) > 80 {
		name = name[:80]
	}
	s.Queue, err = rest.New(rest.Config{URL: esrv.URL, Token: QueueToken, Name: name})
	if err != nil {
		t.Fatalf("stacktest: queue client: %v", err)
	}

	scfg := sandbox.Config{}
	rate, _ := pace.ParseRate("100000/s")
	scfg.Rate, scfg.Burst = rate, 1000
	if o.Sandbox != nil {
		o.Sandbox(&scfg)
	}
	sb, err := sandbox.New(scfg)
	if err != nil {
		t.Fatalf("stacktest: sandbox: %v", err)
	}
	ssrv := httptest.NewServer(sb)
	s.Sandbox, s.SandboxURL = sb, ssrv.URL
	s.SandboxClient = sandbox.NewClient(ssrv.URL)
	s.Sender, err = webhook.New(webhook.Config{URL: ssrv.URL + "/send", Secret: scfg.Secret, Name: "sandbox"})
	if err != nil {
		t.Fatalf("stacktest: webhook sender: %v", err)
	}
	t.Cleanup(func() {
		em.Drain()
		esrv.Close()
		em.Stop()
		ssrv.Close()
	})
	return s
}

// Schedule inserts n rows for tenant due at due, each with its own
// recipient (r0, r1, …) and ref.
func (s *Stack) Schedule(t testing.TB, tenant string, n int, due time.Time, change func(i int, r *ledger.NewNotification)) []ledger.Scheduled {
	t.Helper()
	var out []ledger.Scheduled
	for start := 0; start < n; start += ledger.MaxScheduleBatch {
		var rows []ledger.NewNotification
		for i := start; i < min(n, start+ledger.MaxScheduleBatch); i++ {
			r := ledger.NewNotification{Recipient: fmt.Sprintf("r%d", i), Channel: "sms", Kind: "reminder",
				RefID: fmt.Sprintf("ref-%d", i), DueAt: due, Payload: json.RawMessage(`{"text":"hello"}`)}
			if change != nil {
				change(i, &r)
			}
			rows = append(rows, r)
		}
		got, err := s.Ledger.Schedule(context.Background(), tenant, rows)
		if err != nil {
			t.Fatalf("stacktest: schedule: %v", err)
		}
		out = append(out, got...)
	}
	return out
}

// Unpaced is a Pacer that never waits: the provider is unthrottled.
type Unpaced struct{}

// Reserve grants every slot at once.
func (Unpaced) Reserve(context.Context, time.Duration) (time.Duration, bool, error) {
	return 0, true, nil
}

// Pause does nothing.
func (Unpaced) Pause(context.Context, time.Duration) error { return nil }

// Next says a slot is free now, with no limit.
func (Unpaced) Next(context.Context) (time.Duration, time.Duration, error) { return 0, 0, nil }
