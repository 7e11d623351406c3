package check

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// kustomizations are the ones deploy/README.md tells people to apply.
var kustomizations = []string{
	"../k8s/base", "../k8s/queues/rest", "../k8s/queues/rest-emulator", "../k8s/queues/sqs",
	"../k8s/queues/jetstream", "../k8s/migrate", "../k8s/monitoring", "../nats",
}

// decoded renders and decodes every kustomization once per test.
func decoded(t *testing.T) map[string][]Object {
	t.Helper()
	out := map[string][]Object{}
	for _, dir := range kustomizations {
		objs, err := Decode(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		out[dir] = objs
	}
	return out
}

// TestEveryKustomizationIsChecked keeps the list above complete: a new
// kustomization under deploy/ (other than a Component, which is built
// only through the ones including it) must be added to it.
func TestEveryKustomizationIsChecked(t *testing.T) {
	t.Parallel()
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k struct{ Kind string }
		if err := yaml.Unmarshal(raw, &k); err != nil {
			return err
		}
		if dir := filepath.Dir(path); k.Kind != "Component" && !slices.Contains(kustomizations, dir) {
			t.Errorf("%s is not in kustomizations: its objects are not checked", dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var restricted = psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}

func evaluator(t *testing.T) policy.Evaluator {
	t.Helper()
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestPodsPassRestrictedStandard evaluates every pod template of every
// kustomization as the admission controller of a namespace labelled
// pod-security.kubernetes.io/enforce=restricted (latest) would.
func TestPodsPassRestrictedStandard(t *testing.T) {
	t.Parallel()
	e := evaluator(t)
	pods := 0
	for dir, objs := range decoded(t) {
		for key, p := range PodTemplates(objs) {
			pods++
			for _, r := range e.EvaluatePod(restricted, &p.Meta, &p.Spec) {
				if !r.Allowed {
					t.Errorf("%s %s violates restricted: %s: %s", dir, key, r.ForbiddenReason, r.ForbiddenDetail)
				}
			}
		}
	}
	if pods < 8 {
		t.Fatalf("evaluated %d pod templates: the walk over the workloads is missing some", pods)
	}
}

// TestRestrictedEvaluatorRejects shows the evaluator above can fail: a pod
// without a seccomp profile or dropped capabilities is refused.
func TestRestrictedEvaluatorRejects(t *testing.T) {
	t.Parallel()
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x:1"}}}
	denied := 0
	for _, r := range evaluator(t).EvaluatePod(restricted, &metav1.ObjectMeta{}, &spec) {
		if !r.Allowed {
			denied++
		}
	}
	if denied == 0 {
		t.Fatal("a bare pod passed the restricted standard")
	}
}

func TestStrictDecodeRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"Deployment": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  replica: 2\n",
		"PodMonitor": "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: x}\nspec: {podMetricEndpoints: []}\n",
		"unknown":    "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n",
	} {
		if _, err := DecodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: a document with an unknown field or kind decoded", name)
		}
	}
	if _, err := DecodeStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1}\n")); err != nil {
		t.Errorf("a valid Deployment: %v", err)
	}
}

// releaseTags is k8s/release's tag of each owed image.
func releaseTags(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../k8s/release/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Images []struct{ Name, NewTag, Digest string }
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, i := range c.Images {
		tags[i.Name] = i.NewTag
		if i.Digest != "" {
			tags[i.Name] = i.Digest
		}
	}
	if len(tags) != 3 {
		t.Fatalf("k8s/release names %d images, want the sweeper's, the worker's and owedctl's", len(tags))
	}
	return tags
}

// splitImage returns an image's name and its tag or digest.
func splitImage(image string) (name, ref string) {
	if n, d, ok := strings.Cut(image, "@"); ok {
		return n, d
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// TestImagesPinned: every container names a tag or a digest, never
// latest, and owed's images run the release component's.
func TestImagesPinned(t *testing.T) {
	t.Parallel()
	tags := releaseTags(t)
	for name, tag := range tags {
		if tag == "" || tag == "latest" {
			t.Errorf("k8s/release pins %s to %q", name, tag)
		}
	}
	owed := 0
	for dir, objs := range decoded(t) {
		for key, p := range PodTemplates(objs) {
			for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
				name, ref := splitImage(c.Image)
				if ref == "" || ref == "latest" {
					t.Errorf("%s %s container %s runs %q: pin a tag or a digest", dir, key, c.Name, c.Image)
				}
				if want, ok := tags[name]; ok {
					owed++
					if ref != want {
						t.Errorf("%s %s runs %s, but k8s/release says %s", dir, key, c.Image, want)
					}
				}
			}
		}
	}
	if owed < 4 {
		t.Fatalf("found %d owed containers: the image walk is missing some", owed)
	}
}

// TestWorkloadsHaveDisruptionBudgets: every Deployment and StatefulSet
// with more than one replica is covered by a PodDisruptionBudget of its
// kustomization, and every container has CPU and memory requests and a
// memory limit.
func TestWorkloadsHaveDisruptionBudgetsAndResources(t *testing.T) {
	t.Parallel()
	for dir, objs := range decoded(t) {
		var pdbs []*policyv1.PodDisruptionBudget
		for _, o := range objs {
			if p, ok := o.Value.(*policyv1.PodDisruptionBudget); ok {
				pdbs = append(pdbs, p)
			}
		}
		covered := func(podLabels map[string]string) bool {
			for _, p := range pdbs {
				sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
				if err == nil && !sel.Empty() && sel.Matches(labels.Set(podLabels)) {
					return true
				}
			}
			return false
		}
		for _, o := range objs {
			var replicas *int32
			var tmpl corev1.PodTemplateSpec
			switch v := o.Value.(type) {
			case *appsv1.Deployment:
				replicas, tmpl = v.Spec.Replicas, v.Spec.Template
			case *appsv1.StatefulSet:
				replicas, tmpl = v.Spec.Replicas, v.Spec.Template
			default:
				continue
			}
			if replicas != nil && *replicas > 1 && !covered(tmpl.Labels) {
				t.Errorf("%s %s has %d replicas and no PodDisruptionBudget", dir, o.Key, *replicas)
			}
		}
		for key, p := range PodTemplates(objs) {
			for _, c := range p.Spec.Containers {
				r := c.Resources
				if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
					t.Errorf("%s %s container %s lacks a CPU or memory request or a memory limit", dir, key, c.Name)
				}
				if !r.Limits.Memory().IsZero() && r.Limits.Memory().Cmp(*r.Requests.Memory()) < 0 {
					t.Errorf("%s %s container %s: memory limit below its request", dir, key, c.Name)
				}
			}
		}
	}
}

// TestServiceProbes: the sweeper's and the workers' liveness is /healthz
// and readiness /readyz, each probe sends the pod's IP as its Host (no
// host and no Host header: the operator listener answers IP addresses,
// localhost and OWED_OPERATOR_HOSTS only), and the PodMonitor scrapes a
// port each of the pods it selects has.
func TestServiceProbesAndPodMonitor(t *testing.T) {
	t.Parallel()
	all := decoded(t)
	ports := map[string][]string{}
	for key, p := range PodTemplates(all["../k8s/queues/rest"]) {
		if !strings.HasPrefix(key, "Deployment/") {
			continue
		}
		c := p.Spec.Containers[0]
		for _, port := range c.Ports {
			ports[p.Meta.Labels["app.kubernetes.io/name"]] = append(ports[p.Meta.Labels["app.kubernetes.io/name"]], port.Name)
		}
		if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("%s: liveness is not GET /healthz", key)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: readiness is not GET /readyz", key)
		}
		for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if probe == nil || probe.HTTPGet == nil {
				continue
			}
			if probe.HTTPGet.Host != "" {
				t.Errorf("%s: a probe asks host %q instead of the pod's IP", key, probe.HTTPGet.Host)
			}
			for _, h := range probe.HTTPGet.HTTPHeaders {
				if strings.EqualFold(h.Name, "Host") {
					t.Errorf("%s: a probe sends Host %q, which the operator listener refuses unless OWED_OPERATOR_HOSTS lists it", key, h.Value)
				}
			}
		}
	}
	var pm *PodMonitor
	for _, o := range all["../k8s/monitoring"] {
		if v, ok := o.Value.(*PodMonitor); ok {
			pm = v
		}
	}
	if pm == nil {
		t.Fatal("k8s/monitoring has no PodMonitor")
	}
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"owed-sweeper", "owed-worker"} {
		if !sel.Matches(labels.Set{"app.kubernetes.io/name": app}) {
			t.Errorf("the PodMonitor does not select %s", app)
			continue
		}
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			if !slices.Contains(ports[app], ep.Port) {
				t.Errorf("the PodMonitor scrapes port %q, which %s does not have (it has %v)", ep.Port, app, ports[app])
			}
		}
	}
}

// TestSweeperGraceOutlastsItsShutdown: on SIGTERM the sweeper lets a
// running sweep finish for OWED_SHUTDOWN_GRACE (OWED_SWEEP_BUDGET + 10s
// unless set), so the kubelet's SIGKILL must come later than that.
func TestSweeperGraceOutlastsItsShutdown(t *testing.T) {
	t.Parallel()
	found := false
	for key, p := range PodTemplates(decoded(t)["../k8s/queues/rest"]) {
		if p.Meta.Labels["app.kubernetes.io/name"] != "owed-sweeper" {
			continue
		}
		found = true
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		budget := 50 * time.Second
		if v := env["OWED_SWEEP_BUDGET"]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s: OWED_SWEEP_BUDGET %q: %v", key, v, err)
			}
			budget = d
		}
		grace := budget + 10*time.Second
		if v := env["OWED_SHUTDOWN_GRACE"]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("%s: OWED_SHUTDOWN_GRACE %q: %v", key, v, err)
			}
			grace = d
		}
		pod := p.Spec.TerminationGracePeriodSeconds
		if pod == nil || time.Duration(*pod)*time.Second <= grace {
			t.Errorf("%s: terminationGracePeriodSeconds %v is not longer than the shutdown grace %s", key, pod, grace)
		}
	}
	if !found {
		t.Fatal("no owed-sweeper pod in k8s/queues/rest")
	}
}
