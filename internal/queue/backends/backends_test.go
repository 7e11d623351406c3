package backends

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/queue/rest"
)

// clearQueueEnv unsets every variable the backends read, so a test sees only
// what it sets; they come back when the test ends. Tests that use it cannot
// run in parallel (t.Setenv).
func clearQueueEnv(t *testing.T) {
	for _, v := range []string{"OWED_QUEUE_BACKEND", "OWED_QUEUE_URL", "OWED_QUEUE_TOKEN", "OWED_QUEUE_NAME",
		"OWED_SQS_QUEUE_URL", "OWED_SQS_DEAD_LETTER_QUEUE_URL", "OWED_SQS_ENDPOINT", "OWED_SQS_REGION",
		"OWED_NATS_URL", "OWED_NATS_CREDS_FILE", "OWED_NATS_STREAM", "OWED_NATS_SUBJECT", "OWED_NATS_CONSUMER",
		"OWED_NATS_DEAD_LETTER_STREAM", "OWED_NATS_DEAD_LETTER_SUBJECT", "OWED_NATS_ACK_WAIT"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
}

func load(t *testing.T, env map[string]string) (Config, error) {
	t.Helper()
	clearQueueEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := LoadConfig()
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	return cfg, cfg.Validate()
}

const (
	sqsURL  = "https://sqs.eu-west-1.amazonaws.com/123456789012/owed"
	sqsDead = "https://sqs.eu-west-1.amazonaws.com/123456789012/owed-dead"
)

func TestValidateNamesTheVariableAndTheAcceptedValues(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"unknown backend", map[string]string{"OWED_QUEUE_BACKEND": "kafka"},
			[]string{"OWED_QUEUE_BACKEND", `"kafka"`, "rest, sqs, jetstream"}},
		{"empty backend", map[string]string{"OWED_QUEUE_BACKEND": ""},
			[]string{"OWED_QUEUE_BACKEND", "rest, sqs, jetstream"}},
		{"rest without its URL", map[string]string{"OWED_QUEUE_BACKEND": "rest"},
			[]string{"OWED_QUEUE_URL"}},
		{"sqs without its queue", map[string]string{"OWED_QUEUE_BACKEND": "sqs", "OWED_SQS_DEAD_LETTER_QUEUE_URL": sqsDead},
			[]string{"OWED_SQS_QUEUE_URL"}},
		{"sqs without its dead-letter queue", map[string]string{"OWED_QUEUE_BACKEND": "sqs", "OWED_SQS_QUEUE_URL": sqsURL},
			[]string{"OWED_SQS_DEAD_LETTER_QUEUE_URL"}},
		{"jetstream without its server", map[string]string{"OWED_QUEUE_BACKEND": "jetstream"},
			[]string{"OWED_NATS_URL"}},
		{"jetstream with a wildcard subject", map[string]string{"OWED_QUEUE_BACKEND": "jetstream",
			"OWED_NATS_URL": "nats://127.0.0.1:4222", "OWED_NATS_SUBJECT": "owed.*"},
			[]string{"OWED_NATS_SUBJECT"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.env)
			if err == nil {
				t.Fatalf("Validate accepted %v", c.env)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to name %s", err, w)
				}
			}
		})
	}
}

// Only the chosen backend's variables are required: a JetStream or SQS
// deployment sets no OWED_QUEUE_URL, a REST one no OWED_SQS_* or OWED_NATS_*.
func TestOnlyTheChosenBackendIsChecked(t *testing.T) {
	for _, c := range []struct {
		backend string
		env     map[string]string
		target  string
	}{
		{"rest", map[string]string{"OWED_QUEUE_URL": "http://127.0.0.1:8181", "OWED_QUEUE_TOKEN": "t",
			"OWED_SQS_QUEUE_URL": "not a url", "OWED_NATS_SUBJECT": "owed.*"}, rest.DefaultQueueName},
		{"sqs", map[string]string{"OWED_SQS_QUEUE_URL": sqsURL, "OWED_SQS_DEAD_LETTER_QUEUE_URL": sqsDead,
			"OWED_QUEUE_URL": "not a url"}, sqsURL},
		{"jetstream", map[string]string{"OWED_NATS_URL": "nats://127.0.0.1:4222", "OWED_NATS_ACK_WAIT": "45s",
			"OWED_QUEUE_NAME": "with space"}, "OWED/owed-workers"},
	} {
		t.Run(c.backend, func(t *testing.T) {
			c.env["OWED_QUEUE_BACKEND"] = c.backend
			cfg, err := load(t, c.env)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := cfg.Target(); got != c.target {
				t.Errorf("Target() = %q, want %q", got, c.target)
			}
		})
	}
}

func TestLoadConfigReadsEveryBackend(t *testing.T) {
	clearQueueEnv(t)
	t.Setenv("OWED_QUEUE_BACKEND", "")
	// Set empty, the variable stays empty: it is not the default.
	for k, v := range map[string]string{
		"OWED_SQS_QUEUE_URL": sqsURL, "OWED_SQS_DEAD_LETTER_QUEUE_URL": sqsDead,
		"OWED_SQS_ENDPOINT": "http://127.0.0.1:9324", "OWED_SQS_REGION": "eu-west-1",
		"OWED_NATS_URL": "nats://n:4222", "OWED_NATS_CREDS_FILE": "/run/owed.creds", "OWED_NATS_STREAM": "S",
		"OWED_NATS_SUBJECT": "s.d", "OWED_NATS_CONSUMER": "c", "OWED_NATS_DEAD_LETTER_STREAM": "D",
		"OWED_NATS_DEAD_LETTER_SUBJECT": "s.dead", "OWED_NATS_ACK_WAIT": "45s",
		"OWED_QUEUE_URL": "http://q", "OWED_QUEUE_TOKEN": "t", "OWED_QUEUE_NAME": "n",
	} {
		t.Setenv(k, v)
	}
	cfg, err := LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	s, j, r := cfg.SQS, cfg.JetStream, cfg.Rest
	if s.QueueURL != sqsURL || s.DeadLetterQueueURL != sqsDead || s.Endpoint != "http://127.0.0.1:9324" || s.Region != "eu-west-1" {
		t.Errorf("sqs: %+v", s)
	}
	if j.URL != "nats://n:4222" || j.CredsFile != "/run/owed.creds" || j.Stream != "S" || j.Subject != "s.d" ||
		j.Consumer != "c" || j.DeadLetterStream != "D" || j.DeadLetterSubject != "s.dead" || j.AckWait.String() != "45s" {
		t.Errorf("jetstream: %+v", j)
	}
	if r.URL != "http://q" || r.Token != "t" || r.Name != "n" {
		t.Errorf("rest: %+v", r)
	}
	if cfg.Backend != "" {
		t.Errorf("OWED_QUEUE_BACKEND set empty read as %q", cfg.Backend)
	}
}

func TestDefaultBackendIsREST(t *testing.T) {
	clearQueueEnv(t)
	cfg, err := LoadConfig()
	if err != nil || cfg.Backend != REST {
		t.Fatalf("LoadConfig() backend %q, err %v; want %q", cfg.Backend, err, REST)
	}
}

func TestOpen(t *testing.T) {
	q, err := Open(context.Background(), Config{Backend: "kafka"}, zerolog.Nop())
	if err == nil || q != nil {
		t.Fatalf("Open(kafka) = %v, %v; want a nil queue and an error", q, err)
	}
	q, err = Open(context.Background(), Config{Backend: REST,
		Rest: rest.Config{URL: "http://127.0.0.1:1", Token: "t", Name: "q"}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := q.(*rest.Client); !ok {
		t.Fatalf("Open(rest) = %T", q)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}
