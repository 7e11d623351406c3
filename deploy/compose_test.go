package deploy_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeVariants are the compose stacks deploy/README.md documents: the
// base file alone runs on the REST emulator, and each override file moves
// the stack to its queue.
var composeVariants = []struct {
	backend string
	files   []string
}{
	{"rest", []string{"docker-compose.yml"}},
	{"jetstream", []string{"docker-compose.yml", "docker-compose.jetstream.yml"}},
	{"sqs", []string{"docker-compose.yml", "docker-compose.sqs.yml"}},
}

// composeQueueClients are the compose services that talk to the queue.
var composeQueueClients = []string{"sweeper", "worker", "owedctl"}

// composeReset is a value tagged !reset: the merge removes the key.
type composeReset struct{}

// composeOverride is a value tagged !override: it replaces what the earlier
// files said instead of merging with it.
type composeOverride struct{ v any }

// composeValue converts a YAML node the way Compose reads it: aliases
// resolved, merge keys (<<) filled in under the mapping's own keys, and the
// !reset and !override tags kept as composeReset and composeOverride.
func composeValue(n *yaml.Node) (any, error) {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil, nil
		}
		return composeValue(n.Content[0])
	}
	if n.Kind == yaml.AliasNode {
		return composeValue(n.Alias)
	}
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				merges = append(merges, val)
				continue
			}
			cv, err := composeValue(val)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.Value, err)
			}
			m[k.Value] = cv
		}
		for _, src := range merges {
			if src.Kind == yaml.AliasNode {
				src = src.Alias
			}
			srcs := []*yaml.Node{src}
			if src.Kind == yaml.SequenceNode {
				srcs = src.Content
			}
			for _, s := range srcs {
				sv, err := composeValue(s)
				if err != nil {
					return nil, err
				}
				sm, ok := sv.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("line %d: a merge key needs a mapping", s.Line)
				}
				for k, val := range sm {
					if _, own := m[k]; !own {
						m[k] = val
					}
				}
			}
		}
		v = m
	case yaml.SequenceNode:
		list := []any{}
		for _, c := range n.Content {
			cv, err := composeValue(c)
			if err != nil {
				return nil, err
			}
			list = append(list, cv)
		}
		v = list
	case yaml.ScalarNode:
		plain := *n
		if strings.HasPrefix(plain.Tag, "!") && !strings.HasPrefix(plain.Tag, "!!") {
			plain.Tag = ""
		}
		if err := plain.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
	}
	switch n.Tag {
	case "!reset":
		return composeReset{}, nil
	case "!override":
		return composeOverride{v}, nil
	}
	return v, nil
}

// composeMerge merges over into base by the Compose specification's rules:
// mappings merge key by key, sequences append, except command, entrypoint
// and a healthcheck's test, which the later file replaces; !reset removes a
// key and !override replaces a value whole.
func composeMerge(base, over any, key string) any {
	switch o := over.(type) {
	case composeOverride:
		return composeMerge(nil, o.v, key)
	case map[string]any:
		b, _ := base.(map[string]any)
		out := make(map[string]any, len(b)+len(o))
		for k, v := range b {
			out[k] = v
		}
		for k, v := range o {
			if _, reset := v.(composeReset); reset {
				delete(out, k)
				continue
			}
			out[k] = composeMerge(out[k], v, k)
		}
		return out
	case []any:
		b, ok := base.([]any)
		if !ok || key == "command" || key == "entrypoint" || key == "test" {
			return o
		}
		return append(slices.Clone(b), o...)
	}
	return over
}

// composeProject is the merged model of the files, read from deploy/.
func composeProject(t *testing.T, files []string) map[string]any {
	t.Helper()
	var project any
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		v, err := composeValue(&doc)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		project = composeMerge(project, v, "")
	}
	m, _ := project.(map[string]any)
	return m
}

func composeServices(t *testing.T, project map[string]any) map[string]map[string]any {
	t.Helper()
	raw, _ := project["services"].(map[string]any)
	if len(raw) == 0 {
		t.Fatal("the compose project has no services")
	}
	services := map[string]map[string]any{}
	for name, s := range raw {
		m, ok := s.(map[string]any)
		if !ok {
			t.Fatalf("service %s is not a mapping", name)
		}
		services[name] = m
	}
	return services
}

// composeEnv is a service's environment, from its mapping or its list of
// NAME=value; a variable with no value (passed through from the shell) is
// present with "".
func composeEnv(service map[string]any) map[string]string {
	env := map[string]string{}
	switch e := service["environment"].(type) {
	case map[string]any:
		for k, v := range e {
			if v == nil {
				env[k] = ""
			} else {
				env[k] = fmt.Sprint(v)
			}
		}
	case []any:
		for _, item := range e {
			k, v, _ := strings.Cut(fmt.Sprint(item), "=")
			env[k] = v
		}
	}
	return env
}

func composeProfiles(service map[string]any) []string {
	var out []string
	list, _ := service["profiles"].([]any)
	for _, p := range list {
		out = append(out, fmt.Sprint(p))
	}
	return out
}

func composeDependsOn(service map[string]any) []string {
	var deps []string
	switch d := service["depends_on"].(type) {
	case map[string]any:
		for k := range d {
			deps = append(deps, k)
		}
	case []any:
		for _, k := range d {
			deps = append(deps, fmt.Sprint(k))
		}
	}
	sort.Strings(deps)
	return deps
}

// TestComposeVariantsPickOneQueue merges each documented stack the way
// Compose does and checks that the queue clients all speak its backend,
// with none of another's settings left over, and that what starts depends
// only on services that start too.
func TestComposeVariantsPickOneQueue(t *testing.T) {
	t.Parallel()
	for _, variant := range composeVariants {
		t.Run(variant.backend, func(t *testing.T) {
			t.Parallel()
			services := composeServices(t, composeProject(t, variant.files))
			for _, name := range composeQueueClients {
				s, ok := services[name]
				if !ok {
					t.Errorf("no %s service", name)
					continue
				}
				for _, p := range checkQueueClient(variant.backend, composeEnv(s)) {
					t.Errorf("%s: %s", name, p)
				}
			}
			// A service in a profile starts only when its profile is asked
			// for or when a run names it; an `up` starts the others, so
			// they must not wait for a service that does not start.
			for name, s := range services {
				if len(composeProfiles(s)) > 0 {
					continue
				}
				for _, dep := range composeDependsOn(s) {
					d, ok := services[dep]
					if !ok {
						t.Errorf("%s depends on %s, which is not defined", name, dep)
					} else if ps := composeProfiles(d); len(ps) > 0 {
						t.Errorf("%s depends on %s, which only starts with profile %v", name, dep, ps)
					}
				}
			}
			_, emulatorStarts := services["queue"]
			if emulatorStarts {
				emulatorStarts = len(composeProfiles(services["queue"])) == 0
			}
			if emulatorStarts != (variant.backend == "rest") {
				t.Errorf("the REST emulator (service queue) starts: %v; it should only on the rest stack", emulatorStarts)
			}
		})
	}
}

func TestComposeMergeFollowsTheSpecification(t *testing.T) {
	t.Parallel()
	parse := func(src string) any {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
			t.Fatal(err)
		}
		v, err := composeValue(&doc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	base := parse(`
x-env: &env {A: "1", B: "2"}
services:
  s:
    environment: {<<: *env, C: "3"}
    depends_on: {q: {condition: service_started}}
    command: [a, b]
    ports: ["1:1"]
`)
	over := parse(`
services:
  s:
    environment: {B: !reset null, D: "4"}
    depends_on: !override {r: {condition: service_started}}
    command: [c]
    ports: ["2:2"]
`)
	s := composeServices(t, composeMerge(composeMerge(nil, base, ""), over, "").(map[string]any))["s"]
	env := composeEnv(s)
	if want := map[string]string{"A": "1", "C": "3", "D": "4"}; fmt.Sprint(env) != fmt.Sprint(want) {
		t.Errorf("environment %v, want %v (merge key filled in, B reset)", env, want)
	}
	if deps := composeDependsOn(s); fmt.Sprint(deps) != "[r]" {
		t.Errorf("depends_on %v, want [r] (!override)", deps)
	}
	if fmt.Sprint(s["command"]) != "[c]" || fmt.Sprint(s["ports"]) != "[1:1 2:2]" {
		t.Errorf("command %v and ports %v: want the command replaced and the ports appended", s["command"], s["ports"])
	}
}

// composeOneShot reports whether a service runs once: another service
// waits for it to complete, or it is a tool started by `run` (profile
// tools).
func composeOneShot(services map[string]map[string]any, name string) bool {
	if slices.Contains(composeProfiles(services[name]), "tools") {
		return true
	}
	for _, s := range services {
		if d, ok := s["depends_on"].(map[string]any); ok {
			if c, _ := d[name].(map[string]any); c["condition"] == "service_completed_successfully" {
				return true
			}
		}
	}
	return false
}

// TestComposeRestartAndHealthchecks: in every documented stack, each
// long-running service restarts unless stopped and has a healthcheck, owed's
// own through the binary's healthcheck subcommand (the images have no
// shell); a one-shot has restart "no", so a finished migration is not run
// again and again; and a dependency on a long-running service waits for it to
// be healthy.
func TestComposeRestartAndHealthchecks(t *testing.T) {
	t.Parallel()
	wantTest := map[string][]any{
		"sweeper": {"CMD", "/usr/local/bin/sweeper", "healthcheck"},
		"worker":  {"CMD", "/usr/local/bin/worker", "healthcheck"},
		"queue":   {"CMD", "/usr/local/bin/owedctl", "healthcheck", ":8181"},
		"sandbox": {"CMD", "/usr/local/bin/owedctl", "healthcheck", ":8089"},
	}
	for _, v := range composeVariants {
		services := composeServices(t, composeProject(t, v.files))
		for name, s := range services {
			restart := fmt.Sprint(s["restart"])
			if composeOneShot(services, name) {
				if restart != "no" {
					t.Errorf("%s: one-shot service %s has restart %q, want \"no\"", v.backend, name, restart)
				}
				continue
			}
			if restart != "unless-stopped" {
				t.Errorf("%s: service %s has restart %q, want unless-stopped", v.backend, name, restart)
			}
			hc, _ := s["healthcheck"].(map[string]any)
			test, _ := hc["test"].([]any)
			if len(test) < 2 || hc["disable"] == true {
				t.Errorf("%s: service %s has no healthcheck", v.backend, name)
			}
			if want, ok := wantTest[name]; ok && !slices.Equal(test, want) {
				t.Errorf("%s: service %s's healthcheck is %v, want %v", v.backend, name, test, want)
			}
			if d, ok := s["depends_on"].(map[string]any); ok {
				for dep, c := range d {
					cond, _ := c.(map[string]any)["condition"].(string)
					if !composeOneShot(services, dep) && cond != "service_healthy" && !slices.Contains(composeProfiles(s), "tools") {
						t.Errorf("%s: %s waits for %s to be %s, want service_healthy", v.backend, name, dep, cond)
					}
				}
			}
		}
	}
}
