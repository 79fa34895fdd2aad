package deploy

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/granaryio/granary/silo/host"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The ports every deployment exposes, by the names the Kubernetes
// container gives them.
const (
	gossipPort  = 7946 // TCP and UDP
	grpcPort    = 7947
	gatewayPort = 30000
	adminPort   = 8080
)

// Probe paths of the admin server.
const (
	readyzPath  = adminapi.PathReadyz
	healthzPath = adminapi.PathHealthz
)

// hostEnvNames are the environment variables the silo host reads.
var hostEnvNames = host.EnvNames()

// checkEnvName fails when name looks like the host's configuration (it
// begins with GRANARY_) but is not a variable the host reads: a typo
// there is silently ignored by the silo, so it is caught here.
func checkEnvName(t *testing.T, where, name string) {
	t.Helper()
	if strings.HasPrefix(name, "GRANARY_") && !slices.Contains(hostEnvNames, name) {
		t.Errorf("%s: environment variable %s is not one the silo host reads (known: %s)", where, name, strings.Join(hostEnvNames, ", "))
	}
}

// readDocs decodes every YAML document of the file at path, skipping
// empty ones, and fails the test when one does not parse.
func readDocs(t *testing.T, path string) []*yaml.Node {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	docs, err := decodeDocs(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return docs
}

// decodeDocs decodes the YAML documents of r, skipping empty ones.
func decodeDocs(r io.Reader) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(r)
	var docs []*yaml.Node
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(n.Content) == 0 || n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null" {
			continue
		}
		docs = append(docs, &n)
	}
}

func TestDecodeDocs(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string
	}{
		{name: "one", in: "a: 1\n", want: 1},
		{name: "several with empty ones", in: "---\na: 1\n---\n---\nb: 2\n...\n", want: 2},
		{name: "comment only", in: "# nothing\n", want: 0},
		{name: "broken second", in: "a: 1\n---\nb: [1,\n", wantErr: "document 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := decodeDocs(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("decodeDocs: err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(docs) != tt.want {
				t.Fatalf("decodeDocs = %d documents, %v; want %d", len(docs), err, tt.want)
			}
		})
	}
}

// interpolation matches compose's ${NAME}, ${NAME:-default} and
// ${NAME-default}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// interpolate replaces compose variables by their defaults, as compose
// does when the variables are unset; one without a default becomes "".
func interpolate(s string) string {
	return interpolation.ReplaceAllStringFunc(s, func(m string) string {
		return interpolation.FindStringSubmatch(m)[2]
	})
}

func TestInterpolate(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"${A:-127.0.0.1}:30001", "127.0.0.1:30001"},
		{"${A-x}${B}", "x"},
		{"${IMAGE:-granary/example-silo:dev}", "granary/example-silo:dev"},
	}
	for _, tt := range tests {
		if got := interpolate(tt.in); got != tt.want {
			t.Errorf("interpolate(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// parseDuration parses a Go duration, failing the test with where on error.
func parseDuration(t *testing.T, where, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %q is not a duration: %v", where, s, err)
	}
	return d
}

// The secure settings every deployment sets: mutual TLS between silos,
// TLS and a token file on the gateway, HTTPS and an admin token file on
// the admin server. The gossip key is checked where it comes from (a
// Secret, an env file), since its value is never in these files.
var (
	tlsFileSettings = map[string][]string{ // a section's mode -> its file settings that must be set
		"GRANARY_CLUSTER_TLS_MODE": {"GRANARY_CLUSTER_TLS_CERT_FILE", "GRANARY_CLUSTER_TLS_KEY_FILE", "GRANARY_CLUSTER_TLS_CA_FILE"},
		"GRANARY_GATEWAY_TLS_MODE": {"GRANARY_GATEWAY_TLS_CERT_FILE", "GRANARY_GATEWAY_TLS_KEY_FILE"},
		"GRANARY_ADMIN_TLS_MODE":   {"GRANARY_ADMIN_TLS_CERT_FILE", "GRANARY_ADMIN_TLS_KEY_FILE"},
	}
	// secureModes are the modes each section may have.
	secureModes = map[string][]string{
		"GRANARY_CLUSTER_TLS_MODE": {"mtls"},
		"GRANARY_GATEWAY_TLS_MODE": {"tls", "mtls"},
		// Not mtls: the probes and Prometheus come without certificates.
		"GRANARY_ADMIN_TLS_MODE": {"tls"},
	}
	tokenFileSettings = []string{"GRANARY_GATEWAY_AUTH_TOKEN_FILE", "GRANARY_ADMIN_TOKEN_FILE"}
)

// checkSecureEnv checks that env (a silo's variables) secures every
// listener, and that every file it names is one mounted says is there
// (nil) from a secret mounted read-only.
func checkSecureEnv(t *testing.T, where string, env map[string]string, mounted func(path string) error) {
	t.Helper()
	for _, mode := range slices.Sorted(maps.Keys(secureModes)) {
		if v := env[mode]; !slices.Contains(secureModes[mode], v) {
			t.Errorf("%s: %s = %q, want one of %v", where, mode, v, secureModes[mode])
		}
		for _, f := range tlsFileSettings[mode] {
			checkMountedFile(t, where, f, env[f], mounted)
		}
	}
	for _, f := range tokenFileSettings {
		checkMountedFile(t, where, f, env[f], mounted)
	}
	if v := env["GRANARY_ADMIN_TLS_CA_FILE"]; v != "" {
		checkMountedFile(t, where, "GRANARY_ADMIN_TLS_CA_FILE", v, mounted)
	}
	if v, ok := env["GRANARY_CLUSTER_SECRET_KEY"]; ok && v != "" {
		t.Errorf("%s: GRANARY_CLUSTER_SECRET_KEY has a value in the file: the gossip key must come from a secret, never be committed", where)
	}
}

func checkMountedFile(t *testing.T, where, setting, path string, mounted func(string) error) {
	t.Helper()
	if path == "" {
		t.Errorf("%s: %s is not set", where, setting)
		return
	}
	if err := mounted(path); err != nil {
		t.Errorf("%s: %s = %s: %v", where, setting, path, err)
	}
}
