package check

import (
	"bytes"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/yaml"
)

// decoder decodes the built-in kinds owed's manifests use, strictly: an
// unknown or duplicated field is an error, as `kubectl apply
// --validate=strict` makes it.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// Object is one rendered object, decoded.
type Object struct {
	// Key is Kind/name.
	Key string
	// Value is the typed object: a k8s.io/api type, or *PodMonitor.
	Value any
}

// Decode renders dir and decodes every object strictly.
func Decode(dir string) ([]Object, error) {
	m, err := Render(dir)
	if err != nil {
		return nil, err
	}
	return decodeAll(m)
}

func decodeAll(m resmap.ResMap) ([]Object, error) {
	var objs []Object
	for _, r := range m.Resources() {
		raw, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		key := r.GetKind() + "/" + r.GetName()
		v, err := DecodeStrict(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		objs = append(objs, Object{Key: key, Value: v})
	}
	return objs, nil
}

// DecodeStrict decodes one object's YAML into its k8s.io/api type (or the
// PodMonitor below), refusing unknown and duplicate fields and kinds
// this package does not know.
func DecodeStrict(raw []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion == "monitoring.coreos.com/v1" && tm.Kind == "PodMonitor" {
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		pm := &PodMonitor{}
		if err := dec.Decode(pm); err != nil {
			return nil, fmt.Errorf("PodMonitor: %w", err)
		}
		return pm, nil
	}
	obj, _, err := decoder.Decode(raw, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// PodMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 PodMonitor owed's manifest uses; a field
// outside it fails the strict decode, so a typo cannot pass unseen.
type PodMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// PodTemplate is a workload's pod: its metadata and spec.
type PodTemplate struct {
	Meta metav1.ObjectMeta
	Spec corev1.PodSpec
}

// PodTemplates returns the pod template of every workload among objs, by
// key.
func PodTemplates(objs []Object) map[string]PodTemplate {
	out := map[string]PodTemplate{}
	for _, o := range objs {
		var t *corev1.PodTemplateSpec
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			t = &v.Spec.Template
		case *appsv1.StatefulSet:
			t = &v.Spec.Template
		case *appsv1.DaemonSet:
			t = &v.Spec.Template
		case *batchv1.Job:
			t = &v.Spec.Template
		case *batchv1.CronJob:
			t = &v.Spec.JobTemplate.Spec.Template
		case *corev1.Pod:
			out[o.Key] = PodTemplate{v.ObjectMeta, v.Spec}
		}
		if t != nil {
			out[o.Key] = PodTemplate{t.ObjectMeta, t.Spec}
		}
	}
	return out
}
