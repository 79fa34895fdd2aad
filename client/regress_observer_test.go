package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeGateway serves the gateway protocol with a gateway list the test
// sets, and takes every HOME.
type fakeGateway struct {
	lis   *transport.GRPCListener
	tport *transport.Transport
	// addr is the address the list gives for silo "fake"; lists counts
	// the lists served.
	addr  atomic.Pointer[string]
	lists atomic.Int64
}

type noDial struct{}

func (noDial) Dial(context.Context, string) (transport.Conn, error) {
	return nil, status.Error(codes.Internal, "a gateway does not dial")
}
func (noDial) Forget(string) {}

func (f *fakeGateway) Deliver(_ string, env *granaryv1.Envelope, r transport.Responder) {
	if r.Expects() {
		if env.Kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_HOME {
			r.Reply(&granaryv1.Envelope{})
			return
		}
		r.Reply(&granaryv1.Envelope{Code: uint32(codes.Unimplemented)})
	}
}

func startFakeGateway(t *testing.T) *fakeGateway {
	t.Helper()
	f := &fakeGateway{}
	cfg := transport.DefaultConfig()
	cfg.ClusterID, cfg.Self = "fake", "fake"
	lists := grpc.MethodDesc{
		MethodName: "Gateways",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(granaryv1.GatewaysRequest)); err != nil {
				return nil, err
			}
			f.lists.Add(1)
			return &granaryv1.GatewaysResponse{ClusterId: "fake", Gateways: []*granaryv1.Gateway{{Silo: "fake", Address: *f.addr.Load()}}}, nil
		},
	}
	lis, err := transport.ListenGRPCService("127.0.0.1:0", transport.GatewayService, []grpc.MethodDesc{lists}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := transport.New(cfg, noDial{}, f)
	if err != nil {
		t.Fatal(err)
	}
	f.lis, f.tport = lis, tp
	addr := lis.Addr()
	f.addr.Store(&addr)
	if err := lis.Serve(tp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close(); lis.Stop() })
	return f
}

// TestHomeAddressChangeDoesNotDeadlock: when the gateway list gives the
// client's home gateway a new address (a silo alone answers with the
// address each client reached it at), the old stream ends and the
// transport tells StreamsEnded on the refresher's goroutine; the client
// moves home and Close returns. (apply once held the client's lock across
// SetPeer, and StreamsEnded took it again.)
func TestHomeAddressChangeDoesNotDeadlock(t *testing.T) {
	f := startFakeGateway(t)
	cl, err := client.Dial(testCtx(t), client.WithGateways(f.lis.Addr()), client.WithGatewayRefresh(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := probe.CreateProbeObserver(cl, newRecorder("rec")); err != nil {
		t.Fatal(err)
	}
	if cl.HomeGateway() != "fake" {
		t.Fatalf("home %q", cl.HomeGateway())
	}
	moved := "127.0.0.1:1"
	f.addr.Store(&moved)
	// The refresher asks once more after applying the new list, unless
	// it is stuck applying it.
	n := f.lists.Load()
	waitFor(t, "the refresher to ask again after applying a list that moved the home gateway", func() bool { return f.lists.Load() >= n+2 })
	closed := make(chan struct{})
	go func() { cl.Close(); close(closed) }()
	recv(t, closed, "Close")
}

// startAlone starts a silo alone called name, hosting probe grains, with
// its gateway on listen.
func startAlone(t *testing.T, name, listen string) *silo.Silo {
	t.Helper()
	cfg := silo.DefaultConfig()
	cfg.Name = name
	gc := silo.DefaultGatewayConfig()
	gc.Listen = listen
	cfg.Gateway = &gc
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &probeGrain{l: l, silo: name} }); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClientReturnsToRestartedSiloAlone: a silo alone that stopped and
// started again at the same address is a new gateway to its clients (its
// gateway ID is new at each start, as a member ID is), so the client's
// memory of gateways that went away does not keep it off the list.
func TestClientReturnsToRestartedSiloAlone(t *testing.T) {
	s := startAlone(t, "solo", "127.0.0.1:0")
	addr := s.GatewayAddr()
	cl, err := client.Dial(testCtx(t), client.WithGateways(addr), client.WithGatewayRefresh(20*time.Millisecond))
	if err != nil {
		s.Stop(testCtx(t))
		t.Fatal(err)
	}
	defer cl.Close()
	ref := probe.NewProbeRef(cl, "k")
	if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ref.Call(testCtx(t), &probe.Request{}) // finds the gateway gone
	s = startAlone(t, "solo", addr)
	defer s.Stop(testCtx(t))
	waitFor(t, "calls to succeed after the silo came back at "+addr, func() bool {
		_, err := ref.Call(testCtx(t), &probe.Request{})
		return err == nil
	})
}
