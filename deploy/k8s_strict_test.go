package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// kustomization is the part of kustomization.yaml this check reads; the
// strict decode refuses any field kustomize would act on that it does
// not handle (patches, generators, images, ...), so a new one has to be
// added here before it is used.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// k8sKinds are the API types the manifests may use, each decoded into
// its k8s.io/api type.
var k8sKinds = map[string]func() any{
	"v1/Service":                    func() any { return &corev1.Service{} },
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                     func() any { return &corev1.Secret{} },
	"apps/v1/StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// strictObjects reads the kustomization at dir and decodes each document
// of each resource strictly (unknown or misspelled fields, wrong types
// and duplicate keys refused) into its k8s.io/api type: kubectl apply -k
// offline, without a cluster or kubectl.
func strictObjects(dir string) (map[string]any, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := sigsyaml.UnmarshalStrict(b, &k); err != nil {
		return nil, fmt.Errorf("kustomization.yaml: %w", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || len(k.Resources) == 0 {
		return nil, fmt.Errorf("kustomization.yaml: %s %s with %d resources, want a kustomize.config.k8s.io/v1beta1 Kustomization listing its resources", k.APIVersion, k.Kind, len(k.Resources))
	}
	objs := map[string]any{}
	for _, res := range k.Resources {
		if filepath.IsAbs(res) || strings.Contains(res, "..") || strings.Contains(res, "://") {
			return nil, fmt.Errorf("kustomization.yaml: resource %q is not a file of the directory", res)
		}
		raw, err := os.ReadFile(filepath.Join(dir, res))
		if err != nil {
			return nil, fmt.Errorf("kustomization.yaml lists %s: %w", res, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for i := 0; ; i++ {
			var node yaml.Node
			if err := dec.Decode(&node); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s document %d: %w", res, i, err)
			}
			doc, err := yaml.Marshal(&node)
			if err != nil {
				return nil, err
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := sigsyaml.Unmarshal(doc, &head); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", res, i, err)
			}
			if head.Kind == "" && head.APIVersion == "" && len(bytes.TrimSpace(doc)) <= len("null") {
				continue // an empty document
			}
			mk := k8sKinds[head.APIVersion+"/"+head.Kind]
			if mk == nil {
				return nil, fmt.Errorf("%s document %d: %s %s is not a kind this check knows (add its k8s.io/api type to k8sKinds)", res, i, head.APIVersion, head.Kind)
			}
			obj := mk()
			if err := sigsyaml.UnmarshalStrict(doc, obj); err != nil {
				return nil, fmt.Errorf("%s document %d (%s %s): %w", res, i, head.Kind, head.Metadata.Name, err)
			}
			key := head.Kind + "/" + head.Metadata.Name
			if head.Metadata.Name == "" {
				return nil, fmt.Errorf("%s document %d: %s without metadata.name", res, i, head.Kind)
			}
			if _, dup := objs[key]; dup {
				return nil, fmt.Errorf("%s defined twice", key)
			}
			objs[key] = obj
		}
	}
	return objs, nil
}

// TestKubernetesStrict: make check-deploy's offline validation of
// deploy/k8s: the kustomization's resources, decoded strictly into the
// Kubernetes API types of k8s.io/api v0.37.2, hold the objects a cluster
// needs, and the files in the directory are all listed.
func TestKubernetesStrict(t *testing.T) {
	objs, err := strictObjects("k8s")
	if err != nil {
		t.Fatal(err)
	}
	sts, ok := objs["StatefulSet/counterd"].(*appsv1.StatefulSet)
	if !ok {
		t.Fatalf("no StatefulSet/counterd among %v", objKeys(objs))
	}
	if sts.Spec.ServiceName == "" || objs["Service/"+sts.Spec.ServiceName] == nil {
		t.Errorf("StatefulSet's serviceName %q is not a Service of the manifests", sts.Spec.ServiceName)
	}
	if len(sts.Spec.Template.Spec.Containers) == 0 || sts.Spec.Template.Spec.Containers[0].ReadinessProbe == nil {
		t.Error("the counterd container has no readiness probe")
	}
	var pdb *policyv1.PodDisruptionBudget
	for _, o := range objs {
		if p, ok := o.(*policyv1.PodDisruptionBudget); ok {
			pdb = p
		}
	}
	if pdb == nil || pdb.Spec.Selector == nil {
		t.Fatal("no PodDisruptionBudget with a selector")
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if sts.Spec.Template.Labels[k] != v {
			t.Errorf("PodDisruptionBudget selects %s=%s, which the pods do not carry", k, v)
		}
	}
	files, _ := filepath.Glob("k8s/*.yaml")
	b, _ := os.ReadFile("k8s/kustomization.yaml")
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !bytes.Contains(b, []byte("- "+base)) {
			t.Errorf("%s is not in kustomization.yaml's resources: kubectl apply -k would leave it out", base)
		}
	}
}

// TestKubernetesStrictRefuses: the strict decode catches what a
// permissive YAML read lets through: a misspelled field, a wrong type, a
// duplicate key, an unknown kind, a resource that does not exist.
func TestKubernetesStrictRefuses(t *testing.T) {
	good, err := os.ReadFile("k8s/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		kust, sts string
		want      string
	}{
		"misspelled field": {sts: strings.Replace(string(good), "serviceName:", "serviceNam:", 1), want: "unknown field"},
		"wrong type":       {sts: strings.Replace(string(good), "replicas: 3", "replicas: three", 1), want: "cannot unmarshal string into Go struct field StatefulSetSpec.spec.replicas of type int32"},
		"unknown kind":     {sts: "apiVersion: v1\nkind: Widget\nmetadata:\n  name: x\n", want: "not a kind this check knows"},
		"missing resource": {kust: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - statefulset.yaml\n  - nope.yaml\n", want: "nope.yaml"},
		"kustomize field":  {kust: "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - statefulset.yaml\nimages:\n  - name: x\n", want: "unknown field"},
		"duplicate key":    {sts: "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n", want: "document 0"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			kust := c.kust
			if kust == "" {
				kust = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - statefulset.yaml\n"
			}
			sts := c.sts
			if sts == "" {
				sts = string(good)
			}
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "statefulset.yaml"), []byte(sts), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := strictObjects(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("strictObjects: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func objKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
