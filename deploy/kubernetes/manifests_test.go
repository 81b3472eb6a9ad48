// Package kubernetes checks the manifests in this folder: each document
// decodes strictly into its Kubernetes API type (an unknown or misspelt
// field fails), they fit together (selectors, ports, volumes, env), and the
// configs they mount are the shipped ones.
//
// It is its own module so that the Kubernetes API types stay out of the
// collector's dependencies.
package kubernetes

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the ConfigMaps' config.yaml from distributions/*/config.yaml")

// manifest is one file's documents, decoded.
type manifest struct {
	configMaps   map[string]*corev1.ConfigMap
	services     map[string]*corev1.Service
	daemonSets   []*appsv1.DaemonSet
	statefulSets []*appsv1.StatefulSet
	kinds        []string
}

// apiVersions are the kinds the manifests may hold, with their API group
// version.
var apiVersions = map[string]string{
	"Namespace": "v1", "ServiceAccount": "v1", "Service": "v1", "ConfigMap": "v1",
	"DaemonSet": "apps/v1", "StatefulSet": "apps/v1",
}

func load(t *testing.T, file string) *manifest {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest{configMaps: map[string]*corev1.ConfigMap{}, services: map[string]*corev1.Service{}}
	for i, doc := range splitDocuments(raw) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s document %d: %v", file, i+1, err)
		}
		if want, ok := apiVersions[head.Kind]; !ok || head.APIVersion != want {
			t.Fatalf("%s document %d: %s %q, want one of %v", file, i+1, head.APIVersion, head.Kind, apiVersions)
		}
		var obj any
		switch head.Kind {
		case "Namespace":
			obj = &corev1.Namespace{}
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "Service":
			s := &corev1.Service{}
			obj = s
			defer func() { m.services[s.Name] = s }()
		case "ConfigMap":
			c := &corev1.ConfigMap{}
			obj = c
			defer func() { m.configMaps[c.Name] = c }()
		case "DaemonSet":
			d := &appsv1.DaemonSet{}
			obj = d
			m.daemonSets = append(m.daemonSets, d)
		case "StatefulSet":
			s := &appsv1.StatefulSet{}
			obj = s
			m.statefulSets = append(m.statefulSets, s)
		}
		if err := decodeStrict(doc, obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", file, i+1, head.Kind, err)
		}
		m.kinds = append(m.kinds, head.Kind)
	}
	return m
}

// decodeStrict decodes one YAML document the way the API server's strict
// field validation does: field names are case-sensitive, and an unknown or
// duplicate field is an error.
func decodeStrict(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// splitDocuments splits a multi-document YAML file at "---" lines; empty
// documents (comments only) are dropped.
func splitDocuments(raw []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		meaningful := false
		for _, line := range strings.Split(d, "\n") {
			if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
				meaningful = true
				break
			}
		}
		if meaningful {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func TestNamespace(t *testing.T) {
	m := load(t, "namespace.yaml")
	if !slices.Equal(m.kinds, []string{"Namespace"}) {
		t.Errorf("namespace.yaml holds %v", m.kinds)
	}
}

func TestAgentDaemonSet(t *testing.T) {
	m := load(t, "agent.yaml")
	if len(m.daemonSets) != 1 || len(m.statefulSets) != 0 {
		t.Fatalf("agent.yaml: %d DaemonSets, %d StatefulSets; want one DaemonSet", len(m.daemonSets), len(m.statefulSets))
	}
	ds := m.daemonSets[0]
	pod := ds.Spec.Template.Spec
	checkSelector(t, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	if !pod.HostPID {
		t.Error("the agent needs hostPID: /proc must show the node's processes")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("the agent container has no capabilities section")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("the agent must not be privileged: it needs five capabilities")
	}
	var added []string
	for _, cp := range sc.Capabilities.Add {
		added = append(added, "CAP_"+string(cp))
	}
	sort.Strings(added)
	if want := documentedCapabilities(t); !slices.Equal(added, want) {
		t.Errorf("capabilities added %v, docs/security.md lists %v", added, want)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities dropped %v, want [ALL]", sc.Capabilities.Drop)
	}
	checkConfig(t, m, pod, c, "../../distributions/agent/config.yaml", "agent.yaml")

	env := envOf(c)
	gw := load(t, "gateway.yaml")
	want := fmt.Sprintf("%s.%s.svc:%d", "hotpath-gateway", gw.services["hotpath-gateway"].Namespace, servicePort(t, gw.services["hotpath-gateway"], "otlp-grpc"))
	if got := env["HOTPATH_GATEWAY_ENDPOINT"].Value; got != want {
		t.Errorf("HOTPATH_GATEWAY_ENDPOINT = %q, want the gateway Service's gRPC port %q", got, want)
	}
	if f := env["HOTPATH_HOST_NAME"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "spec.nodeName" {
		t.Error("HOTPATH_HOST_NAME must be the node's name (fieldRef spec.nodeName): host.name would be the pod's")
	}
}

func TestGatewayStatefulSet(t *testing.T) {
	m := load(t, "gateway.yaml")
	if len(m.statefulSets) != 1 || len(m.daemonSets) != 0 {
		t.Fatalf("gateway.yaml: %d StatefulSets, %d DaemonSets; want one StatefulSet", len(m.statefulSets), len(m.daemonSets))
	}
	ss := m.statefulSets[0]
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
		t.Errorf("replicas %v: one process owns the DuckDB file, so exactly 1", ss.Spec.Replicas)
	}
	checkSelector(t, ss.Spec.Selector.MatchLabels, ss.Spec.Template.Labels)
	governing, ok := m.services[ss.Spec.ServiceName]
	if !ok || governing.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("serviceName %q is not a headless Service of gateway.yaml", ss.Spec.ServiceName)
	}
	pod := ss.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Error("the gateway needs no capability: drop ALL, add none")
	}
	checkConfig(t, m, pod, c, "../../distributions/gateway/config.yaml", "gateway.yaml")

	// The state directory is the claim template's volume.
	env := envOf(c)
	state := env["HOTPATH_STATE_DIR"].Value
	var claimed bool
	for _, vm := range c.VolumeMounts {
		for _, tpl := range ss.Spec.VolumeClaimTemplates {
			if vm.Name == tpl.Name && vm.MountPath == state {
				claimed = true
			}
		}
	}
	if !claimed {
		t.Errorf("HOTPATH_STATE_DIR %q is not a mounted volumeClaimTemplate: the summaries would not survive a restart", state)
	}
	// Every Service reaches the pod on a port the container declares.
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	for name, svc := range m.services {
		checkSelector(t, svc.Spec.Selector, ss.Spec.Template.Labels)
		for _, p := range svc.Spec.Ports {
			if !ports[p.TargetPort.StrVal] {
				t.Errorf("Service %s port %s targets %q, which the container does not declare", name, p.Name, p.TargetPort.String())
			}
		}
	}
	// OTLP listens on the pod's addresses, not loopback, or no agent gets in.
	for _, k := range []string{"HOTPATH_GATEWAY_GRPC", "HOTPATH_GATEWAY_HTTP"} {
		if !strings.HasPrefix(env[k].Value, "0.0.0.0:") {
			t.Errorf("%s = %q: agents reach the gateway through its Service", k, env[k].Value)
		}
	}
}

// checkConfig: the container is started with the config file of a mounted
// ConfigMap of the same file, that ConfigMap holds the shipped config
// verbatim, and every variable the container sets is one the config reads.
func checkConfig(t *testing.T, m *manifest, pod corev1.PodSpec, c corev1.Container, shipped, file string) {
	t.Helper()
	var configPath string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		if p, ok := strings.CutPrefix(a, "--config="); ok {
			configPath = p
		}
	}
	if configPath == "" {
		t.Fatalf("%s: the container is not started with --config=", file)
	}
	var cm *corev1.ConfigMap
	for _, vm := range c.VolumeMounts {
		if filepath.Dir(configPath) != vm.MountPath {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm = m.configMaps[v.ConfigMap.Name]
			}
		}
	}
	if cm == nil {
		t.Fatalf("%s: %s is not on a volume of a ConfigMap in the same file", file, configPath)
	}
	want, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Base(configPath)
	if got := cm.Data[key]; got != string(want) {
		if *update {
			rewriteConfigMap(t, file, want)
			return
		}
		t.Errorf("%s: ConfigMap %s %s differs from %s; run `go test ./deploy/kubernetes -update` in the repository (cd deploy/kubernetes && go test . -update)", file, cm.Name, key, shipped)
	}
	read := map[string]bool{}
	for _, v := range regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(string(want), -1) {
		read[v[1]] = true
	}
	// OTEL_SERVICE_NAME is read by the agents, from the collector's
	// /proc/PID/environ: the service of its own profile, apart for each
	// role of the one binary (as make run sets it).
	env := envOf(c)
	if got, want := env["OTEL_SERVICE_NAME"].Value, "hotpath-"+strings.TrimSuffix(file, ".yaml"); got != want {
		t.Errorf("%s: OTEL_SERVICE_NAME = %q, want %q: the agent and the gateway would be one service, otelcol-hotpath", file, got, want)
	}
	read["OTEL_SERVICE_NAME"] = true
	for name := range env {
		if !read[name] {
			t.Errorf("%s sets %s, which %s does not read", file, name, shipped)
		}
	}
}

// rewriteConfigMap replaces the literal block of the file's ConfigMap
// (its last document, "config.yaml: |") with the shipped config.
func rewriteConfigMap(t *testing.T, file string, config []byte) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const marker = "  config.yaml: |\n"
	i := bytes.LastIndex(raw, []byte(marker))
	if i < 0 {
		t.Fatalf("%s: no %q to rewrite", file, strings.TrimSpace(marker))
	}
	var b bytes.Buffer
	b.Write(raw[:i+len(marker)])
	for _, line := range strings.SplitAfter(string(config), "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("    ")
		}
		b.WriteString(line)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote the ConfigMap of %s", file)
}

// documentedCapabilities are the capabilities docs/security.md's table says
// the agent needs, sorted.
func documentedCapabilities(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(CAP_[A-Z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		caps = append(caps, m[1])
	}
	if len(caps) == 0 {
		t.Fatal("docs/security.md lists no capability table")
	}
	sort.Strings(caps)
	return caps
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

func servicePort(t *testing.T, svc *corev1.Service, name string) int32 {
	t.Helper()
	if svc == nil {
		t.Fatal("no such Service")
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return p.Port
		}
	}
	t.Fatalf("Service %s has no port %s", svc.Name, name)
	return 0
}

// checkSelector: every label the selector asks for is on the pods.
func checkSelector(t *testing.T, selector, labels map[string]string) {
	t.Helper()
	if len(selector) == 0 {
		t.Error("empty selector")
	}
	for k, v := range selector {
		if labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod labels %v", k, v, labels)
		}
	}
}
