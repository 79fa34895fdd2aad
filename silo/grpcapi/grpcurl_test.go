package grpcapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/proctest"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// grpcurlResult is what one run of grpcurl printed and how it exited.
type grpcurlResult struct {
	stdout, stderr string
	exit           int
}

func (r grpcurlResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
}

// grpcurl runs the grpcurl binary with args, feeding it stdin, and waits
// at most defaultTestTimeout for it.
func grpcurl(t *testing.T, bin, stdin string, args ...string) grpcurlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	r := grpcurlResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("grpcurl %q did not finish within %v:\n%v", args, defaultTestTimeout, r)
	case errors.As(err, &exit):
		r.exit = exit.ExitCode()
	case err != nil:
		t.Fatalf("grpcurl %q: %v", args, err)
	}
	return r
}

// writeProtoset writes, into a file under dir, the descriptors of
// bank.proto and its imports, with a method and a service the server does
// not have: bank.Account/Close and bank.Vault/Open. grpcurl reads
// descriptors from it instead of asking the server, so it sends those
// calls, and the server's answer can be checked.
func writeProtoset(t *testing.T, dir string) string {
	t.Helper()
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := range fd.Imports().Len() {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(bankpb.File_examples_bank_bank_proto)

	bank := set.File[len(set.File)-1]
	rpc := func(name string) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(name),
			InputType:  proto.String(".bank.GetBalanceRequest"),
			OutputType: proto.String(".bank.Balance"),
		}
	}
	for _, s := range bank.Service {
		if s.GetName() == "Account" {
			s.Method = append(s.Method, rpc("Close"))
		}
	}
	bank.Service = append(bank.Service, &descriptorpb.ServiceDescriptorProto{
		Name:   proto.String("Vault"),
		Method: []*descriptorpb.MethodDescriptorProto{rpc("Open")},
	})

	b, err := proto.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "bank.protoset")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGRPCurl drives the gateway with grpcurl, a client that knows
// nothing of Granary: it lists and describes the services through
// reflection, calls a grain with the key as a header, and reads the codes
// of the calls that fail.
func TestGRPCurl(t *testing.T) {
	bin := proctest.Grpcurl(t)
	g := newGateway(t)
	protoset := writeProtoset(t, t.TempDir())

	t.Run("list", func(t *testing.T) {
		r := grpcurl(t, bin, "", "-plaintext", g.addr, "list")
		if r.exit != 0 {
			t.Fatalf("grpcurl list failed:\n%v", r)
		}
		got := strings.Fields(r.stdout)
		want := []string{
			"bank.Account", "bank.Transfer",
			"grpc.health.v1.Health",
			"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
			"probe.IntKeyedProbe", "probe.KeyedProbe",
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("grpcurl list printed %q, want %q", got, want)
		}
	})

	t.Run("describe", func(t *testing.T) {
		r := grpcurl(t, bin, "", "-plaintext", g.addr, "describe", "bank.Account")
		if r.exit != 0 {
			t.Fatalf("grpcurl describe failed:\n%v", r)
		}
		for _, want := range []string{
			"bank.Account is a service:",
			"service Account {",
			"rpc Deposit ( .bank.DepositRequest ) returns ( .bank.Balance );",
			"rpc GetBalance ( .bank.GetBalanceRequest ) returns ( .bank.Balance ) {",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("grpcurl describe printed no %q:\n%v", want, r)
			}
		}
	})

	t.Run("call", func(t *testing.T) {
		for _, want := range []int64{5, 10} {
			r := grpcurl(t, bin, "", "-plaintext", "-H", "granary-key: alice", "-d", `{"amount": 5}`, g.addr, "bank.Account/Deposit")
			if r.exit != 0 {
				t.Fatalf("grpcurl Deposit failed:\n%v", r)
			}
			got := &bankpb.Balance{}
			if err := protojson.Unmarshal([]byte(r.stdout), got); err != nil {
				t.Fatalf("grpcurl printed a reply that is not a Balance in JSON (%v):\n%v", err, r)
			}
			if w := (&bankpb.Balance{Account: "alice", Amount: want}); !proto.Equal(got, w) {
				t.Errorf("grpcurl Deposit printed %v, want %v", got, w)
			}
		}
	})

	t.Run("key in field", func(t *testing.T) {
		r := grpcurl(t, bin, "", "-plaintext", "-d", `{"name": "zoe"}`, g.addr, "probe.KeyedProbe/Call")
		if r.exit != 0 || !strings.Contains(r.stdout, `"text": "zoe"`) {
			t.Errorf("grpcurl Call with the key in a field: want the reply text zoe, got:\n%v", r)
		}
	})

	errorCases := []struct {
		name  string
		stdin string
		args  []string
		code  string // as grpcurl prints it
		msg   string // a part of the message grpcurl prints
	}{
		{
			name: "missing key",
			args: []string{"-plaintext", "-d", `{"amount": 5}`, g.addr, "bank.Account/Deposit"},
			code: "InvalidArgument",
			msg:  `granary: bank.Account/Deposit needs a grain key: send it as request metadata "granary-key: <key>"`,
		},
		{
			name: "bad int64 key",
			args: []string{"-plaintext", "-H", "granary-key: one", "-d", `{}`, g.addr, "bank.Transfer/Run"},
			code: "InvalidArgument",
			msg:  "granary: bank.Transfer takes int64 keys",
		},
		{
			name: "grain error",
			args: []string{"-plaintext", "-H", "granary-key: nobody", "-d", `{"amount": 1}`, g.addr, "bank.Account/Withdraw"},
			code: "FailedPrecondition",
			msg:  "insufficient funds: balance 0, asked 1",
		},
		{
			name:  "oversize",
			stdin: fmt.Sprintf(`{"name": "big", "text": %q}`, strings.Repeat("x", testMaxRecv)),
			args:  []string{"-plaintext", "-d", "@", g.addr, "probe.KeyedProbe/Call"},
			code:  "ResourceExhausted",
			msg:   "received message larger than max",
		},
		{
			name: "unknown method",
			args: []string{"-plaintext", "-protoset", protoset, "-H", "granary-key: alice", "-d", `{}`, g.addr, "bank.Account/Close"},
			code: "Unimplemented",
			msg:  "unknown method Close for service bank.Account",
		},
		{
			name: "unknown service",
			args: []string{"-plaintext", "-protoset", protoset, "-H", "granary-key: alice", "-d", `{}`, g.addr, "bank.Vault/Open"},
			code: "Unimplemented",
			msg:  "unknown service bank.Vault",
		},
	}
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			r := grpcurl(t, bin, tt.stdin, tt.args...)
			if r.exit == 0 {
				t.Fatalf("grpcurl succeeded, want %s:\n%v", tt.code, r)
			}
			if !strings.Contains(r.stderr, "Code: "+tt.code+"\n") || !strings.Contains(r.stderr, tt.msg) {
				t.Errorf("grpcurl printed no code %s with message %q:\n%v", tt.code, tt.msg, r)
			}
		})
	}
}

// TestGRPCurlDescribesEveryGatewayService: on a silo's own gateway,
// every service that grpcurl lists through reflection can be described,
// the Go clients' granary.v1.Gateway included, with its real methods.
func TestGRPCurlDescribesEveryGatewayService(t *testing.T) {
	bin := proctest.Grpcurl(t)
	cfg := silo.DefaultConfig()
	cfg.Name = "grpcurl-describe"
	gcfg := silo.DefaultGatewayConfig()
	gcfg.Listen = "127.0.0.1:0"
	cfg.Gateway = &gcfg
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := bankpb.RegisterAccountGrain(s, func(id grain.ID) bankpb.AccountGrain { return &account{name: id.Key} }); err != nil {
		t.Fatal(err)
	}
	if err := probe.RegisterKeyedProbeGrain(s, func(grain.ID) probe.KeyedProbeGrain { return &keyedProbe{p: newProbes()} }); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(testContext(t)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(testContext(t)); err != nil {
			t.Errorf("silo stop: %v", err)
		}
	}()

	r := grpcurl(t, bin, "", "-plaintext", s.GatewayAddr(), "list")
	if r.exit != 0 {
		t.Fatalf("grpcurl list failed:\n%v", r)
	}
	services := strings.Fields(r.stdout)
	want := []string{
		"bank.Account", "granary.v1.Gateway", "grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
		"probe.KeyedProbe",
	}
	if strings.Join(services, " ") != strings.Join(want, " ") {
		t.Errorf("grpcurl list printed %q, want %q", services, want)
	}
	described := map[string]string{}
	for _, svc := range services {
		r := grpcurl(t, bin, "", "-plaintext", s.GatewayAddr(), "describe", svc)
		if r.exit != 0 || !strings.Contains(r.stdout, svc+" is a service:") {
			t.Errorf("grpcurl describe %s did not describe a service:\n%v", svc, r)
		}
		described[svc] = r.stdout
	}
	for _, want := range []string{
		"service Gateway {",
		"rpc Connect ( stream .granary.v1.Batch ) returns ( stream .granary.v1.Batch );",
		"rpc Gateways ( .granary.v1.GatewaysRequest ) returns ( .granary.v1.GatewaysResponse );",
	} {
		if !strings.Contains(described["granary.v1.Gateway"], want) {
			t.Errorf("grpcurl describe granary.v1.Gateway printed no %q:\n%s", want, described["granary.v1.Gateway"])
		}
	}
	// Its health is that of the other services.
	r = grpcurl(t, bin, "", "-plaintext", "-d", `{"service": "granary.v1.Gateway"}`, s.GatewayAddr(), "grpc.health.v1.Health/Check")
	if r.exit != 0 || !strings.Contains(r.stdout, `"status": "SERVING"`) {
		t.Errorf("grpcurl health check of granary.v1.Gateway:\n%v", r)
	}
	// The messages of its methods resolve too.
	r = grpcurl(t, bin, "", "-plaintext", s.GatewayAddr(), "describe", "granary.v1.GatewaysResponse")
	if r.exit != 0 || !strings.Contains(r.stdout, "repeated .granary.v1.GatewayEndpoint gateways = 2;") {
		t.Errorf("grpcurl describe granary.v1.GatewaysResponse:\n%v", r)
	}
}
