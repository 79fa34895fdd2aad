package deploy

import (
	"errors"
	"fmt"
	"io"
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
