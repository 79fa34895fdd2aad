// Package python holds the test of the Python client example: client.py,
// with nothing but Debian's grpcio and protobuf modules and message
// classes that protoc makes from the repository's .proto files, calls the
// Greeter grain of package examples/python/greeter through a silo's
// gateway that requires bearer tokens.
package python

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/examples/python/greeter"
	"github.com/granaryio/granary/internal/proctest"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/host"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// defaultTestTimeout bounds every wait of the test: the stub generation,
// the silo's start and stop, and each run of the client.
const defaultTestTimeout = time.Minute

// The gateway's one token, and its principal.
const (
	testToken     = "python-example-test-token"
	testPrincipal = "python"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// generateStubs writes the Python message classes of every .proto file
// under the repository's proto/ and of google/rpc/status.proto and
// error_details.proto into a directory of the test, and returns it.
func generateStubs(t *testing.T, ctx context.Context, tools proctest.PythonTools) string {
	t.Helper()
	protoDir, err := filepath.Abs(filepath.Join("..", "..", "proto"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(protoDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") {
			rel, _ := filepath.Rel(protoDir, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	args := append([]string{"-I", protoDir, "-I", tools.GoogleRPC, "--python_out=" + out}, files...)
	args = append(args, "google/rpc/status.proto", "google/rpc/error_details.proto")
	if msg, err := exec.CommandContext(ctx, tools.Protoc, args...).CombinedOutput(); err != nil {
		t.Fatalf("protoc %q: %v\n%s", args, err, msg)
	}
	return out
}

// writePKI writes a CA and, signed by it, a server certificate for
// 127.0.0.1 and localhost into a directory of the test, and returns the
// files.
func writePKI(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	ca, err := certs.NewCA("granary python test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if caFile, _, err = ca.WriteCA(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(certs.LeafOptions{CommonName: "python-test", IPs: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames: []string{"localhost"}, Usage: certs.ServerAuth})
	if err != nil {
		t.Fatal(err)
	}
	if certFile, keyFile, err = leaf.Write(dir, "gateway"); err != nil {
		t.Fatal(err)
	}
	return caFile, certFile, keyFile
}

// startSilo runs a silo alone in this process, as the example's silo
// program does, with its gateway on a loopback port, serving TLS with
// certFile and keyFile and taking the bearer tokens of tokenFile, and
// returns the gateway's address. The silo stops when the test ends.
func startSilo(t *testing.T, certFile, keyFile, tokenFile string) string {
	t.Helper()
	cfg := host.DefaultConfig()
	cfg.Name = "python-test"
	cfg.Log.Level = "error"
	cfg.Admin.Listen = ""
	cfg.Gateway.Listen = "127.0.0.1:0"
	cfg.Gateway.TLS = host.TLSConfig{Mode: "tls", CertFile: certFile, KeyFile: keyFile}
	cfg.Gateway.Auth.TokenFile = tokenFile
	cfg.Storage.Provider = "memory"
	cfg.Shutdown.Timeout = defaultTestTimeout / 2

	ctx, stop := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := make(chan struct{})
	var runErr error // set before done is closed
	go func() {
		defer close(done)
		runErr = host.Run(ctx, cfg, greeter.Register, host.WithLogger(zap.NewNop()),
			host.WithRegistry(prometheus.NewRegistry()),
			host.WithStarted(func(s *silo.Silo) { started <- s.Info().GatewayAddr }))
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
			if runErr != nil {
				t.Errorf("the silo's host: %v", runErr)
			}
		case <-time.After(defaultTestTimeout):
			t.Errorf("the silo did not stop within %v", defaultTestTimeout)
		}
	})
	select {
	case addr := <-started:
		return addr
	case <-done:
		t.Fatalf("the silo's host returned before the silo started: %v", runErr)
	case <-time.After(defaultTestTimeout):
		t.Fatalf("the silo did not start within %v", defaultTestTimeout)
	}
	return ""
}

// outcome is what client.py --json prints about a call.
type outcome struct {
	Method  string            `json:"method"`
	Key     *string           `json:"key"`
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Reply   json.RawMessage   `json:"reply"`
	Details []json.RawMessage `json:"details"`
}

// runClient runs client.py --json with args and returns what it printed
// and its exit status.
func runClient(t *testing.T, python string, args ...string) (outcome, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"client.py", "--json"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRANARY_TOKEN_FILE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	exit := 0
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("client.py %q did not finish within %v\nstdout:\n%s\nstderr:\n%s", args, defaultTestTimeout, &stdout, &stderr)
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("client.py %q: %v", args, err)
	}
	var o outcome
	if err := json.Unmarshal(stdout.Bytes(), &o); err != nil {
		t.Fatalf("client.py %q exited %d printing no JSON outcome (%v)\nstdout:\n%s\nstderr:\n%s", args, exit, err, &stdout, &stderr)
	}
	if stderr.Len() > 0 {
		t.Logf("client.py %q stderr:\n%s", args, &stderr)
	}
	return o, exit
}

// writeFile writes text to a new file of the test and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPythonClient drives a gateway that requires bearer tokens with
// client.py: a call without a token or with a wrong one is refused with
// UNAUTHENTICATED; with the token, calls reach the greeter their
// granary-key names; and a grain's error reaches Python with its code,
// message and google.rpc.BadRequest detail. Without Python, grpcio or
// protoc (see proctest.Python) the test is skipped, or fails when
// GRANARY_TEST_PYTHON_REQUIRED=1.
func TestPythonClient(t *testing.T) {
	tools := proctest.Python(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	pb := generateStubs(t, ctx, tools)
	caFile, certFile, keyFile := writePKI(t)
	addr := startSilo(t, certFile, keyFile, writeFile(t, "tokens", "# the test's clients\n"+testToken+" "+testPrincipal+"\n"))
	good := writeFile(t, "token", testToken+"\n")
	wrong := writeFile(t, "wrong-token", "not-the-python-example-test-token\n")

	base := []string{"--pb", pb, "--target", addr, "--ca", caFile}
	sayHello := func(token, key, name string) []string {
		args := append([]string(nil), base...)
		if token != "" {
			args = append(args, "--token-file", token)
		}
		if key != "" {
			args = append(args, "--key", key)
		}
		return append(args, "hello.Greeter/SayHello", fmt.Sprintf(`{"name": %q}`, name))
	}

	// The cases run in order: each greeter counts its greetings.
	tests := []struct {
		name    string
		args    []string
		code    string
		msg     string              // a part of the error message
		reply   *hellopb.HelloReply // on success
		details []proto.Message     // on failure
	}{
		{name: "no token", args: sayHello("", "alice", "Bob"), code: "UNAUTHENTICATED"},
		{name: "wrong token", args: sayHello(wrong, "alice", "Bob"), code: "UNAUTHENTICATED"},
		{name: "greeting", args: sayHello(good, "alice", "Bob"), code: "OK",
			reply: &hellopb.HelloReply{Message: "Hello, Bob!", Count: 1}},
		{name: "same greeter", args: sayHello(good, "alice", "Carol"), code: "OK",
			reply: &hellopb.HelloReply{Message: "Hello, Carol!", Count: 2}},
		{name: "another greeter", args: sayHello(good, "bob", "Dave"), code: "OK",
			reply: &hellopb.HelloReply{Message: "Hello, Dave!", Count: 1}},
		{name: "no key", args: sayHello(good, "", "Eve"), code: "INVALID_ARGUMENT", msg: `send it as request metadata "granary-key: <key>"`},
		{name: "error with details", args: sayHello(good, "alice", ""), code: "INVALID_ARGUMENT", msg: greeter.NoNameMessage,
			details: []proto.Message{&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
				{Field: "name", Description: greeter.NoNameDescription},
			}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, exit := runClient(t, tools.Python, tt.args...)
			if wantExit := map[bool]int{true: 0, false: 1}[tt.code == "OK"]; exit != wantExit {
				t.Errorf("client.py exited %d; want %d", exit, wantExit)
			}
			if o.Method != "hello.Greeter/SayHello" || o.Code != tt.code || !strings.Contains(o.Message, tt.msg) {
				t.Fatalf("client.py printed method %q, code %s, message %q; want hello.Greeter/SayHello, %s with a message holding %q",
					o.Method, o.Code, o.Message, tt.code, tt.msg)
			}
			if tt.reply != nil {
				got := &hellopb.HelloReply{}
				if err := protojson.Unmarshal(o.Reply, got); err != nil {
					t.Fatalf("the reply %s is not a HelloReply in JSON: %v", o.Reply, err)
				}
				if !proto.Equal(got, tt.reply) {
					t.Errorf("reply %v; want %v", got, tt.reply)
				}
			}
			if len(o.Details) != len(tt.details) {
				t.Fatalf("details %s; want %d (%v)", o.Details, len(tt.details), tt.details)
			}
			for i, raw := range o.Details {
				a := &anypb.Any{}
				if err := protojson.Unmarshal(raw, a); err != nil {
					t.Fatalf("detail %d, %s, is not a google.protobuf.Any in JSON: %v", i, raw, err)
				}
				got, err := a.UnmarshalNew()
				if err != nil {
					t.Fatalf("detail %d, %s: %v", i, raw, err)
				}
				if !proto.Equal(got, tt.details[i]) {
					t.Errorf("detail %d: %v; want %v", i, got, tt.details[i])
				}
			}
		})
	}
}
