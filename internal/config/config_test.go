package config

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
)

type inner struct {
	Secret string `envconfig:"SECRET"`
	Token  string `envconfig:"TOKEN"`
}

type Embedded struct {
	Level string `envconfig:"LEVEL" default:"info"`
}

type spec struct {
	DatabaseURL string        `envconfig:"DATABASE_URL"`
	Timeout     time.Duration `envconfig:"TIMEOUT"`
	Count       int           `envconfig:"COUNT"`
	Names       []string      `envconfig:"NAMES"`
	NoTag       string
	Skipped     string `ignored:"true"`
	Webhook     inner  `envconfig:"WEBHOOK"`
	Ptr         *inner `envconfig:"PTR"`
	Embedded
}

// unset makes every name (prefixed or not) unset for this test only.
func unset(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
}

func TestProcessIgnoresUnprefixedNames(t *testing.T) {
	unset(t, "OWED_DATABASE_URL", "OWED_WEBHOOK_SECRET", "OWED_WEBHOOK_TOKEN", "OWED_PTR_TOKEN", "OWED_LEVEL", "OWED_COUNT")
	t.Setenv("DATABASE_URL", "postgres://postgres:superuser@db/owed")
	t.Setenv("SECRET", "whsec_platform")
	t.Setenv("TOKEN", "platform-token")
	t.Setenv("LEVEL", "debug")
	t.Setenv("COUNT", "9")

	// The hole this package closes: envconfig itself takes the bare names.
	var leaky spec
	if err := envconfig.Process("OWED", &leaky); err != nil {
		t.Fatal(err)
	}
	if leaky.DatabaseURL == "" || leaky.Webhook.Secret == "" {
		t.Fatalf("envconfig no longer falls back to bare names (%+v): this test no longer shows the hole", leaky)
	}

	c := spec{Count: 3}
	if err := Process("OWED", &c); err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "" || c.Webhook.Secret != "" || c.Webhook.Token != "" || c.Ptr.Token != "" || c.Count != 3 {
		t.Errorf("Process read a bare name: %+v", c)
	}
	if c.Level != "info" {
		t.Errorf("Level = %q, want its default tag, not the bare LEVEL", c.Level)
	}

	t.Setenv("OWED_DATABASE_URL", "postgres://owed_app@db/owed")
	t.Setenv("OWED_WEBHOOK_SECRET", "whsec_owed")
	t.Setenv("OWED_PTR_TOKEN", "ptr")
	t.Setenv("OWED_TIMEOUT", "90s")
	t.Setenv("OWED_NAMES", "a,b")
	t.Setenv("OWED_NOTAG", "x")
	t.Setenv("OWED_SKIPPED", "x")
	t.Setenv("OWED_LEVEL", "warn")
	if err := Process("OWED", &c); err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://owed_app@db/owed" || c.Webhook.Secret != "whsec_owed" || c.Ptr.Token != "ptr" ||
		c.Timeout != 90*time.Second || !slices.Equal(c.Names, []string{"a", "b"}) || c.NoTag != "x" || c.Skipped != "" ||
		c.Level != "warn" {
		t.Errorf("Process did not read the OWED_ names: %+v", c)
	}
}

func TestProcessErrorNamesTheVariable(t *testing.T) {
	t.Setenv("OWED_COUNT", "many")
	err := Process("OWED", &spec{})
	if err == nil || !strings.Contains(err.Error(), "OWED_COUNT") || !strings.Contains(err.Error(), "Count") {
		t.Errorf("Process = %v, want an error naming OWED_COUNT and the field", err)
	}
	type needs struct {
		Must string `envconfig:"MUST" required:"true"`
	}
	unset(t, "OWED_MUST")
	t.Setenv("MUST", "bare")
	if err := Process("OWED", &needs{}); err == nil || !strings.Contains(err.Error(), "OWED_MUST") {
		t.Errorf("Process with only the bare MUST = %v, want OWED_MUST missing", err)
	}
}

// TestVariablesAreEnvconfigsNames keeps the documented names: the keys
// Process reads are the ones envconfig's usage lists.
func TestVariablesAreEnvconfigsNames(t *testing.T) {
	vars, err := Variables("OWED", &spec{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vars {
		got = append(got, v.Key)
	}
	var buf bytes.Buffer
	if err := envconfig.Usagef("OWED", &spec{}, &buf, "{{range .}}{{.Key}}\n{{end}}"); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields(buf.String()); !slices.Equal(got, want) {
		t.Errorf("Variables = %v, want envconfig's %v", got, want)
	}
}

func TestRedact(t *testing.T) {
	for _, c := range []struct{ conn, text string }{
		{"postgres://owed:S3cr3t%zz@db/owed", `parse "postgres://owed:S3cr3t%zz@db/owed": invalid URL escape "%zz"`},
		{"postgres://owed:S3cr3t%21@db/owed", "S3cr3t! and S3cr3t%21"},
		{"postgres://owed:S3cr3t@db/owed?options=a@b", "postgres://owed:S3cr3t@db/owed?options=a@b"},
		{"host=db user=owed password='S3cr3t x' sslmode=disable", "password='S3cr3t x'"},
		{"postgres://db/owed?password=S3cr3t&sslmode=disable", "dial postgres://db/owed?password=S3cr3t"},
		{"nats://u:S3cr3t/x@h:4222,nats://h2", `parse "nats://u:S3cr3t/x@h:4222": invalid port`},
		{"nats://a:S3cr3t1@h1,nats://b:S3cr3t2@h2", "nats://a:S3cr3t1@h1 and nats://b:S3cr3t2@h2"},
	} {
		if got := Redact(c.text, c.conn); strings.Contains(got, "S3cr3t") || !strings.Contains(got, Redacted) {
			t.Errorf("Redact(%q, %q) = %q", c.text, c.conn, got)
		}
	}
	if got := Redact("connect to db", "postgres://owed@db/owed"); got != "connect to db" {
		t.Errorf("a URL without a password changed the text: %q", got)
	}
}
