package proctest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The variables that say where the Python client's tools are and whether
// its tests must run.
const (
	// PythonEnv names a Python 3 interpreter that imports grpc and
	// google.protobuf.
	PythonEnv = "GRANARY_PYTHON"
	// ProtocEnv names the protoc binary.
	ProtocEnv = "GRANARY_PROTOC"
	// GoogleRPCProtoEnv names an include directory holding
	// google/rpc/status.proto and google/rpc/error_details.proto.
	GoogleRPCProtoEnv = "GRANARY_GOOGLE_RPC_PROTO"
	// PythonRequiredEnv, set to 1 (as CI does), makes missing Python
	// tools fail the tests that need them instead of skipping them.
	PythonRequiredEnv = "GRANARY_TEST_PYTHON_REQUIRED"
)

// PythonPackages are the Debian packages that give Python tests what
// they need: the interpreter's grpc and protobuf modules, protoc and the
// well-known types' .proto files, and the google.rpc .proto files (which
// Debian ships in gogo's googleapis package, unchanged, under
// /usr/share/gocode/src/github.com/gogo/googleapis).
const PythonPackages = "python3-grpcio python3-protobuf protobuf-compiler libprotobuf-dev golang-github-gogo-googleapis-dev"

// googleRPCIncludes are where Debian's packages put google/rpc/*.proto.
var googleRPCIncludes = []string{
	"/usr/share/gocode/src/github.com/gogo/googleapis",
	"/usr/include",
	"/usr/share/protobuf",
}

// PythonTools are the programs and files that a test of a Python gRPC
// client needs.
type PythonTools struct {
	// Python is an interpreter that imports grpc and google.protobuf.
	Python string
	// Protoc is the protobuf compiler; it finds the well-known types
	// (google/protobuf/*.proto) by itself.
	Protoc string
	// GoogleRPC is an include directory for protoc holding
	// google/rpc/status.proto and google/rpc/error_details.proto.
	GoogleRPC string
}

// Env returns the environment of this process with PythonEnv, ProtocEnv
// and GoogleRPCProtoEnv set to these tools, for a script such as
// examples/python/stubs.sh that reads them, so that it runs what the test
// found.
func (pt PythonTools) Env() []string {
	env := os.Environ()
	return append(env[:len(env):len(env)],
		PythonEnv+"="+pt.Python, ProtocEnv+"="+pt.Protoc, GoogleRPCProtoEnv+"="+pt.GoogleRPC)
}

// Python finds the tools of a Python gRPC client: the first of
// $GRANARY_PYTHON, python3 on PATH and /usr/bin/python3 that imports grpc
// and google.protobuf (a python3 of pyenv or a virtualenv first on PATH
// may lack Debian's modules), $GRANARY_PROTOC or protoc on PATH, and
// $GRANARY_GOOGLE_RPC_PROTO or the directory where Debian puts
// google/rpc/status.proto. It checks that this protoc compiles
// google/rpc/status.proto, whose import of google/protobuf/any.proto
// needs the well-known types. Without them the test is skipped, or fails
// when GRANARY_TEST_PYTHON_REQUIRED=1: the Python client proves that a
// language other than Go can call grains, so CI must not let it pass
// unnoticed.
func Python(t testing.TB) PythonTools {
	t.Helper()
	tools, why := findPython()
	if why == "" {
		return tools
	}
	why += "; on Debian: apt-get install " + PythonPackages
	if os.Getenv(PythonRequiredEnv) == "1" {
		t.Fatalf("%s, and %s=1", why, PythonRequiredEnv)
	}
	t.Skip(why)
	return PythonTools{}
}

// pythonCheckTimeout bounds each probe of a tool.
const pythonCheckTimeout = 30 * time.Second

// findPython returns the tools, or why they cannot be had.
func findPython() (PythonTools, string) {
	var tools PythonTools
	var tried []string
	candidates := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv(PythonEnv); p != "" {
		candidates = []string{p}
	}
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		if out, err := runCheck(p, "-c", "import grpc, google.protobuf"); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v: %s", p, err, lastLine(out)))
			continue
		}
		tools.Python = p
		break
	}
	if tools.Python == "" {
		return tools, "no Python 3 that imports grpc and google.protobuf (" + strings.Join(tried, "; ") + ")"
	}

	protoc := "protoc"
	if p := os.Getenv(ProtocEnv); p != "" {
		protoc = p
	}
	p, err := exec.LookPath(protoc)
	if err != nil {
		return tools, fmt.Sprintf("protoc not found (%s or on PATH): %v", ProtocEnv, err)
	}
	tools.Protoc = p

	includes := googleRPCIncludes
	if d := os.Getenv(GoogleRPCProtoEnv); d != "" {
		includes = []string{d}
	}
	for _, d := range includes {
		if _, err := os.Stat(filepath.Join(d, "google", "rpc", "status.proto")); err == nil {
			tools.GoogleRPC = d
			break
		}
	}
	if tools.GoogleRPC == "" {
		return tools, fmt.Sprintf("no google/rpc/status.proto under %s (set %s to its include directory)", strings.Join(includes, ", "), GoogleRPCProtoEnv)
	}

	out, err := os.MkdirTemp("", "granary-protoc-check-")
	if err != nil {
		return tools, err.Error()
	}
	defer os.RemoveAll(out)
	if msg, err := runCheck(tools.Protoc, "-I", tools.GoogleRPC, "--python_out="+out, "google/rpc/status.proto"); err != nil {
		return tools, fmt.Sprintf("%s cannot compile google/rpc/status.proto from %s (are the well-known types, libprotobuf-dev, installed?): %v: %s",
			tools.Protoc, tools.GoogleRPC, err, lastLine(msg))
	}
	return tools, ""
}

// runCheck runs a probe of a tool, bounded by pythonCheckTimeout, and
// returns what it printed.
func runCheck(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pythonCheckTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}
