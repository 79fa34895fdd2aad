package deploy

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The parts of the Kubernetes objects the tests look at.

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sObject struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   k8sMeta    `yaml:"metadata"`
	node       *yaml.Node // the whole document, to decode the kind's spec
	file       string
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort any    `yaml:"targetPort"` // a port name or number
	Protocol   string `yaml:"protocol"`
}

type service struct {
	Spec struct {
		Type                     string            `yaml:"type"`
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []servicePort     `yaml:"ports"`
	} `yaml:"spec"`
}

type containerPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
	Protocol      string `yaml:"protocol"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Scheme string `yaml:"scheme"`
		Path   string `yaml:"path"`
		Port   any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
	SubPath   string `yaml:"subPath"`
}

type volume struct {
	Name   string `yaml:"name"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
		Items      []struct {
			Key  string `yaml:"key"`
			Path string `yaml:"path"`
		} `yaml:"items"`
	} `yaml:"secret"`
}

type container struct {
	Ports          []containerPort `yaml:"ports"`
	Env            []envVar        `yaml:"env"`
	VolumeMounts   []volumeMount   `yaml:"volumeMounts"`
	ReadinessProbe *probe          `yaml:"readinessProbe"`
	LivenessProbe  *probe          `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *struct {
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               *struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []volume    `yaml:"volumes"`
}

type workload struct {
	Spec struct {
		Selector labelSelector `yaml:"selector"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type pdb struct {
	Spec struct {
		MaxUnavailable any           `yaml:"maxUnavailable"`
		MinAvailable   any           `yaml:"minAvailable"`
		Selector       labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type kustomization struct {
	Resources []string `yaml:"resources"`
}

// k8sDir holds the Kubernetes manifests.
const k8sDir = "k8s"

// loadManifests parses every manifest the kustomization lists, and checks
// that the list and the directory's YAML files agree.
func loadManifests(t *testing.T) []k8sObject {
	t.Helper()
	docs := readDocs(t, filepath.Join(k8sDir, "kustomization.yaml"))
	if len(docs) != 1 {
		t.Fatalf("kustomization.yaml: %d documents, want 1", len(docs))
	}
	var k kustomization
	if err := docs[0].Decode(&k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var present []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			present = append(present, b)
		}
	}
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(listed, present) {
		t.Errorf("kustomization.yaml lists %v, but %s holds %v", listed, k8sDir, present)
	}
	var objs []k8sObject
	for _, name := range k.Resources {
		path := filepath.Join(k8sDir, name)
		if _, err := os.Stat(path); err != nil {
			t.Errorf("kustomization.yaml: resource %s: %v", name, err)
			continue
		}
		for i, doc := range readDocs(t, path) {
			var o k8sObject
			if err := doc.Decode(&o); err != nil {
				t.Fatalf("%s: document %d: %v", path, i+1, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: document %d lacks apiVersion, kind or metadata.name", path, i+1)
			}
			o.node, o.file = doc, path
			objs = append(objs, o)
		}
	}
	return objs
}

// decodeAs decodes o's document into out, failing the test on error.
func decodeAs(t *testing.T, o k8sObject, out any) {
	t.Helper()
	if err := o.node.Decode(out); err != nil {
		t.Fatalf("%s: %s %s: %v", o.file, o.Kind, o.Metadata.Name, err)
	}
}

// selects reports whether every label of sel is on labels; an empty
// selector selects nothing here, as a Service or PDB without one is a
// mistake in these manifests.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// portOf resolves a probe's or Service's target port, a name or a number,
// against the container's ports: the port with that name or number and
// that protocol (TCP when empty).
func portOf(target any, protocol string, ports []containerPort) (containerPort, error) {
	if protocol == "" {
		protocol = "TCP"
	}
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = "TCP"
		}
		if proto != protocol {
			continue
		}
		switch v := target.(type) {
		case string:
			if p.Name == v {
				return p, nil
			}
		case int:
			if p.ContainerPort == v {
				return p, nil
			}
		}
	}
	return containerPort{}, fmt.Errorf("no %s container port %v", protocol, target)
}

func TestK8sManifests(t *testing.T) {
	objs := loadManifests(t)
	byKind := map[string][]k8sObject{}
	for _, o := range objs {
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
	workloads := append(slices.Clone(byKind["Deployment"]), byKind["StatefulSet"]...)
	if len(workloads) != 1 {
		t.Fatalf("want one Deployment or StatefulSet of silos, have %d", len(workloads))
	}
	var w workload
	decodeAs(t, workloads[0], &w)
	pod := w.Spec.Template
	if !selects(w.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
		t.Errorf("%s: selector %v does not match the pod labels %v", workloads[0].Kind, w.Spec.Selector.MatchLabels, pod.Metadata.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("the silo pod has %d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	t.Run("ports", func(t *testing.T) { checkContainerPorts(t, c.Ports) })
	t.Run("probes", func(t *testing.T) { checkProbes(t, c) })
	t.Run("env", func(t *testing.T) { checkPodEnv(t, c.Env, byKind["Service"]) })
	t.Run("secure", func(t *testing.T) { checkPodSecure(t, pod.Spec, c) })
	t.Run("shutdown", func(t *testing.T) { checkGracePeriod(t, pod.Spec, c.Env) })
	t.Run("hardening", func(t *testing.T) { checkHardening(t, pod.Spec, c) })
	t.Run("services", func(t *testing.T) { checkServices(t, byKind["Service"], pod.Metadata.Labels, c.Ports) })
	t.Run("disruption budget", func(t *testing.T) {
		pdbs := byKind["PodDisruptionBudget"]
		if len(pdbs) != 1 {
			t.Fatalf("want one PodDisruptionBudget, have %d", len(pdbs))
		}
		var p pdb
		decodeAs(t, pdbs[0], &p)
		if !selects(p.Spec.Selector.MatchLabels, pod.Metadata.Labels) {
			t.Errorf("PodDisruptionBudget selector %v does not select the silo pods (labels %v)", p.Spec.Selector.MatchLabels, pod.Metadata.Labels)
		}
		if p.Spec.MaxUnavailable != 1 || p.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget: maxUnavailable %v, minAvailable %v; want maxUnavailable 1 alone", p.Spec.MaxUnavailable, p.Spec.MinAvailable)
		}
	})
}

// checkContainerPorts checks that the silo container declares the
// gossip, gRPC, gateway and admin ports, with unique names.
func checkContainerPorts(t *testing.T, ports []containerPort) {
	want := []struct {
		port  int
		proto string
	}{{gossipPort, "TCP"}, {gossipPort, "UDP"}, {grpcPort, "TCP"}, {gatewayPort, "TCP"}, {adminPort, "TCP"}}
	for _, w := range want {
		if _, err := portOf(w.port, w.proto, ports); err != nil {
			t.Errorf("silo container: %v", err)
		}
	}
	names := map[string]bool{}
	for _, p := range ports {
		if p.Name == "" || len(p.Name) > 15 || names[p.Name] {
			t.Errorf("silo container port %d/%s: name %q is empty, longer than 15 characters or repeated", p.ContainerPort, p.Protocol, p.Name)
		}
		names[p.Name] = true
	}
}

// checkProbes checks that readiness asks /readyz and liveness /healthz,
// both on the admin port, over HTTPS when the admin server serves TLS.
func checkProbes(t *testing.T, c container) {
	for _, tt := range []struct {
		kind string
		p    *probe
		path string
	}{{"readinessProbe", c.ReadinessProbe, readyzPath}, {"livenessProbe", c.LivenessProbe, healthzPath}} {
		if tt.p == nil || tt.p.HTTPGet == nil {
			t.Errorf("silo container: no HTTP %s", tt.kind)
			continue
		}
		wantScheme := "HTTPS"
		if mode := envValue(c.Env, "GRANARY_ADMIN_TLS_MODE"); mode == "" || mode == "off" {
			wantScheme = "HTTP"
		}
		if got := cmp.Or(tt.p.HTTPGet.Scheme, "HTTP"); got != wantScheme {
			t.Errorf("%s scheme %s, want %s: the admin server's TLS mode is %q", tt.kind, got, wantScheme, envValue(c.Env, "GRANARY_ADMIN_TLS_MODE"))
		}
		if tt.p.HTTPGet.Path != tt.path {
			t.Errorf("%s path %q, want %q", tt.kind, tt.p.HTTPGet.Path, tt.path)
		}
		p, err := portOf(tt.p.HTTPGet.Port, "TCP", c.Ports)
		if err != nil || p.ContainerPort != adminPort {
			t.Errorf("%s port %v is not the admin port %d (%v)", tt.kind, tt.p.HTTPGet.Port, adminPort, err)
		}
	}
}

// envValue returns the plain value of the variable name in env, "" when
// it is not set or comes from elsewhere.
func envValue(env []envVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// checkPodSecure checks that the silo is secured (checkSecureEnv), its
// files coming from Secret volumes mounted read-only and its gossip key
// from a Secret.
func checkPodSecure(t *testing.T, spec podSpec, c container) {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	volumes := map[string]volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	mounted := func(path string) error {
		dir, file := filepath.Split(path)
		dir = strings.TrimSuffix(dir, "/")
		for _, m := range c.VolumeMounts {
			if m.MountPath != dir {
				continue
			}
			if !m.ReadOnly {
				return fmt.Errorf("volume %s is not mounted readOnly", m.Name)
			}
			if m.SubPath != "" {
				return fmt.Errorf("volume %s is mounted with subPath, which Kubernetes never updates: a rotated secret would not reach the silo", m.Name)
			}
			v, ok := volumes[m.Name]
			if !ok || v.Secret == nil || v.Secret.SecretName == "" {
				return fmt.Errorf("volume %s is not a Secret", m.Name)
			}
			if len(v.Secret.Items) == 0 {
				return nil // every key of the Secret is a file
			}
			for _, it := range v.Secret.Items {
				if it.Path == file {
					if it.Key == "ca.key" {
						return fmt.Errorf("Secret %s's ca.key is mounted: keep the CA's key off the silos", v.Secret.SecretName)
					}
					return nil
				}
			}
			return fmt.Errorf("Secret volume %s has no item at %s", m.Name, file)
		}
		return fmt.Errorf("no volume is mounted at %s", dir)
	}
	checkSecureEnv(t, "silo container", env, mounted)
}

// envRef matches a Kubernetes $(VAR) reference in an env value.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkPodEnv checks the silo's environment: known names, references to
// variables defined before, the name and gossip address from the
// downward API, the seed DNS name of the headless Service, and the DSN
// and cluster key from a Secret.
func checkPodEnv(t *testing.T, env []envVar, services []k8sObject) {
	defined := map[string]envVar{}
	for _, e := range env {
		checkEnvName(t, "silo container", e.Name)
		if _, dup := defined[e.Name]; dup {
			t.Errorf("environment variable %s is set twice", e.Name)
		}
		for _, m := range envRef.FindAllStringSubmatch(e.Value, -1) {
			if _, ok := defined[m[1]]; !ok {
				t.Errorf("%s refers to $(%s), which is not defined before it: Kubernetes would leave the text as it is", e.Name, m[1])
			}
		}
		defined[e.Name] = e
	}
	fieldRef := func(name, path string) {
		e, ok := defined[name]
		if !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s must come from the downward API's %s", name, path)
		}
	}
	fieldRef("GRANARY_NAME", "metadata.name")
	fieldRef("POD_IP", "status.podIP")
	if got, want := defined["GRANARY_CLUSTER_GOSSIP_ADVERTISE"].Value, fmt.Sprintf("$(POD_IP):%d", gossipPort); got != want {
		t.Errorf("GRANARY_CLUSTER_GOSSIP_ADVERTISE = %q, want %q: the pod IP (the host wants IP:port)", got, want)
	}
	for _, name := range []string{"GRANARY_STORAGE_POSTGRES_DSN", "GRANARY_CLUSTER_SECRET_KEY"} {
		e, ok := defined[name]
		if !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name == "" || e.ValueFrom.SecretKeyRef.Key == "" {
			t.Errorf("%s must come from a Secret (secretKeyRef)", name)
		}
	}
	if defined["GRANARY_CLUSTER_ID"].Value == "" {
		t.Error("GRANARY_CLUSTER_ID is not set: the silos would each run alone")
	}
	seed := defined["GRANARY_CLUSTER_SEED_DNS"].Value
	var headless []string
	for _, o := range services {
		var s service
		decodeAs(t, o, &s)
		if s.Spec.ClusterIP == "None" {
			headless = append(headless, o.Metadata.Name)
		}
	}
	if len(headless) != 1 {
		t.Fatalf("want one headless Service for the gossip seeds, have %v", headless)
	}
	if want := headless[0] + ".$(POD_NAMESPACE).svc."; !strings.HasPrefix(seed, want) {
		t.Errorf("GRANARY_CLUSTER_SEED_DNS = %q, want the headless Service's FQDN, %s...", seed, want)
	}
}

// checkGracePeriod checks that Kubernetes waits longer than the silo's
// shutdown.timeout plus its shutdown.close_timeout, the most a stop takes
// before the process exits, before it kills the silo.
func checkGracePeriod(t *testing.T, spec podSpec, env []envVar) {
	timeout := 30 * time.Second // the host's default
	closeTimeout := 10 * time.Second
	for _, e := range env {
		switch e.Name {
		case "GRANARY_SHUTDOWN_TIMEOUT":
			timeout = parseDuration(t, e.Name, e.Value)
		case "GRANARY_SHUTDOWN_CLOSE_TIMEOUT":
			closeTimeout = parseDuration(t, e.Name, e.Value)
		}
	}
	timeout += closeTimeout
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("terminationGracePeriodSeconds is not set (Kubernetes' default is 30s); it must exceed shutdown.timeout %v", timeout)
	}
	if grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; grace <= timeout {
		t.Errorf("terminationGracePeriodSeconds %v does not exceed shutdown.timeout plus shutdown.close_timeout, %v: the silo would be killed mid-shutdown", grace, timeout)
	}
}

// checkHardening checks the security context and the resources.
func checkHardening(t *testing.T, spec podSpec, c container) {
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Error("the pod must run as a non-root user (securityContext.runAsNonRoot and a runAsUser other than 0)")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the silo container must have a read-only root filesystem")
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("the silo container must set allowPrivilegeEscalation: false")
	}
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("the silo container requests no %s", r)
		}
	}
	if c.Resources.Limits["memory"] == "" {
		t.Error("the silo container has no memory limit")
	}
}

// checkServices checks that each Service selects the silo pods and
// targets named ports the container has, and that the headless one
// publishes not-ready addresses and the other serves the gateway and
// admin ports.
func checkServices(t *testing.T, objs []k8sObject, podLabels map[string]string, ports []containerPort) {
	served := map[int]bool{}
	for _, o := range objs {
		var s service
		decodeAs(t, o, &s)
		name := "Service " + o.Metadata.Name
		if !selects(s.Spec.Selector, podLabels) {
			t.Errorf("%s: selector %v does not select the silo pods (labels %v)", name, s.Spec.Selector, podLabels)
		}
		for _, p := range s.Spec.Ports {
			target, ok := p.TargetPort.(string)
			if !ok {
				t.Errorf("%s port %s: targetPort %v is not a container port name", name, p.Name, p.TargetPort)
				continue
			}
			cp, err := portOf(target, p.Protocol, ports)
			if err != nil {
				t.Errorf("%s port %s: %v", name, p.Name, err)
				continue
			}
			if s.Spec.ClusterIP != "None" {
				served[cp.ContainerPort] = true
			}
		}
		if s.Spec.ClusterIP == "None" {
			if !s.Spec.PublishNotReadyAddresses {
				t.Errorf("%s is headless but does not publish not-ready addresses: silos starting together would not find each other", name)
			}
			continue
		}
		if s.Spec.Type != "" && s.Spec.Type != "ClusterIP" {
			t.Errorf("%s: type %s, want ClusterIP", name, s.Spec.Type)
		}
	}
	for _, p := range []int{gatewayPort, adminPort} {
		if !served[p] {
			t.Errorf("no ClusterIP Service serves container port %d (have %v)", p, slices.Sorted(maps.Keys(served)))
		}
	}
}

func TestSelects(t *testing.T) {
	tests := []struct {
		sel, labels map[string]string
		want        bool
	}{
		{map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "2"}, true},
		{map[string]string{"a": "1", "b": "3"}, map[string]string{"a": "1", "b": "2"}, false},
		{map[string]string{"c": "1"}, map[string]string{"a": "1"}, false},
		{nil, map[string]string{"a": "1"}, false},
	}
	for _, tt := range tests {
		if got := selects(tt.sel, tt.labels); got != tt.want {
			t.Errorf("selects(%v, %v) = %v, want %v", tt.sel, tt.labels, got, tt.want)
		}
	}
}

func TestPortOf(t *testing.T) {
	ports := []containerPort{
		{Name: "gossip-tcp", ContainerPort: 7946},
		{Name: "gossip-udp", ContainerPort: 7946, Protocol: "UDP"},
		{Name: "admin", ContainerPort: 8080, Protocol: "TCP"},
	}
	tests := []struct {
		target   any
		protocol string
		want     int
		wantErr  bool
	}{
		{"admin", "", 8080, false},
		{8080, "TCP", 8080, false},
		{"gossip-udp", "UDP", 7946, false},
		{"gossip-udp", "TCP", 0, true},
		{"metrics", "", 0, true},
		{9090, "", 0, true},
	}
	for _, tt := range tests {
		p, err := portOf(tt.target, tt.protocol, ports)
		if (err != nil) != tt.wantErr || p.ContainerPort != tt.want {
			t.Errorf("portOf(%v, %q) = %d, %v; want %d, error %v", tt.target, tt.protocol, p.ContainerPort, err, tt.want, tt.wantErr)
		}
	}
}
