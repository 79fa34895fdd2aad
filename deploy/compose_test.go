package deploy

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// composeService is the part of a compose service the tests look at.
type composeService struct {
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Networks        composeNetworks   `yaml:"networks"`
	ExtraHosts      []string          `yaml:"extra_hosts"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	Profiles        []string          `yaml:"profiles"`
	Healthcheck     any               `yaml:"healthcheck"`
	ContainerName   string            `yaml:"container_name"`
	EnvFile         stringList        `yaml:"env_file"`
	Volumes         []string          `yaml:"volumes"`
}

// stringList is a compose value written as one string or a list of them.
type stringList []string

// UnmarshalYAML takes either form.
func (l *stringList) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		*l = stringList{node.Value}
		return nil
	}
	var list []string
	if err := node.Decode(&list); err != nil {
		return err
	}
	*l = list
	return nil
}

// The secrets make certs (deploy/mksecrets) writes, as compose.yaml uses
// them: the gossip key in an env file, and a directory per silo holding
// these files.
const (
	secretsDir       = "./secrets"
	clusterEnvFile   = "secrets/cluster.env"
	siloSecretsMount = "/etc/granary"
)

var siloSecretFiles = []string{"ca.crt", "tls.crt", "tls.key", "admin-tokens", "gateway-tokens"}

// composeMounted returns the check that a path is one of silo name's
// secret files, from its own directory of secretsDir mounted read-only.
func composeMounted(name string, volumes []string) func(string) error {
	return func(path string) error {
		dir, file := filepath.Split(path)
		dir = strings.TrimSuffix(dir, "/")
		for _, v := range volumes {
			parts := strings.Split(interpolate(v), ":")
			if len(parts) < 2 || parts[1] != dir {
				continue
			}
			if want := secretsDir + "/" + name; parts[0] != want {
				return fmt.Errorf("%s is mounted from %s, want %s (the silo's own secrets, from make certs)", dir, parts[0], want)
			}
			if len(parts) < 3 || !slices.Contains(strings.Split(parts[2], ","), "ro") {
				return fmt.Errorf("%s is not mounted read-only (:ro)", dir)
			}
			if !slices.Contains(siloSecretFiles, file) {
				return fmt.Errorf("%s is not one of the files make certs puts there, %v", file, siloSecretFiles)
			}
			return nil
		}
		return fmt.Errorf("no volume is mounted at %s", dir)
	}
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Networks map[string]struct {
		IPAM struct {
			Config []struct {
				Subnet string `yaml:"subnet"`
			} `yaml:"config"`
		} `yaml:"ipam"`
	} `yaml:"networks"`
}

// composeNetworks are a service's networks, written as a list of names
// or as a mapping of names to settings; the address is the only setting
// the tests read.
type composeNetworks map[string]string // network -> ipv4_address

// UnmarshalYAML takes either form.
func (n *composeNetworks) UnmarshalYAML(node *yaml.Node) error {
	*n = composeNetworks{}
	if node.Kind == yaml.SequenceNode {
		var names []string
		if err := node.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			(*n)[name] = ""
		}
		return nil
	}
	var m map[string]*struct {
		IPv4Address string `yaml:"ipv4_address"`
	}
	if err := node.Decode(&m); err != nil {
		return err
	}
	for name, settings := range m {
		(*n)[name] = ""
		if settings != nil {
			(*n)[name] = settings.IPv4Address
		}
	}
	return nil
}

// composeSilos are the silo services of compose.yaml.
var composeSilos = []string{"silo-a", "silo-b", "silo-c"}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	docs := readDocs(t, "compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("compose.yaml: %d documents, want 1", len(docs))
	}
	var f composeFile
	if err := docs[0].Decode(&f); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return f
}

// publishedPort is a compose port mapping, [host_ip:]host_port:container_port[/proto].
type publishedPort struct {
	hostIP              string
	hostPort, container int
}

func parsePublished(s string) (publishedPort, bool) {
	s, _, _ = strings.Cut(s, "/")
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return publishedPort{}, false
	}
	c, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return publishedPort{}, false
	}
	host := s[:i]
	var p publishedPort
	p.container = c
	if j := strings.LastIndexByte(host, ':'); j >= 0 {
		p.hostIP, host = host[:j], host[j+1:]
	}
	if p.hostPort, err = strconv.Atoi(host); err != nil {
		return publishedPort{}, false
	}
	return p, true
}

func TestParsePublished(t *testing.T) {
	tests := []struct {
		in   string
		want publishedPort
		ok   bool
	}{
		{"127.0.0.1:30001:30000", publishedPort{"127.0.0.1", 30001, 30000}, true},
		{"8081:8080/tcp", publishedPort{"", 8081, 8080}, true},
		{"8080", publishedPort{}, false},
		{"a:b", publishedPort{}, false},
	}
	for _, tt := range tests {
		got, ok := parsePublished(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parsePublished(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCompose(t *testing.T) {
	f := loadCompose(t)
	hostPorts := map[int]string{}
	addresses := map[string]string{}
	clusterIDs := map[string]bool{}
	for _, name := range composeSilos {
		s, ok := f.Services[name]
		if !ok {
			t.Errorf("compose.yaml has no service %s", name)
			continue
		}
		env := map[string]string{}
		for k, v := range s.Environment {
			checkEnvName(t, "compose service "+name, k)
			env[k] = interpolate(v)
		}
		checkSecureEnv(t, "compose service "+name, env, composeMounted(name, s.Volumes))
		if !slices.Contains(s.EnvFile, clusterEnvFile) {
			t.Errorf("%s: env_file %v lacks %s, the gossip key make certs writes", name, s.EnvFile, clusterEnvFile)
		}
		if env["GRANARY_NAME"] != name {
			t.Errorf("%s: GRANARY_NAME = %q, want the service name", name, env["GRANARY_NAME"])
		}
		clusterIDs[env["GRANARY_CLUSTER_ID"]] = true
		var seeds []string
		for seed := range strings.SplitSeq(env["GRANARY_CLUSTER_SEEDS"], ",") {
			seeds = append(seeds, strings.TrimSpace(seed))
		}
		for _, peer := range composeSilos {
			if want := net.JoinHostPort(peer, strconv.Itoa(gossipPort)); !slices.Contains(seeds, want) {
				t.Errorf("%s: GRANARY_CLUSTER_SEEDS %v lacks %s: list every silo, so they start in any order", name, seeds, want)
			}
		}
		if p := env["GRANARY_STORAGE_PROVIDER"]; p != "postgres" {
			t.Errorf("%s: GRANARY_STORAGE_PROVIDER = %q, want postgres: the silos must share their grains' state", name, p)
		}
		if env["GRANARY_STORAGE_POSTGRES_DSN"] == "" {
			t.Errorf("%s: GRANARY_STORAGE_POSTGRES_DSN has no default", name)
		}
		if !slices.Contains(s.ExtraHosts, "host.docker.internal:host-gateway") {
			t.Errorf("%s: extra_hosts %v lacks host.docker.internal:host-gateway, by which the silos reach the host's PostgreSQL", name, s.ExtraHosts)
		}
		if s.ContainerName != "" {
			t.Errorf("%s: container_name %q would make two compose projects of this file clash", name, s.ContainerName)
		}
		if s.Healthcheck != nil {
			t.Errorf("%s: a healthcheck cannot run in a FROM scratch image, which has no shell", name)
		}
		checkSiloAddress(t, f, name, s, env["GRANARY_CLUSTER_GOSSIP_ADVERTISE"], addresses)
		timeout := 30 * time.Second // the host's default
		if v, ok := env["GRANARY_SHUTDOWN_TIMEOUT"]; ok {
			timeout = parseDuration(t, name+": GRANARY_SHUTDOWN_TIMEOUT", v)
		}
		closeTimeout := 10 * time.Second // the host's default
		if v, ok := env["GRANARY_SHUTDOWN_CLOSE_TIMEOUT"]; ok {
			closeTimeout = parseDuration(t, name+": GRANARY_SHUTDOWN_CLOSE_TIMEOUT", v)
		}
		timeout += closeTimeout
		grace := 10 * time.Second // compose's default
		if s.StopGracePeriod != "" {
			grace = parseDuration(t, name+": stop_grace_period", s.StopGracePeriod)
		}
		if grace <= timeout {
			t.Errorf("%s: stop_grace_period %v does not exceed shutdown.timeout plus shutdown.close_timeout, %v: Docker would kill the silo mid-shutdown", name, grace, timeout)
		}
		published := map[int]publishedPort{}
		for _, spec := range s.Ports {
			p, ok := parsePublished(interpolate(spec))
			if !ok {
				t.Errorf("%s: port %q is not host:container", name, spec)
				continue
			}
			published[p.container] = p
			if other, dup := hostPorts[p.hostPort]; dup {
				t.Errorf("%s: host port %d is published by %s too", name, p.hostPort, other)
			}
			hostPorts[p.hostPort] = name
		}
		for _, c := range []int{gatewayPort, adminPort} {
			if _, ok := published[c]; !ok {
				t.Errorf("%s: container port %d is not published", name, c)
			}
		}
		// Clients on the host are handed the advertised gateway: it must
		// be the published one.
		if gw, ok := published[gatewayPort]; ok {
			want := net.JoinHostPort(gw.hostIP, strconv.Itoa(gw.hostPort))
			if got := env["GRANARY_GATEWAY_ADVERTISE"]; got != want {
				t.Errorf("%s: GRANARY_GATEWAY_ADVERTISE = %q, want the published gateway %s", name, got, want)
			}
		}
	}
	if len(clusterIDs) != 1 || clusterIDs[""] {
		t.Errorf("the silos' GRANARY_CLUSTER_ID values %v must be one, non-empty", clusterIDs)
	}
	pg, ok := f.Services["postgres"]
	if !ok {
		t.Fatal("compose.yaml has no postgres service for those who can pull images")
	}
	if !slices.Contains(pg.Profiles, "postgres") {
		t.Errorf("the postgres service must be under the postgres profile, so the default run uses the host's server; profiles %v", pg.Profiles)
	}
}

// checkSiloAddress checks that silo s sits on one user-defined network
// at a fixed address inside the network's subnet, unique among the silos
// (addresses, by silo), and advertises it for gossip: compose cannot give
// a container its own address any other way.
func checkSiloAddress(t *testing.T, f composeFile, name string, s composeService, advertise string, addresses map[string]string) {
	t.Helper()
	if len(s.Networks) != 1 {
		t.Errorf("%s: on networks %v, want one user-defined network", name, s.Networks)
		return
	}
	for network, addr := range s.Networks {
		addr = interpolate(addr)
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			t.Errorf("%s: ipv4_address %q on %s is not an IP address: the silo must advertise a fixed one", name, addr, network)
			return
		}
		cfg := f.Networks[network].IPAM.Config
		if len(cfg) != 1 {
			t.Errorf("network %s: %d ipam configs, want one subnet", network, len(cfg))
			return
		}
		subnet, err := netip.ParsePrefix(interpolate(cfg[0].Subnet))
		if err != nil || !subnet.Contains(ip) {
			t.Errorf("%s: address %s is not in network %s's subnet %q", name, ip, network, cfg[0].Subnet)
		}
		if other, dup := addresses[addr]; dup {
			t.Errorf("%s: address %s is %s's too", name, addr, other)
		}
		addresses[addr] = name
		if want := net.JoinHostPort(addr, strconv.Itoa(gossipPort)); advertise != want {
			t.Errorf("%s: GRANARY_CLUSTER_GOSSIP_ADVERTISE = %q, want its address %s", name, advertise, want)
		}
	}
}

// TestDockerfile checks the image: built FROM scratch, run as a numeric
// non-root user, exposing the silo's ports.
func TestDockerfile(t *testing.T) {
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var from, user, entrypoint string
	exposed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			from = strings.Join(fields[1:], " ")
		case "USER":
			user = fields[1]
		case "ENTRYPOINT":
			entrypoint = strings.Join(fields[1:], " ")
		case "EXPOSE":
			for _, p := range fields[1:] {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				exposed[p] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if from != "scratch" {
		t.Errorf("FROM %q, want scratch: no image can be pulled where the image is built", from)
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q, want a numeric user other than root (Kubernetes' runAsNonRoot checks the number)", user)
	}
	if entrypoint == "" {
		t.Error("no ENTRYPOINT")
	}
	for _, p := range []string{"7946/tcp", "7946/udp", "7947/tcp", "30000/tcp", "8080/tcp"} {
		if !exposed[p] {
			t.Errorf("the image does not EXPOSE %s", p)
		}
	}
}
