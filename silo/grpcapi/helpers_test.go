package grpcapi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	bankpb "github.com/granaryio/granary/proto/examples/bank"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/grpcapi"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// defaultTestTimeout bounds every wait in these tests: a test that needs
// it has failed.
const defaultTestTimeout = 10 * time.Second

// testMaxRecv is the test server's grpc.MaxRecvMsgSize, small so that an
// oversize request is cheap to make.
const testMaxRecv = 4 << 10

// denyHeader is request metadata that makes the test server's interceptor
// refuse the call with PermissionDenied before any grain sees it.
const denyHeader = "x-test-deny"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// servedTypes are the grain types the test gateway serves.
var servedTypes = []*grain.ServiceDesc{
	&bankpb.Account_ServiceDesc,
	&bankpb.Transfer_ServiceDesc,
	&probe.KeyedProbe_ServiceDesc,
	&probe.IntKeyedProbe_ServiceDesc,
}

// A gateway is a started silo alone, hosting the test grains, behind a
// grpc.Server on a loopback port that serves them with Register and
// RegisterDiscovery, and a plain client connection to it. newGateway
// stops all of it when the test ends.
type gateway struct {
	t    *testing.T
	addr string
	cc   *grpc.ClientConn
	p    *probes

	mu          sync.Mutex
	intercepted []string // "full method served by type", per call the interceptor saw
}

// newGateway starts a gateway.
func newGateway(t *testing.T) *gateway {
	t.Helper()
	g := &gateway{t: t, p: newProbes()}
	cfg := silo.DefaultConfig()
	cfg.Name = "grpcapi-test"
	s := startSilo(t, cfg, func(s *silo.Silo) error {
		return errors.Join(
			bankpb.RegisterAccountGrain(s, func(id grain.ID) bankpb.AccountGrain { return &account{name: id.Key} }),
			bankpb.RegisterTransferGrain(s, func(grain.ID) bankpb.TransferGrain { return transfer{} }),
			probe.RegisterKeyedProbeGrain(s, func(grain.ID) probe.KeyedProbeGrain { return &keyedProbe{p: g.p} }),
			probe.RegisterIntKeyedProbeGrain(s, func(grain.ID) probe.IntKeyedProbeGrain { return intKeyedProbe{} }),
		)
	})
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(testMaxRecv), grpc.UnaryInterceptor(g.intercept))
	if err := grpcapi.Register(srv, s, servedTypes, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	grpcapi.RegisterDiscovery(srv)
	g.cc = serveLoopback(t, srv)
	g.addr = g.cc.Target()
	return g
}

// startSilo starts a silo alone with cfg and the types register
// registers, and stops it gracefully when the test ends.
func startSilo(t *testing.T, cfg silo.Config, register func(s *silo.Silo) error) *silo.Silo {
	t.Helper()
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := register(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(testContext(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("silo stop: %v", err)
		}
	})
	return s
}

// serveLoopback serves srv on a loopback port until the test ends and
// returns a plaintext client connection to it, closed when the test ends.
func serveLoopback(t *testing.T, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// intercept is the test server's unary interceptor: it records each call
// and refuses those that carry denyHeader.
func (g *gateway) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	typ := "?"
	if d, ok := info.Server.(*grain.ServiceDesc); ok {
		typ = d.Type
	}
	g.mu.Lock()
	g.intercepted = append(g.intercepted, info.FullMethod+" served by "+typ)
	g.mu.Unlock()
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(denyHeader)) > 0 {
		return nil, status.Error(codes.PermissionDenied, "test interceptor: denied")
	}
	return handler(ctx, req)
}

// calls returns what the interceptor recorded.
func (g *gateway) calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.intercepted...)
}

// invoke calls method on the gateway with req, sending the metadata md
// (key, value pairs), and decodes the reply into reply.
func (g *gateway) invoke(ctx context.Context, method string, req, reply any, md ...string) error {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	return g.cc.Invoke(ctx, method, req, reply)
}

// testContext returns a context bounded by defaultTestTimeout.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// receive returns the next value from c, failing the test if none comes
// within defaultTestTimeout.
func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(defaultTestTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// probes is what the keyed probe grains share with the test: channels on
// which they report. Any goroutine.
type probes struct {
	told    chan told   // each one-way Tell, as it runs
	waiting chan string // the key of each "wait" call once it waits
	ended   chan error  // the context error that ended each "wait" call
}

// told is one one-way call as a grain saw it.
type told struct{ key, text string }

func newProbes() *probes {
	return &probes{told: make(chan told, 16), waiting: make(chan string, 16), ended: make(chan error, 16)}
}

// account is a bank.Account with a balance in memory.
type account struct {
	bankpb.UnimplementedAccountGrain
	name    string
	balance int64
}

func (a *account) Deposit(ctx grain.Context, req *bankpb.DepositRequest) (*bankpb.Balance, error) {
	if req.GetAmount() <= 0 {
		return nil, grain.Errorf(codes.InvalidArgument, "amount must be positive, got %d", req.GetAmount())
	}
	a.balance += req.GetAmount()
	return &bankpb.Balance{Account: a.name, Amount: a.balance}, nil
}

func (a *account) Withdraw(ctx grain.Context, req *bankpb.WithdrawRequest) (*bankpb.Balance, error) {
	if a.balance < req.GetAmount() {
		return nil, grain.Errorf(codes.FailedPrecondition, "insufficient funds: balance %d, asked %d", a.balance, req.GetAmount())
	}
	a.balance -= req.GetAmount()
	return &bankpb.Balance{Account: a.name, Amount: a.balance}, nil
}

// transfer is a bank.Transfer that implements nothing: its calls fail with
// the grain's own Unimplemented.
type transfer struct {
	bankpb.UnimplementedTransferGrain
}

// keyedProbe does what the request's tag says:
//
//	""          reply with the grain key as text
//	"deadline"  reply with the key and, as n, the context's deadline in
//	            Unix nanoseconds (0: none)
//	"nil"       reply nil with no error
//	"wait"      report on p.waiting, wait until the context ends, report
//	            its error on p.ended and return it
//	"details"   fail with detailsError, whose ErrorInfo reason is the text
//	"wrapped"   fail with detailsError wrapped by fmt.Errorf with %w
//
// Tell reports on p.told.
type keyedProbe struct{ p *probes }

func (k *keyedProbe) Call(ctx grain.Context, req *probe.KeyedRequest) (*probe.Reply, error) {
	key := ctx.ID().Key
	switch req.GetTag() {
	case "":
		return &probe.Reply{Text: key}, nil
	case "deadline":
		var n int64
		if d, ok := ctx.Deadline(); ok {
			n = d.UnixNano()
		}
		return &probe.Reply{Text: key, N: n}, nil
	case "nil":
		return nil, nil
	case "wait":
		k.p.waiting <- key
		ctx.Blocking(func() { <-ctx.Done() })
		k.p.ended <- ctx.Err()
		return nil, status.FromContextError(ctx.Err()).Err()
	case "details":
		return nil, detailsError(req.GetText())
	case "wrapped":
		return nil, fmt.Errorf("keyed probe: %w", detailsError(req.GetText()))
	}
	return nil, grain.Errorf(codes.InvalidArgument, "keyed probe: unknown tag %q", req.GetTag())
}

func (k *keyedProbe) Tell(ctx grain.Context, req *probe.KeyedRequest) (*emptypb.Empty, error) {
	k.p.told <- told{key: ctx.ID().Key, text: req.GetText()}
	return &emptypb.Empty{}, nil
}

// intKeyedProbe replies with its grain key as text.
type intKeyedProbe struct{}

func (intKeyedProbe) Call(ctx grain.Context, req *probe.IntKeyedRequest) (*probe.Reply, error) {
	return &probe.Reply{Text: ctx.ID().Key}, nil
}
