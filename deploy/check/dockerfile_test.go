package check

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// lintDockerfile parses a Dockerfile with BuildKit's own parser and runs
// the rules `docker build --check` runs at parse time (linter), returning
// the stages and every warning.
func lintDockerfile(t *testing.T, src string) ([]instructions.Stage, []string) {
	t.Helper()
	res, err := parser.Parse(strings.NewReader(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var warnings []string
	for _, w := range res.Warnings {
		warnings = append(warnings, fmt.Sprintf("line %d: %s", w.Location.Start.Line, w.Short))
	}
	lint := linter.New(&linter.Config{ExperimentalAll: true, Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		warnings = append(warnings, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("instructions: %v", err)
	}
	return stages, warnings
}

// pinnedBase is an image with an exact version tag (1.26.8, 8.10.1,
// 0.19.5-nonroot) or a digest.
var pinnedBase = regexp.MustCompile(`^[^:@]+(:[^:@]*\d+\.\d+\.\d+[^:@]*)?(@sha256:[0-9a-f]{64})?$`)

func TestDockerfileLintsClean(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages, warnings := lintDockerfile(t, string(raw))
	for _, w := range warnings {
		t.Errorf("deploy/Dockerfile %s", w)
	}
	byName := map[string]instructions.Stage{}
	for _, s := range stages {
		byName[s.Name] = s
		if _, internal := byName[s.BaseName]; internal || s.BaseName == "scratch" {
			continue
		}
		if !pinnedBase.MatchString(s.BaseName) || !strings.ContainsAny(s.BaseName, ":@") {
			t.Errorf("stage %s builds FROM %s: pin an exact version tag or a digest", s.Name, s.BaseName)
		}
	}
	// commands returns a stage's commands with those of the stages it
	// derives from, first.
	var commands func(name string) []instructions.Command
	commands = func(name string) []instructions.Command {
		s, ok := byName[name]
		if !ok {
			return nil
		}
		return append(commands(s.BaseName), s.Commands...)
	}
	for _, target := range []string{"sweeper", "worker", "owedctl"} {
		var user string
		labels := map[string]string{}
		var health []string
		for _, c := range commands(target) {
			switch c := c.(type) {
			case *instructions.UserCommand:
				user = c.User
			case *instructions.LabelCommand:
				for _, kv := range c.Labels {
					labels[kv.Key] = kv.Value
				}
			case *instructions.HealthCheckCommand:
				health = c.Health.Test
			}
		}
		if user == "" || user == "0" || strings.HasPrefix(user, "0:") || user == "root" {
			t.Errorf("target %s runs as %q: want a non-root uid", target, user)
		}
		for _, l := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision", "org.opencontainers.image.source"} {
			if labels[l] == "" {
				t.Errorf("target %s has no %s label", target, l)
			}
		}
		if target != "owedctl" && !slices.Equal(health, []string{"CMD", "/usr/local/bin/" + target, "healthcheck"}) {
			t.Errorf("target %s's HEALTHCHECK is %v, want its healthcheck subcommand", target, health)
		}
	}
	var build string
	for _, c := range byName["build"].Commands {
		if r, ok := c.(*instructions.RunCommand); ok && strings.Contains(r.String(), "go build") {
			build = r.String()
		}
	}
	for _, flag := range []string{"-trimpath", "-buildvcs=false", "buildinfo.version=${VERSION}", "buildinfo.revision=${REVISION}", "-buildid="} {
		if !strings.Contains(build, flag) {
			t.Errorf("the build stage's go build lacks %s (reproducible builds, the build info): %s", flag, build)
		}
	}
}

// TestDockerfileLintCatches shows the lint can fail.
func TestDockerfileLintCatches(t *testing.T) {
	t.Parallel()
	_, warnings := lintDockerfile(t, "FROM golang:1.26.8 as Build\nRUN echo hi\n")
	got := strings.Join(warnings, "\n")
	for _, rule := range []string{"StageNameCasing", "FromAsCasing"} {
		if !strings.Contains(got, rule) {
			t.Errorf("a Dockerfile breaking %s passed the lint: %v", rule, warnings)
		}
	}
}
