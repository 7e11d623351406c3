package config

import (
	"strings"
	"testing"
	"time"
)

func TestDescriptionsReadsSettingsRows(t *testing.T) {
	t.Parallel()
	md := "| variable | default | meaning |\n|---|---|---|\n" +
		"| `OWED_SWEEP_BATCH` | `500` | most rows one slice leases; see [the guide](docs/x.md) |\n" +
		"| `OWED_SENDGRID_API_KEY`, `_FROM`, `_FROM_NAME` | — | SendGrid email |\n" +
		"| `OWED_TWILIO_ACCOUNT_SID`, `_FROM` | — | Twilio SMS |\n" +
		"| not a row | x | y |\n"
	known := []string{"OWED_SWEEP_BATCH", "OWED_SENDGRID_API_KEY", "OWED_SENDGRID_FROM", "OWED_SENDGRID_FROM_NAME",
		"OWED_TWILIO_ACCOUNT_SID", "OWED_TWILIO_FROM"}
	got := Descriptions(md, known, "")
	want := map[string]string{
		"OWED_SWEEP_BATCH":        "most rows one slice leases; see the guide",
		"OWED_SENDGRID_API_KEY":   "SendGrid email",
		"OWED_SENDGRID_FROM":      "SendGrid email",
		"OWED_SENDGRID_FROM_NAME": "SendGrid email",
		"OWED_TWILIO_ACCOUNT_SID": "Twilio SMS",
		"OWED_TWILIO_FROM":        "Twilio SMS",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d descriptions, want %d: %v", len(got), len(want), got)
	}
}

func TestUsagePrintsDefaultsNotTheEnvironment(t *testing.T) {
	t.Setenv("OWED_USAGE_SECRET", "from-the-environment")
	spec := struct {
		Secret   string          `envconfig:"USAGE_SECRET"`
		Interval time.Duration   `envconfig:"USAGE_INTERVAL"`
		Tagged   int             `envconfig:"USAGE_TAGGED" default:"7"`
		Steps    []time.Duration `envconfig:"USAGE_STEPS"`
		On       bool            `envconfig:"USAGE_ON"`
	}{Interval: 90 * time.Second, Steps: []time.Duration{time.Second, time.Minute}}
	var b strings.Builder
	if err := Usage(&b, "OWED", map[string]string{"OWED_USAGE_SECRET": "the secret"}, &spec); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"OWED_USAGE_SECRET", "the secret", "1m30s", "OWED_USAGE_TAGGED", " 7 ", "1s,1m0s", "false"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "from-the-environment") {
		t.Errorf("usage printed a value from the environment:\n%s", out)
	}
}

func TestDescriptionsPreferTheSectionsOwnRow(t *testing.T) {
	t.Parallel()
	md := "### Sweeper (`cmd/sweeper`)\n\n| `OWED_RATE` | empty | the sweeper's meaning |\n\n" +
		"### Worker (`cmd/worker`)\n\n| `OWED_RATE` | empty | the worker's meaning |\n| `OWED_OWN` | `1` | only here |\n"
	known := []string{"OWED_RATE", "OWED_OWN"}
	for section, want := range map[string]string{"`cmd/sweeper`": "the sweeper's meaning", "`cmd/worker`": "the worker's meaning", "": "the sweeper's meaning"} {
		got := Descriptions(md, known, section)
		if got["OWED_RATE"] != want || got["OWED_OWN"] != "only here" {
			t.Errorf("section %q: got %v, want OWED_RATE %q and OWED_OWN from the other section", section, got, want)
		}
	}
	s := Settings(md, known)
	if len(s) != 3 || s[2].Default != "`1`" || s[2].Section != "Worker (`cmd/worker`)" {
		t.Errorf("Settings = %+v, want three rows, the last with its default and section", s)
	}
}

// derivedSpec is a spec whose default is applied where it is used.
type derivedSpec struct {
	Grace time.Duration `envconfig:"USAGE_GRACE"`
	Set   time.Duration `envconfig:"USAGE_SET"`
}

func (derivedSpec) UsageDefaults() map[string]string {
	return map[string]string{"OWED_USAGE_GRACE": "OWED_USAGE_BUDGET+10s", "OWED_USAGE_SET": "never shown"}
}

func TestUsageShowsDerivedDefaults(t *testing.T) {
	t.Parallel()
	spec := struct {
		Attempts int `envconfig:"USAGE_ATTEMPTS"`
	}{}
	var b strings.Builder
	err := Usage(&b, "OWED", nil, &derivedSpec{Set: time.Minute}, &spec, Defaults{"OWED_USAGE_ATTEMPTS": "the schedule's length+1"})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"OWED_USAGE_BUDGET+10s", "the schedule's length+1", "1m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "never shown") {
		t.Errorf("a derived default replaced a field's own default:\n%s", out)
	}
	if keys, err := Keys("OWED", &spec, Defaults{}); err != nil || len(keys) != 1 {
		t.Errorf("Keys with a Defaults among the specs = %v, %v; want the struct's one variable", keys, err)
	}
}
