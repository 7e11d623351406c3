package deploy_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// backendVariable selects the queue backend every queue client reads.
const backendVariable = "OWED_QUEUE_BACKEND"

// queueBackend is one value of OWED_QUEUE_BACKEND and the variables that
// belong to it: a client on that backend sets every required one and no
// other backend's.
type queueBackend struct {
	name     string
	required []string
	optional []string
}

func (b queueBackend) variables() []string { return append(slices.Clone(b.required), b.optional...) }

// queueBackends sorts the settings of the queue backend factory
// (backends.Config in internal/queue/backends) by backend, for the compose
// and Kubernetes checks of which variables each client gets.
// TestQueueBackendVariablesAreDeclared holds the list to the structs.
var queueBackends = []queueBackend{
	{name: "rest", required: []string{"OWED_QUEUE_URL", "OWED_QUEUE_TOKEN"}, optional: []string{"OWED_QUEUE_NAME"}},
	{name: "sqs",
		required: []string{"OWED_SQS_QUEUE_URL", "OWED_SQS_DEAD_LETTER_QUEUE_URL"},
		optional: []string{"OWED_SQS_ENDPOINT", "OWED_SQS_REGION"}},
	{name: "jetstream",
		required: []string{"OWED_NATS_URL"},
		optional: []string{"OWED_NATS_CREDS_FILE", "OWED_NATS_STREAM", "OWED_NATS_SUBJECT", "OWED_NATS_CONSUMER",
			"OWED_NATS_DEAD_LETTER_STREAM", "OWED_NATS_DEAD_LETTER_SUBJECT", "OWED_NATS_ACK_WAIT"}},
}

// queueBackendVariables is every variable in queueBackends, and
// OWED_QUEUE_BACKEND.
func queueBackendVariables() []string {
	vars := []string{backendVariable}
	for _, b := range queueBackends {
		vars = append(vars, b.variables()...)
	}
	return vars
}

func backendNamed(t *testing.T, name string) queueBackend {
	t.Helper()
	for _, b := range queueBackends {
		if b.name == name {
			return b
		}
	}
	t.Fatalf("no queue backend %q in queueBackends", name)
	return queueBackend{}
}

// checkQueueClient reports what is wrong with the environment of a
// container that talks to the queue on backend want: OWED_QUEUE_BACKEND must
// say want, every variable want requires must be set, and no variable of
// another backend may be (it would be ignored, and mislead whoever reads the
// manifest).
func checkQueueClient(want string, env map[string]string) []string {
	var problems []string
	if got, ok := env[backendVariable]; !ok {
		problems = append(problems, backendVariable+" is not set")
	} else if got != want {
		problems = append(problems, fmt.Sprintf("%s=%q, want %q", backendVariable, got, want))
	}
	for _, b := range queueBackends {
		for _, v := range b.variables() {
			_, set := env[v]
			switch {
			case b.name == want && !set && slices.Contains(b.required, v):
				problems = append(problems, "lacks "+v+", which the "+want+" backend requires")
			case b.name != want && set:
				problems = append(problems, "sets "+v+", a "+b.name+" variable, on the "+want+" backend")
			}
		}
	}
	sort.Strings(problems)
	return problems
}

func TestCheckQueueClient(t *testing.T) {
	t.Parallel()
	ok := map[string]string{backendVariable: "jetstream", "OWED_NATS_URL": "nats://owed-nats:4222", "OWED_LOG_LEVEL": "info"}
	if p := checkQueueClient("jetstream", ok); len(p) != 0 {
		t.Fatalf("a complete jetstream client: %v", p)
	}
	bad := map[string]string{"OWED_QUEUE_URL": "http://queue:8181", "OWED_SQS_REGION": "eu-west-1"}
	got := strings.Join(checkQueueClient("sqs", bad), "; ")
	for _, want := range []string{"OWED_QUEUE_BACKEND is not set", "lacks OWED_SQS_QUEUE_URL", "sets OWED_QUEUE_URL, a rest variable"} {
		if !strings.Contains(got, want) {
			t.Errorf("checkQueueClient(sqs, %v) = %q, want it to say %q", bad, got, want)
		}
	}
}

func TestQueueBackendVariablesAreDeclared(t *testing.T) {
	declared := declaredVariables(t)
	for _, k := range queueBackendVariables() {
		if !declared[k] {
			t.Errorf("%s is in queueBackends but no configuration struct reads it", k)
		}
	}
}
