// Package python holds the test of the Python client example: client.py,
// with nothing but Debian's grpcio and protobuf modules and message
// classes that protoc makes from the repository's .proto files, calls the
// Greeter grain of package examples/python/greeter through a silo's
// gateway that requires bearer tokens.
package python

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/examples/python/greeter"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/proctest"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/security/certs"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/host"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
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
// error_details.proto into a directory of the test, and returns it. It
// runs stubs.sh, as run.sh does, so that the two run the same protoc.
func generateStubs(t *testing.T, tools proctest.PythonTools) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	out := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "stubs.sh", out)
	cmd.Env = tools.Env()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stubs.sh: %v\n%s", err, msg)
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
	addr, _ := startStreamSilo(t, certFile, keyFile, tokenFile)
	return addr
}

// startStreamSilo is startSilo, whose silo also runs the durable stream
// provider "logged" (in its memory store), and which returns the silo.
func startStreamSilo(t *testing.T, certFile, keyFile, tokenFile string) (string, *silo.Silo) {
	t.Helper()
	cfg := host.DefaultConfig()
	cfg.Name = "python-test"
	cfg.Log.Level = "error"
	cfg.Admin.Listen = ""
	cfg.Gateway.Listen = "127.0.0.1:0"
	cfg.Gateway.TLS = host.TLSConfig{Mode: "tls", CertFile: certFile, KeyFile: keyFile}
	cfg.Gateway.Auth.TokenFile = tokenFile
	cfg.Storage.Provider = "memory"
	cfg.Streams.DurableProvider = "logged"
	cfg.Shutdown.Timeout = defaultTestTimeout / 2

	ctx, stop := context.WithCancel(context.Background())
	started := make(chan *silo.Silo, 1)
	done := make(chan struct{})
	var runErr error // set before done is closed
	go func() {
		defer close(done)
		runErr = host.Run(ctx, cfg, greeter.Register, host.WithLogger(zap.NewNop()),
			host.WithRegistry(prometheus.NewRegistry()),
			host.WithStarted(func(s *silo.Silo) { started <- s }))
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
	case s := <-started:
		return s.Info().GatewayAddr, s
	case <-done:
		t.Fatalf("the silo's host returned before the silo started: %v", runErr)
	case <-time.After(defaultTestTimeout):
		t.Fatalf("the silo did not start within %v", defaultTestTimeout)
	}
	return "", nil
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

// execClient runs client.py --json with args and returns what it printed
// on stdout and stderr and its exit status.
func execClient(t *testing.T, python string, args ...string) (stdout, stderr string, exit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"client.py", "--json"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRANARY_TOKEN_FILE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("client.py %q did not finish within %v\nstdout:\n%s\nstderr:\n%s", args, defaultTestTimeout, &out, &errOut)
	case errors.As(err, &ee):
		exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("client.py %q: %v", args, err)
	}
	return out.String(), errOut.String(), exit
}

// runClient runs client.py --json with args and returns the outcome it
// printed, what it printed on stderr, and its exit status.
func runClient(t *testing.T, python string, args ...string) (o outcome, stderr string, exit int) {
	t.Helper()
	stdout, stderr, exit := execClient(t, python, args...)
	if err := json.Unmarshal([]byte(stdout), &o); err != nil {
		t.Fatalf("client.py %q exited %d printing no JSON outcome (%v)\nstdout:\n%s\nstderr:\n%s", args, exit, err, stdout, stderr)
	}
	if stderr != "" {
		t.Logf("client.py %q stderr:\n%s", args, stderr)
	}
	return o, stderr, exit
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
	pb := generateStubs(t, tools)
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
			o, _, exit := runClient(t, tools.Python, tt.args...)
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

// TestPythonClientFollowsADurableStream: client.py subscribes to a
// durable stream through the gateway, rewound to its second event, and
// prints each event as JSON of the stream's own type, in order, until
// --count of them came.
func TestPythonClientFollowsADurableStream(t *testing.T) {
	tools := proctest.Python(t)
	pb := generateStubs(t, tools)
	caFile, certFile, keyFile := writePKI(t)
	addr, s := startStreamSilo(t, certFile, keyFile, writeFile(t, "tokens", testToken+" "+testPrincipal+"\n"))
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	greetings := streams.Get[*hellopb.HelloReply](s, "logged", "greetings", "Bob")
	var toks []streams.Token
	for i := range 3 {
		tok, err := greetings.Publish(ctx, &hellopb.HelloReply{Message: "Hello, Bob!", Count: int64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	req := fmt.Sprintf(`{"stream": "logged/greetings/Bob", "from": {"sequence": "%d"}}`, toks[1].Sequence)
	stdout, stderr, exit := execClient(t, tools.Python, "--pb", pb, "--target", addr, "--ca", caFile,
		"--token-file", writeFile(t, "token", testToken+"\n"), "--count", "2", "granary.v1.StreamGateway/Subscribe", req)
	if exit != 0 {
		t.Fatalf("client.py exited %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("client.py printed %d lines, want one for each of 2 events\n%s", len(lines), stdout)
	}
	for i, line := range lines {
		var o outcome
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("line %d, %s, is not an outcome: %v", i, line, err)
		}
		var item struct {
			Token struct {
				Sequence string `json:"sequence"`
			} `json:"token"`
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal(o.Reply, &item); err != nil {
			t.Fatalf("line %d's reply %s: %v", i, o.Reply, err)
		}
		a := &anypb.Any{}
		if err := protojson.Unmarshal(item.Event, a); err != nil {
			t.Fatalf("line %d's event %s is not typed JSON: %v", i, item.Event, err)
		}
		got, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		want := &hellopb.HelloReply{Message: "Hello, Bob!", Count: int64(i + 2)}
		if !proto.Equal(got, want) || item.Token.Sequence != fmt.Sprint(toks[i+1].Sequence) {
			t.Errorf("event %d: %v with token %s; want %v with token %d", i, got, item.Token.Sequence, want, toks[i+1].Sequence)
		}
	}
}

// TestPythonClientSetupErrors runs client.py with bad flags, files and
// modules: each must exit 2 with one line on stderr that names the
// problem, not a Python traceback, and print nothing on stdout. None gets
// as far as a call, so no silo runs.
func TestPythonClientSetupErrors(t *testing.T) {
	tools := proctest.Python(t)
	pb := generateStubs(t, tools)

	// A module that does not import, as under a --pb of the wrong directory.
	brokenPB := t.TempDir()
	if err := os.WriteFile(filepath.Join(brokenPB, "broken_pb2.py"), []byte("import granary_no_such_module\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A module whose directory is no Python module name.
	dashedPB := t.TempDir()
	if err := os.Mkdir(filepath.Join(dashedPB, "not-a-package"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dashedPB, "not-a-package", "x_pb2.py"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	notASCII := writeFile(t, "token-latin1", "t\xf6ken\n")
	control := writeFile(t, "token-control", "secret\x01token\n")

	call := func(pb string, flags ...string) []string {
		args := append([]string{"--pb", pb, "--target", "127.0.0.1:1"}, flags...)
		return append(args, "hello.Greeter/SayHello", `{"name": "Bob"}`)
	}
	tests := []struct {
		name string
		args []string
		want []string // parts of the message
		not  string   // what the message must not show
	}{
		{name: "key with a newline", args: call(pb, "--key", "a\nb"), want: []string{"--key", "printable ASCII"}},
		{name: "key not ASCII", args: call(pb, "--key", "\u00e5lice"), want: []string{"--key", "printable ASCII"}},
		{name: "timeout nan", args: call(pb, "--timeout", "nan"), want: []string{"--timeout nan", "finite"}},
		{name: "timeout inf", args: call(pb, "--timeout", "inf"), want: []string{"--timeout inf", "finite"}},
		{name: "timeout negative", args: call(pb, "--timeout", "-1"), want: []string{"--timeout -1", "above 0"}},
		{name: "timeout zero", args: call(pb, "--timeout", "0"), want: []string{"--timeout 0", "above 0"}},
		{name: "module that does not import", args: call(brokenPB),
			want: []string{"--pb " + brokenPB, "broken_pb2.py", "granary_no_such_module"}},
		{name: "module under a bad name", args: call(dashedPB), want: []string{"--pb " + dashedPB, "x_pb2.py", "not-a-package"}},
		{name: "pb not a directory", args: call(notASCII), want: []string{"--pb " + notASCII, "not a directory"}},
		{name: "token not ASCII", args: call(pb, "--token-file", notASCII), want: []string{"--token-file " + notASCII, "not ASCII"}},
		{name: "token with a control character", args: call(pb, "--token-file", control),
			want: []string{"--token-file " + control, "printable ASCII"}, not: "secret"},
		{name: "no CA file", args: call(pb, "--ca", filepath.Join(t.TempDir(), "ca.crt")), want: []string{"--ca ", "ca.crt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, exit := execClient(t, tools.Python, tt.args...)
			if exit != 2 {
				t.Errorf("client.py exited %d; want 2", exit)
			}
			if stdout != "" {
				t.Errorf("client.py printed on stdout:\n%s", stdout)
			}
			if strings.Contains(stderr, "Traceback") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Errorf("client.py printed a traceback or more than one line on stderr:\n%s", stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if tt.not != "" && strings.Contains(stderr, tt.not) {
				t.Errorf("stderr %q shows %q", stderr, tt.not)
			}
		})
	}
}

// TestPythonClientBadStatusDetails answers client.py's call, from an
// HTTP/2 server standing in for a gateway, with INVALID_ARGUMENT and a
// grpc-status-details-bin trailer that is no google.rpc.Status: the
// client must warn about the trailer and still report the call's code and
// message, exiting 1.
func TestPythonClientBadStatusDetails(t *testing.T) {
	tools := proctest.Python(t)
	pb := generateStubs(t, tools)
	caFile, certFile, keyFile := writePKI(t)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 || r.Header.Get("Content-Type") != "application/grpc" {
			http.Error(w, "want gRPC over HTTP/2", http.StatusBadRequest)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", fmt.Sprint(int(codes.InvalidArgument)))
		w.Header().Set(http.TrailerPrefix+"Grpc-Message", "bad%20details")
		// Not a google.rpc.Status: a field tag whose varint never ends.
		w.Header().Set(http.TrailerPrefix+"Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString([]byte{0xff, 0xff, 0xff}))
		w.WriteHeader(http.StatusOK)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	o, stderr, exit := runClient(t, tools.Python, "--pb", pb, "--target", srv.Listener.Addr().String(), "--ca", caFile,
		"--key", "alice", "hello.Greeter/SayHello", `{"name": "Bob"}`)
	if exit != 1 {
		t.Errorf("client.py exited %d; want 1", exit)
	}
	if o.Code != "INVALID_ARGUMENT" || o.Message != "bad details" || len(o.Details) != 0 {
		t.Errorf("client.py printed code %s, message %q, details %s; want INVALID_ARGUMENT, %q, none", o.Code, o.Message, o.Details, "bad details")
	}
	if !strings.Contains(stderr, "grpc-status-details-bin") || strings.Contains(stderr, "Traceback") {
		t.Errorf("client.py's stderr does not warn about the trailer, or holds a traceback:\n%s", stderr)
	}
}
