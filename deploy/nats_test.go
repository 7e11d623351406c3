package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owedhq/owed/internal/queue/jetstream"
)

// dig walks nested maps and lists parsed from YAML or JSON: a string step
// indexes a map, an int step a list. It returns nil where the path ends.
func dig(v any, path ...any) any {
	for _, step := range path {
		switch s := step.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[s]
		case int:
			l, _ := v.([]any)
			if s >= len(l) {
				return nil
			}
			v = l[s]
		}
	}
	return v
}

func digString(v any, path ...any) string { s, _ := dig(v, path...).(string); return s }

// objects returns the Kubernetes objects parsed from the files, by
// "Kind/name".
func objects(t *testing.T, docs []any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, d := range docs {
		m, ok := d.(map[string]any)
		if !ok || digString(m, "kind") == "" {
			continue
		}
		out[digString(m, "kind")+"/"+digString(m, "metadata", "name")] = m
	}
	return out
}

// fileDocuments is yamlDocuments' parse of the files under deploy/ whose
// path starts with one of the prefixes.
func fileDocuments(t *testing.T, prefixes ...string) []any {
	t.Helper()
	var out []any
	for name, doc := range yamlDocuments(t) {
		for _, p := range prefixes {
			if strings.HasPrefix(filepath.ToSlash(name), p) {
				out = append(out, doc)
			}
		}
	}
	return out
}

func object(t *testing.T, objs map[string]map[string]any, key string) map[string]any {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("no %s among the manifests", key)
	}
	return o
}

// podSpecs returns every pod template of the workload objects, by object.
func podSpecs(objs map[string]map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for key, o := range objs {
		var spec any
		switch digString(o, "kind") {
		case "Deployment", "StatefulSet", "Job", "DaemonSet":
			spec = dig(o, "spec", "template", "spec")
		case "CronJob":
			spec = dig(o, "spec", "jobTemplate", "spec", "template", "spec")
		}
		if m, ok := spec.(map[string]any); ok {
			out[key] = m
		}
	}
	return out
}

func containers(spec map[string]any) []map[string]any {
	var out []map[string]any
	list, _ := spec["containers"].([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func container(t *testing.T, spec map[string]any, name string) map[string]any {
	t.Helper()
	for _, c := range containers(spec) {
		if digString(c, "name") == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

// hardeningProblems lists what a pod spec lacks of the hardening every
// owed manifest keeps to: non-root, the runtime's default seccomp profile,
// no privilege escalation, no capabilities, a read-only root filesystem,
// and resource requests with a memory limit.
func hardeningProblems(spec map[string]any) []string {
	var problems []string
	if dig(spec, "securityContext", "runAsNonRoot") != true {
		problems = append(problems, "pod securityContext.runAsNonRoot is not true")
	}
	if digString(spec, "securityContext", "seccompProfile", "type") != "RuntimeDefault" {
		problems = append(problems, "pod securityContext.seccompProfile.type is not RuntimeDefault")
	}
	for _, c := range containers(spec) {
		name := digString(c, "name")
		sc := dig(c, "securityContext")
		if dig(sc, "allowPrivilegeEscalation") != false {
			problems = append(problems, name+": allowPrivilegeEscalation is not false")
		}
		if dig(sc, "readOnlyRootFilesystem") != true {
			problems = append(problems, name+": readOnlyRootFilesystem is not true")
		}
		drop, _ := dig(sc, "capabilities", "drop").([]any)
		if !slices.Contains(drop, any("ALL")) {
			problems = append(problems, name+": capabilities.drop lacks ALL")
		}
		for _, r := range []string{"requests/cpu", "requests/memory", "limits/memory"} {
			kind, res, _ := strings.Cut(r, "/")
			if dig(c, "resources", kind, res) == nil {
				problems = append(problems, name+": no resources."+kind+"."+res)
			}
		}
	}
	return problems
}

func TestManifestsAreHardened(t *testing.T) {
	t.Parallel()
	objs := objects(t, fileDocuments(t, "k8s/", "nats/"))
	specs := podSpecs(objs)
	if len(specs) < 6 {
		t.Fatalf("found only %d pod templates under k8s/ and nats/", len(specs))
	}
	for key, spec := range specs {
		for _, p := range hardeningProblems(spec) {
			t.Errorf("%s: %s", key, p)
		}
	}
}

// natsConf is what the deploy tests read of deploy/nats/nats.conf.
type natsConf struct {
	clientPort, monitorPort, clusterPort int
	storeDir, pidFile, serverName        string
	routes                               []string
}

func readNATSConf(t *testing.T) natsConf {
	t.Helper()
	raw, err := os.ReadFile("nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	value := func(re string) string {
		m := regexp.MustCompile(`(?m)` + re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("nats.conf has no match for %s", re)
		}
		return m[1]
	}
	port := func(re string) int {
		p, err := strconv.Atoi(value(re))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := natsConf{
		clientPort:  port(`^listen:\s*\S+:(\d+)\s*$`),
		monitorPort: port(`^http:\s*\S+:(\d+)\s*$`),
		clusterPort: port(`^\s+listen:\s*\S+:(\d+)\s*$`),
		storeDir:    value(`^\s+store_dir:\s*(\S+)\s*$`),
		pidFile:     value(`^pid_file:\s*(\S+)\s*$`),
		serverName:  value(`^server_name:\s*(\S+)\s*$`),
	}
	routes := regexp.MustCompile(`(?s)routes:\s*\[(.*?)\]`).FindStringSubmatch(text)
	if routes == nil {
		t.Fatal("nats.conf has no cluster routes")
	}
	c.routes = strings.Fields(routes[1])
	return c
}

// TestNATSClusterManifest checks the JetStream StatefulSet against its
// configuration file and the rest of deploy/nats: three replicas, routes
// naming exactly its pods through the headless Service, that Service
// publishing pods before they are ready, the probes on the monitoring
// port, a volume under the store, and a disruption budget that keeps a
// quorum.
func TestNATSClusterManifest(t *testing.T) {
	t.Parallel()
	conf := readNATSConf(t)
	objs := objects(t, fileDocuments(t, "nats/"))
	sts := object(t, objs, "StatefulSet/owed-nats")
	replicas, _ := dig(sts, "spec", "replicas").(float64)
	if replicas != 3 {
		t.Errorf("the StatefulSet has %v replicas, want 3", replicas)
	}
	podLabels, _ := dig(sts, "spec", "template", "metadata", "labels").(map[string]any)
	selects := func(what string, sel any) {
		m, _ := sel.(map[string]any)
		if len(m) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range m {
			if podLabels[k] != v {
				t.Errorf("%s selects %s=%v, which the NATS pods lack", what, k, v)
			}
		}
	}
	selects("the StatefulSet", dig(sts, "spec", "selector", "matchLabels"))

	headlessName := digString(sts, "spec", "serviceName")
	headless := object(t, objs, "Service/"+headlessName)
	if digString(headless, "spec", "clusterIP") != "None" || dig(headless, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("Service %s must be headless (clusterIP None) and publish not-ready pods, so starting servers can route to each other", headlessName)
	}
	selects("Service "+headlessName, dig(headless, "spec", "selector"))
	selects("Service owed-nats", dig(object(t, objs, "Service/owed-nats"), "spec", "selector"))
	pdb := object(t, objs, "PodDisruptionBudget/owed-nats")
	selects("the PodDisruptionBudget", dig(pdb, "spec", "selector", "matchLabels"))
	if dig(pdb, "spec", "maxUnavailable") != float64(1) {
		t.Errorf("the PodDisruptionBudget allows %v unavailable, want 1: two of three keep the quorum", dig(pdb, "spec", "maxUnavailable"))
	}

	var want []string
	for i := range int(replicas) {
		want = append(want, fmt.Sprintf("nats://%s-%d.%s:%d", digString(sts, "metadata", "name"), i, headlessName, conf.clusterPort))
	}
	if !slices.Equal(conf.routes, want) {
		t.Errorf("nats.conf routes %v, want the StatefulSet's pods %v", conf.routes, want)
	}

	spec, _ := dig(sts, "spec", "template", "spec").(map[string]any)
	nats := container(t, spec, "nats")
	ports := map[string]float64{}
	for _, p := range dig(nats, "ports").([]any) {
		ports[digString(p, "name")] = dig(p, "containerPort").(float64)
	}
	for name, p := range map[string]int{"client": conf.clientPort, "cluster": conf.clusterPort, "monitor": conf.monitorPort} {
		if ports[name] != float64(p) {
			t.Errorf("container port %s is %v, nats.conf says %d", name, ports[name], p)
		}
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if path := digString(nats, probe, "httpGet", "path"); path != "/healthz?js-enabled-only=true" {
			t.Errorf("%s path %q, want /healthz?js-enabled-only=true", probe, path)
		}
	}
	for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		if port := digString(nats, probe, "httpGet", "port"); port != "monitor" {
			t.Errorf("%s on port %q, want the monitoring port", probe, port)
		}
	}
	if dig(nats, "resources", "limits", "cpu") == nil {
		t.Error("the NATS container has no CPU limit")
	}
	if conf.serverName != "$POD_NAME" || digString(nats, "env", 0, "name") != "POD_NAME" ||
		digString(nats, "env", 0, "valueFrom", "fieldRef", "fieldPath") != "metadata.name" {
		t.Errorf("server_name %s: want $POD_NAME, set from the pod's name as the container's first variable", conf.serverName)
	}

	mounts := map[string]string{}
	for _, m := range dig(nats, "volumeMounts").([]any) {
		mounts[digString(m, "mountPath")] = digString(m, "name")
	}
	claim := digString(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name")
	if claim == "" || mounts[conf.storeDir] != claim {
		t.Errorf("the JetStream store %s is on volume %q, want the claim template %q", conf.storeDir, mounts[conf.storeDir], claim)
	}
	if _, ok := mounts[filepath.Dir(conf.pidFile)]; !ok {
		t.Errorf("nothing is mounted at %s, where the read-only root filesystem needs the pid file", filepath.Dir(conf.pidFile))
	}
	stop := fmt.Sprint(dig(nats, "lifecycle", "preStop", "exec", "command"))
	if !strings.Contains(stop, "ldm="+conf.pidFile) {
		t.Errorf("preStop %s does not signal lame duck mode to %s", stop, conf.pidFile)
	}
}

// imageVersion parses the x.y.z of an image tag such as 2.15.2-alpine.
func imageVersion(t *testing.T, image string) [3]int {
	t.Helper()
	m := regexp.MustCompile(`:v?(\d+)\.(\d+)\.(\d+)(-[a-z0-9.]+)?$`).FindStringSubmatch(image)
	if m == nil {
		t.Fatalf("image %s is not pinned to a x.y.z tag", image)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v
}

// TestNATSImagesArePinned checks that compose and Kubernetes run the same
// pinned nats-server, 2.12 or later (message schedules), of the minor
// release the contract suite runs (go.mod), and the same nats-box.
func TestNATSImagesArePinned(t *testing.T) {
	t.Parallel()
	objs := objects(t, fileDocuments(t, "nats/"))
	server := digString(container(t, podSpecs(objs)["StatefulSet/owed-nats"], "nats"), "image")
	box := digString(container(t, podSpecs(objs)["Job/owed-nats-provision"], "provision"), "image")
	services := composeServices(t, composeProject(t, []string{"docker-compose.yml", "docker-compose.jetstream.yml"}))
	for _, name := range []string{"nats-0", "nats-1", "nats-2"} {
		if got := digString(services[name], "image"); got != server {
			t.Errorf("compose %s runs %s, Kubernetes %s", name, got, server)
		}
	}
	if got := digString(services["nats-provision"], "image"); got != box {
		t.Errorf("compose nats-provision runs %s, the Kubernetes Job %s", got, box)
	}
	imageVersion(t, box)
	v := imageVersion(t, server)
	if v[0] != 2 || v[1] < 12 {
		t.Errorf("%s: owed needs nats-server 2.12 or later (message schedules)", server)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github\.com/nats-io/nats-server/v2 v(\d+)\.(\d+)\.`).FindStringSubmatch(string(gomod))
	if m == nil {
		t.Fatal("go.mod does not require github.com/nats-io/nats-server/v2")
	}
	if fmt.Sprintf("%d.%d", v[0], v[1]) != m[1]+"."+m[2] {
		t.Errorf("the deployed %s is not the %s.%s release the contract suite runs (go.mod): move them together", server, m[1], m[2])
	}
}

// jsonObject reads a JSON object, dropping zero values (false, 0, "", null,
// empty lists and objects), which the server treats as unset.
func jsonObject(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		switch x := v.(type) {
		case nil:
			delete(m, k)
		case bool, float64, string:
			if reflect.ValueOf(x).IsZero() {
				delete(m, k)
			}
		case []any:
			if len(x) == 0 {
				delete(m, k)
			}
		case map[string]any:
			if len(x) == 0 {
				delete(m, k)
			}
		}
	}
	return m
}

func marshalObject(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return jsonObject(t, raw)
}

// natsSettingFiles are deploy/nats's provisioning files and, for the
// StatefulSet's replica count, the settings the jetstream backend's own
// Provision would create: the files must say exactly that.
func natsSettingFiles(t *testing.T) map[string]any {
	t.Helper()
	sts := object(t, objects(t, fileDocuments(t, "nats/")), "StatefulSet/owed-nats")
	replicas, _ := dig(sts, "spec", "replicas").(float64)
	cfg := jetstream.Config{Replicas: int(replicas)}
	return map[string]any{
		"owed.json":              cfg.StreamConfig(),
		"owed-dead-letters.json": cfg.DeadLetterStreamConfig(),
		"owed-workers.json":      cfg.ConsumerConfig(),
	}
}

func TestNATSProvisioningFilesMatchTheBackend(t *testing.T) {
	t.Parallel()
	for file, want := range natsSettingFiles(t) {
		raw, err := os.ReadFile(filepath.Join("nats", file))
		if err != nil {
			t.Fatal(err)
		}
		if got, w := jsonObject(t, raw), marshalObject(t, want); !reflect.DeepEqual(got, w) {
			t.Errorf("nats/%s says\n  %v\nthe jetstream backend provisions\n  %v", file, got, w)
		}
	}
}

// TestQueuesDocShowsTheProvisioningFiles checks that the JSON docs/queues.md
// shows for the streams and the consumer is deploy/nats's.
func TestQueuesDocShowsTheProvisioningFiles(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/queues.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]map[string]any{}
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1) {
		obj := jsonObject(t, m[1])
		name, _ := obj["name"].(string)
		if d, ok := obj["durable_name"].(string); ok {
			name = d
		}
		shown[name] = obj
	}
	for file := range natsSettingFiles(t) {
		raw, err := os.ReadFile(filepath.Join("nats", file))
		if err != nil {
			t.Fatal(err)
		}
		want := jsonObject(t, raw)
		name, _ := want["name"].(string)
		if d, ok := want["durable_name"].(string); ok {
			name = d
		}
		if got, ok := shown[name]; !ok {
			t.Errorf("docs/queues.md shows no JSON for %s (deploy/nats/%s)", name, file)
		} else if !reflect.DeepEqual(got, want) {
			t.Errorf("docs/queues.md shows %s as\n  %v\ndeploy/nats/%s says\n  %v", name, got, file, want)
		}
	}
}

// natsClientProblems checks a jetstream client's names against the
// provisioning files: a stream, subject or consumer of another name, or
// another ack wait, and owed refuses to start.
func natsClientProblems(t *testing.T, env map[string]string) []string {
	t.Helper()
	read := func(file string) map[string]any {
		raw, err := os.ReadFile(filepath.Join("nats", file))
		if err != nil {
			t.Fatal(err)
		}
		return jsonObject(t, raw)
	}
	stream, dead, consumer := read("owed.json"), read("owed-dead-letters.json"), read("owed-workers.json")
	ackWait := time.Duration(consumer["ack_wait"].(float64)).String()
	want := map[string]string{
		"OWED_NATS_STREAM":              digString(stream, "name"),
		"OWED_NATS_SUBJECT":             digString(consumer, "filter_subject"),
		"OWED_NATS_CONSUMER":            digString(consumer, "durable_name"),
		"OWED_NATS_DEAD_LETTER_STREAM":  digString(dead, "name"),
		"OWED_NATS_DEAD_LETTER_SUBJECT": digString(dead, "subjects", 0),
		"OWED_NATS_ACK_WAIT":            ackWait,
	}
	var problems []string
	if digString(stream, "subjects", 0) != want["OWED_NATS_SUBJECT"] {
		problems = append(problems, "owed.json's first subject is not the consumer's filter subject")
	}
	for k, w := range want {
		got, ok := env[k]
		if k == "OWED_NATS_ACK_WAIT" && ok {
			if d, err := time.ParseDuration(got); err == nil {
				got = d.String()
			}
		}
		if ok && got != w {
			problems = append(problems, fmt.Sprintf("%s=%s, but deploy/nats provisions %s", k, env[k], w))
		}
	}
	slices.Sort(problems)
	return problems
}

func TestJetStreamClientsUseTheProvisionedNames(t *testing.T) {
	t.Parallel()
	services := composeServices(t, composeProject(t, []string{"docker-compose.yml", "docker-compose.jetstream.yml"}))
	for _, name := range composeQueueClients {
		for _, p := range natsClientProblems(t, composeEnv(services[name])) {
			t.Errorf("compose %s: %s", name, p)
		}
	}
	var kust map[string]any
	for _, d := range fileDocuments(t, "k8s/queues/jetstream/kustomization.yaml") {
		kust, _ = d.(map[string]any)
	}
	env := generatedEnv(kust, "owed-queue")
	if len(env) == 0 {
		t.Fatal("k8s/queues/jetstream/kustomization.yaml generates no owed-queue ConfigMap")
	}
	for _, p := range natsClientProblems(t, env) {
		t.Errorf("k8s/queues/jetstream: %s", p)
	}
	for _, p := range checkQueueClient("jetstream", env) {
		t.Errorf("k8s/queues/jetstream owed-queue: %s", p)
	}
}

// generatedEnv is the NAME=value literals of a kustomization's
// configMapGenerator entry.
func generatedEnv(kustomization map[string]any, name string) map[string]string {
	env := map[string]string{}
	gens, _ := kustomization["configMapGenerator"].([]any)
	for _, g := range gens {
		if digString(g, "name") != name {
			continue
		}
		lits, _ := dig(g, "literals").([]any)
		for _, l := range lits {
			k, v, _ := strings.Cut(fmt.Sprint(l), "=")
			env[k] = v
		}
	}
	return env
}
