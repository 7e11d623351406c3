package deploy_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"
)

// renderer is deploy/check's render command, built once: the kustomize
// library (what `kubectl kustomize` runs) in its own module, so these tests
// need neither kubectl nor the library in owed's go.mod.
var renderer = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "owed-render-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "render")
	cmd := exec.Command("go", "build", "-o", bin, "./render")
	cmd.Dir = "check"
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build deploy/check/render: %v\n%s", err, out)
	}
	return bin, nil
})

// kustomize builds a kustomization under deploy/ and returns its objects.
func kustomize(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	render, err := renderer()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(render, dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render %s: %v\n%s", dir, err, stderr.String())
	}
	var docs []any
	for _, part := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		var doc any
		if err := yaml.Unmarshal([]byte(part), &doc); err != nil {
			t.Fatalf("render %s: %v", dir, err)
		}
		docs = append(docs, doc)
	}
	return objects(t, docs)
}

// containerEnv is what a container's environment holds once Kubernetes
// has filled it from its env entries and its envFrom ConfigMaps (a Secret
// reference or a valueFrom counts as set, with no value).
func containerEnv(t *testing.T, objs map[string]map[string]any, c map[string]any) map[string]string {
	t.Helper()
	env := map[string]string{}
	from, _ := c["envFrom"].([]any)
	for _, f := range from {
		if name := digString(f, "configMapRef", "name"); name != "" {
			cm := object(t, objs, "ConfigMap/"+name)
			data, _ := cm["data"].(map[string]any)
			for k, v := range data {
				env[k], _ = v.(string)
			}
		}
	}
	list, _ := c["env"].([]any)
	for _, e := range list {
		env[digString(e, "name")] = digString(e, "value")
	}
	return env
}

// releaseTags is the release component's image tags, by image name.
func releaseTags(t *testing.T) map[string]string {
	t.Helper()
	tags := map[string]string{}
	for _, d := range fileDocuments(t, "k8s/release/kustomization.yaml") {
		images, _ := dig(d, "images").([]any)
		for _, img := range images {
			tags[digString(img, "name")] = digString(img, "newTag")
		}
	}
	if len(tags) != 3 {
		t.Fatalf("k8s/release names %d images, want sweeper, worker and owedctl", len(tags))
	}
	return tags
}

// checkOwedImages reports an owed image whose tag is not the release
// component's.
func checkOwedImages(t *testing.T, where string, specs map[string]map[string]any) {
	t.Helper()
	tags := releaseTags(t)
	for key, spec := range specs {
		for _, c := range containers(spec) {
			image := digString(c, "image")
			name, tag, _ := strings.Cut(image, ":")
			if want, ok := tags[name]; ok && tag != want {
				t.Errorf("%s %s runs %s, but k8s/release says %s", where, key, image, want)
			}
		}
	}
}

// TestKustomizeQueueOverlays builds each queue's overlay and checks what
// the sweeper and the workers would run with: the backend and all its
// settings, none of another's, the ServiceAccount they name, and the
// release's images.
func TestKustomizeQueueOverlays(t *testing.T) {
	t.Parallel()
	for _, b := range queueBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			objs := kustomize(t, "k8s/queues/"+b.name)
			specs := podSpecs(objs)
			clients := 0
			for key, o := range objs {
				if digString(o, "kind") != "Deployment" {
					continue
				}
				clients++
				spec := specs[key]
				sa := digString(spec, "serviceAccountName")
				if _, ok := objs["ServiceAccount/"+sa]; sa == "" || !ok {
					t.Errorf("%s runs as ServiceAccount %q, which the overlay does not create", key, sa)
				}
				for _, c := range containers(spec) {
					env := containerEnv(t, objs, c)
					for _, p := range checkQueueClient(b.name, env) {
						t.Errorf("%s: %s", key, p)
					}
					if b.name == "jetstream" {
						for _, p := range natsClientProblems(t, env) {
							t.Errorf("%s: %s", key, p)
						}
					}
				}
			}
			if clients != 2 {
				t.Errorf("the overlay has %d Deployments, want the sweeper and the workers", clients)
			}
			if b.name == "sqs" {
				sa := object(t, objs, "ServiceAccount/owed")
				if !strings.HasPrefix(digString(sa, "metadata", "annotations", "eks.amazonaws.com/role-arn"), "arn:aws:iam::") {
					t.Error("the sqs overlay's ServiceAccount owed has no IAM role (eks.amazonaws.com/role-arn)")
				}
			}
			checkOwedImages(t, b.name, specs)
		})
	}
}

func TestKustomizeMigrateAndNATS(t *testing.T) {
	t.Parallel()
	checkOwedImages(t, "migrate", podSpecs(kustomize(t, "k8s/migrate")))

	objs := kustomize(t, "nats")
	specs := podSpecs(objs)
	mounted := func(key, volume string, files ...string) {
		t.Helper()
		vols, _ := specs[key]["volumes"].([]any)
		for _, v := range vols {
			if digString(v, "name") != volume {
				continue
			}
			cm := object(t, objs, "ConfigMap/"+digString(v, "configMap", "name"))
			for _, f := range files {
				if _, ok := dig(cm, "data", f).(string); !ok {
					t.Errorf("%s volume %s: ConfigMap %s has no %s", key, volume, digString(cm, "metadata", "name"), f)
				}
			}
			return
		}
		t.Errorf("%s has no volume %s", key, volume)
	}
	mounted("StatefulSet/owed-nats", "config", "nats.conf")
	mounted("Job/owed-nats-provision", "provision", "provision.sh", "owed.json", "owed-dead-letters.json", "owed-workers.json")
	job := container(t, specs["Job/owed-nats-provision"], "provision")
	if url := containerEnv(t, objs, job)["NATS_URL"]; url != "nats://owed-nats:4222" {
		t.Errorf("the provisioning Job connects to %q, want the owed-nats Service", url)
	}
}

// TestKustomizeRestEmulator: the development overlay points the sweeper and
// the workers at the emulator it runs, on the port it listens on.
func TestKustomizeRestEmulator(t *testing.T) {
	t.Parallel()
	objs := kustomize(t, "k8s/queues/rest-emulator")
	specs := podSpecs(objs)
	emu := containerEnv(t, objs, container(t, specs["Deployment/owed-queue"], "queue"))
	if emu["OWED_QUEUE_ADDR"] != ":8181" {
		t.Errorf("the emulator listens on %q, want :8181", emu["OWED_QUEUE_ADDR"])
	}
	svc := object(t, objs, "Service/owed-queue")
	if port, _ := dig(svc, "spec", "ports").([]any); len(port) != 1 || fmt.Sprint(dig(port[0], "port")) != "8181" {
		t.Errorf("Service owed-queue ports: %v, want 8181", port)
	}
	for _, key := range []string{"Deployment/owed-sweeper", "Deployment/owed-worker"} {
		for _, c := range containers(specs[key]) {
			env := containerEnv(t, objs, c)
			if env["OWED_QUEUE_BACKEND"] != "rest" || env["OWED_QUEUE_URL"] != "http://owed-queue:8181" {
				t.Errorf("%s: OWED_QUEUE_BACKEND=%q OWED_QUEUE_URL=%q, want rest on http://owed-queue:8181", key, env["OWED_QUEUE_BACKEND"], env["OWED_QUEUE_URL"])
			}
			if _, ok := env["OWED_QUEUE_TOKEN"]; !ok {
				t.Errorf("%s has no OWED_QUEUE_TOKEN", key)
			}
		}
	}
	checkOwedImages(t, "rest-emulator", specs)
}
