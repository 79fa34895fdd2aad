package grpcapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/grpcapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestCalls checks calls that reach a grain through a plain gRPC client:
// the key from the metadata, from the key field or from both, and the
// grain's reply.
func TestCalls(t *testing.T) {
	g := newGateway(t)
	ctx := testContext(t)
	tests := []struct {
		name   string
		method string
		req    proto.Message
		md     []string
		reply  proto.Message // an empty message of the reply type
		want   proto.Message
	}{
		{
			name:   "key in metadata",
			method: "/bank.Account/Deposit",
			req:    &bankpb.DepositRequest{Amount: 5},
			md:     []string{grpcapi.KeyHeader, "alice"},
			reply:  &bankpb.Balance{},
			want:   &bankpb.Balance{Account: "alice", Amount: 5},
		},
		{
			name:   "same grain again",
			method: "/bank.Account/Deposit",
			req:    &bankpb.DepositRequest{Amount: 7},
			md:     []string{grpcapi.KeyHeader, "alice"},
			reply:  &bankpb.Balance{},
			want:   &bankpb.Balance{Account: "alice", Amount: 12},
		},
		{
			name:   "key in field",
			method: "/probe.KeyedProbe/Call",
			req:    &probe.KeyedRequest{Name: "bob"},
			reply:  &probe.Reply{},
			want:   &probe.Reply{Text: "bob"},
		},
		{
			name:   "same key in field and metadata",
			method: "/probe.KeyedProbe/Call",
			req:    &probe.KeyedRequest{Name: "bob"},
			md:     []string{grpcapi.KeyHeader, "bob"},
			reply:  &probe.Reply{},
			want:   &probe.Reply{Text: "bob"},
		},
		{
			name:   "empty key field and key in metadata",
			method: "/probe.KeyedProbe/Call",
			req:    &probe.KeyedRequest{},
			md:     []string{grpcapi.KeyHeader, "carol"},
			reply:  &probe.Reply{},
			want:   &probe.Reply{Text: "carol"},
		},
		{
			name:   "int64 key in field",
			method: "/probe.IntKeyedProbe/Call",
			req:    &probe.IntKeyedRequest{Id: 42},
			reply:  &probe.Reply{},
			want:   &probe.Reply{Text: "42"},
		},
		{
			name:   "negative int64 key in field",
			method: "/probe.IntKeyedProbe/Call",
			req:    &probe.IntKeyedRequest{Id: -7},
			reply:  &probe.Reply{},
			want:   &probe.Reply{Text: "-7"},
		},
		{
			name:   "int64 key in metadata",
			method: "/probe.IntKeyedProbe/Call",
			req:    &probe.IntKeyedRequest{},
			md:     []string{grpcapi.KeyHeader, "9"},
			reply:  &probe.Reply{},
			want:   &probe.Reply{Text: "9"},
		},
		{
			name:   "nil reply",
			method: "/probe.KeyedProbe/Call",
			req:    &probe.KeyedRequest{Name: "dave", Tag: "nil"},
			reply:  &probe.Reply{Text: "stale"},
			want:   &probe.Reply{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := g.invoke(ctx, tt.method, tt.req, tt.reply, tt.md...); err != nil {
				t.Fatalf("%s: %v", tt.method, err)
			}
			if !proto.Equal(tt.reply, tt.want) {
				t.Errorf("%s replied %v, want %v", tt.method, tt.reply, tt.want)
			}
		})
	}
}

// TestCallErrors checks the calls that fail, each with its gRPC code and
// a message that names the problem.
func TestCallErrors(t *testing.T) {
	g := newGateway(t)
	ctx := testContext(t)
	tests := []struct {
		name   string
		method string
		req    proto.Message
		md     []string
		code   codes.Code
		msg    string // the message, or a part of it when partial
		exact  bool
	}{
		{
			name:   "missing key",
			method: "/bank.Account/Deposit",
			req:    &bankpb.DepositRequest{Amount: 5},
			code:   codes.InvalidArgument,
			msg:    `granary: bank.Account/Deposit needs a grain key: send it as request metadata "granary-key: <key>"`,
			exact:  true,
		},
		{
			name:   "missing key with a key field",
			method: "/probe.KeyedProbe/Call",
			req:    &probe.KeyedRequest{},
			code:   codes.InvalidArgument,
			msg:    `granary: probe.KeyedProbe/Call needs a grain key: set the request field name (probe.KeyedRequest.name), or send it as request metadata "granary-key: <key>"`,
			exact:  true,
		},
		{
			name:   "empty key in metadata",
			method: "/bank.Account/Deposit",
			req:    &bankpb.DepositRequest{Amount: 5},
			md:     []string{grpcapi.KeyHeader, ""},
			code:   codes.InvalidArgument,
			msg:    `needs a grain key: send it as request metadata "granary-key: <key>"`,
		},
		{
			name:   "conflicting keys",
			method: "/probe.KeyedProbe/Call",
			req:    &probe.KeyedRequest{Name: "bob"},
			md:     []string{grpcapi.KeyHeader, "eve"},
			code:   codes.InvalidArgument,
			msg:    `granary: probe.KeyedProbe/Call got two grain keys that differ: "bob" in the request field name and "eve" in the request metadata "granary-key"`,
		},
		{
			name:   "key in metadata twice",
			method: "/bank.Account/Deposit",
			req:    &bankpb.DepositRequest{Amount: 5},
			md:     []string{grpcapi.KeyHeader, "alice", grpcapi.KeyHeader, "alice"},
			code:   codes.InvalidArgument,
			msg:    `got the request metadata "granary-key" 2 times`,
		},
		{
			name:   "bad int64 key",
			method: "/bank.Transfer/Run",
			req:    &bankpb.TransferRequest{},
			md:     []string{grpcapi.KeyHeader, "abc"},
			code:   codes.InvalidArgument,
			msg:    `granary: bank.Transfer takes int64 keys: grain: bad key: "abc" is not a decimal int64`,
			exact:  true,
		},
		{
			name:   "int64 key with a leading zero",
			method: "/probe.IntKeyedProbe/Call",
			req:    &probe.IntKeyedRequest{},
			md:     []string{grpcapi.KeyHeader, "042"},
			code:   codes.InvalidArgument,
			msg:    `granary: probe.IntKeyedProbe takes int64 keys`,
		},
		{
			name:   "grain error",
			method: "/bank.Account/Withdraw",
			req:    &bankpb.WithdrawRequest{Amount: 1},
			md:     []string{grpcapi.KeyHeader, "frank"},
			code:   codes.FailedPrecondition,
			msg:    "insufficient funds: balance 0, asked 1",
			exact:  true,
		},
		{
			name:   "grain's own Unimplemented",
			method: "/bank.Transfer/Run",
			req:    &bankpb.TransferRequest{},
			md:     []string{grpcapi.KeyHeader, "1"},
			code:   codes.Unimplemented,
			msg:    "granary: method Run of bank.Transfer is not implemented",
			exact:  true,
		},
		{
			name:   "unknown method",
			method: "/bank.Account/Close",
			req:    &bankpb.GetBalanceRequest{},
			md:     []string{grpcapi.KeyHeader, "alice"},
			code:   codes.Unimplemented,
			msg:    "unknown method Close for service bank.Account",
		},
		{
			name:   "unknown service",
			method: "/bank.Vault/Open",
			req:    &bankpb.GetBalanceRequest{},
			md:     []string{grpcapi.KeyHeader, "alice"},
			code:   codes.Unimplemented,
			msg:    "unknown service bank.Vault",
		},
		{
			name:   "oversize request",
			method: "/probe.KeyedProbe/Call",
			req:    &probe.KeyedRequest{Name: "big", Text: strings.Repeat("x", testMaxRecv)},
			code:   codes.ResourceExhausted,
			msg:    "received message larger than max",
		},
		{
			name:   "refused by the interceptor",
			method: "/bank.Account/Deposit",
			req:    &bankpb.DepositRequest{Amount: 5},
			md:     []string{grpcapi.KeyHeader, "alice", denyHeader, "yes"},
			code:   codes.PermissionDenied,
			msg:    "test interceptor: denied",
			exact:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := g.invoke(ctx, tt.method, tt.req, &emptypb.Empty{}, tt.md...)
			st := status.Convert(err)
			if st.Code() != tt.code {
				t.Fatalf("%s: got %v, want code %v", tt.method, err, tt.code)
			}
			if tt.exact && st.Message() != tt.msg || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("%s: got message %q, want %q", tt.method, st.Message(), tt.msg)
			}
		})
	}
}

// TestOneWay checks that a one-way method replies with an empty response
// and that the grain runs the call.
func TestOneWay(t *testing.T) {
	g := newGateway(t)
	ctx := testContext(t)
	reply := &emptypb.Empty{}
	if err := g.invoke(ctx, "/probe.KeyedProbe/Tell", &probe.KeyedRequest{Text: "hello"}, reply, grpcapi.KeyHeader, "gina"); err != nil {
		t.Fatalf("Tell: %v", err)
	}
	if got := receive(t, g.p.told, "the one-way call to run"); got != (told{key: "gina", text: "hello"}) {
		t.Errorf("grain ran %+v, want key gina and text hello", got)
	}
}

// TestDeadline checks that the client's deadline reaches the grain.
func TestDeadline(t *testing.T) {
	g := newGateway(t)
	ctx := testContext(t)
	want, _ := ctx.Deadline()
	reply := &probe.Reply{}
	if err := g.invoke(ctx, "/probe.KeyedProbe/Call", &probe.KeyedRequest{Name: "hal", Tag: "deadline"}, reply); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if reply.GetN() == 0 {
		t.Fatal("the grain's context has no deadline")
	}
	// gRPC sends the time left, so the deadline moves by the time the
	// request takes to arrive.
	if got := time.Unix(0, reply.GetN()); got.Sub(want).Abs() > time.Second {
		t.Errorf("the grain's deadline is %v, want about the client's %v", got, want)
	}
}

// TestDeadlineExceeded checks that a call outliving its deadline fails
// with DeadlineExceeded and that the grain's context ends with it. The
// deadline leaves the call ample time to reach the grain, which waits for
// its context to end.
func TestDeadlineExceeded(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithTimeout(testContext(t), 500*time.Millisecond)
	defer cancel()
	err := g.invoke(ctx, "/probe.KeyedProbe/Call", &probe.KeyedRequest{Name: "ida", Tag: "wait"}, &probe.Reply{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	receive(t, g.p.waiting, "the call to reach the grain")
	if err := receive(t, g.p.ended, "the grain's context to end"); err == nil {
		t.Error("the grain's context ended without an error")
	}
}

// TestCancel checks that a client that gives up cancels the grain's
// context.
func TestCancel(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- g.invoke(ctx, "/probe.KeyedProbe/Call", &probe.KeyedRequest{Name: "jo", Tag: "wait"}, &probe.Reply{})
	}()
	if key := receive(t, g.p.waiting, "the call to reach the grain"); key != "jo" {
		t.Fatalf("grain %q waits, want jo", key)
	}
	cancel()
	if err := receive(t, done, "the call to return"); status.Code(err) != codes.Canceled {
		t.Errorf("got %v, want Canceled", err)
	}
	if err := receive(t, g.p.ended, "the grain's context to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("the grain's context ended with %v, want %v", err, context.Canceled)
	}
}

// TestInterceptor checks that the server's interceptor sees each call with
// the method's full name and the grain type's descriptor.
func TestInterceptor(t *testing.T) {
	g := newGateway(t)
	ctx := testContext(t)
	if err := g.invoke(ctx, "/bank.Account/Deposit", &bankpb.DepositRequest{Amount: 1}, &bankpb.Balance{}, grpcapi.KeyHeader, "kim"); err != nil {
		t.Fatalf("Deposit: %v", err)
	}
	if err := g.invoke(ctx, "/probe.IntKeyedProbe/Call", &probe.IntKeyedRequest{Id: 1}, &probe.Reply{}); err != nil {
		t.Fatalf("Call: %v", err)
	}
	want := []string{"/bank.Account/Deposit served by bank.Account", "/probe.IntKeyedProbe/Call served by probe.IntKeyedProbe"}
	if got := g.calls(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("interceptor saw %q, want %q", got, want)
	}
}

// TestHealth checks the health service that RegisterDiscovery adds: the
// server and every grain service registered before it are serving.
func TestHealth(t *testing.T) {
	g := newGateway(t)
	ctx := testContext(t)
	hc := healthpb.NewHealthClient(g.cc)
	for _, name := range []string{"", "bank.Account", "bank.Transfer", "probe.KeyedProbe", "probe.IntKeyedProbe"} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Errorf("health of %q: %v", name, err)
			continue
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q is %v, want SERVING", name, resp.GetStatus())
		}
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "bank.Vault"}); status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service: got %v, want NotFound", err)
	}
}

// rawCodec sends a []byte as the request exactly as given, so a test can
// send bytes that are not a protobuf message.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestUnparseableRequestIsInvalidArgument: bytes that do not decode as
// the method's request are the caller's fault: InvalidArgument naming
// the request type, and the grain is not called.
func TestUnparseableRequestIsInvalidArgument(t *testing.T) {
	g := newGateway(t)
	ctx := metadata.AppendToOutgoingContext(testContext(t), grpcapi.KeyHeader, "alice")
	var reply []byte
	err := g.cc.Invoke(ctx, "/bank.Account/Deposit", []byte{0xff, 0xff, 0xff}, &reply, grpc.ForceCodecV2(rawCodec{}))
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "does not decode as bank.DepositRequest") {
		t.Fatalf("unparseable request: %v %q; want InvalidArgument naming bank.DepositRequest", st.Code(), st.Message())
	}
	for _, c := range g.calls() {
		if strings.Contains(c, "Deposit") {
			t.Fatalf("the grain was called: %q", g.calls())
		}
	}
}
