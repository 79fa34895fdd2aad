package silo

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/gateway"
	"github.com/granaryio/granary/silo/membership"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawClient speaks the gateway's stream protocol directly, so a test
// controls every envelope field.
type rawClient struct {
	t    *transport.Transport
	net  *transport.GRPCNetwork
	peer string
}

type refuseCalls struct{}

func (refuseCalls) Deliver(_ string, _ *granaryv1.Envelope, r transport.Responder) {
	r.Reply(&granaryv1.Envelope{Code: uint32(codes.Unimplemented)})
}

func dialRaw(t *testing.T, clusterID, addr string) *rawClient {
	t.Helper()
	cfg := transport.DefaultConfig()
	cfg.ClusterID, cfg.Self = clusterID, "raw-client"
	n := transport.NewGRPCServiceNetwork(transport.GatewayService, cfg)
	tp, err := transport.New(cfg, n, refuseCalls{})
	if err != nil {
		t.Fatal(err)
	}
	tp.SetPeer("gw", addr)
	rc := &rawClient{t: tp, net: n, peer: "gw"}
	t.Cleanup(func() { tp.Close(); n.Close() })
	return rc
}

// call sends a REQUEST and returns its call ID and the channel its answer
// comes on.
func (rc *rawClient) call(env *granaryv1.Envelope) (uint64, <-chan *granaryv1.Envelope) {
	out := make(chan *granaryv1.Envelope, 1)
	id := rc.t.Call(rc.peer, env, time.Time{}, func(resp *granaryv1.Envelope, err error) {
		if err != nil {
			out <- &granaryv1.Envelope{Code: uint32(codes.Unavailable), Message: err.Error()}
			return
		}
		out <- proto.Clone(resp).(*granaryv1.Envelope)
	})
	return id, out
}

func sleepRequest(key string, d time.Duration) *granaryv1.Envelope {
	payload, _ := proto.Marshal(&probe.Request{Tag: "sleep", N: int64(d)})
	return &granaryv1.Envelope{
		Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, GrainType: "probe.Probe", GrainKey: key,
		Method: "Call", MethodIndex: 0, Payload: payload, TimeoutNanos: int64(5 * time.Second), Cancellable: true,
	}
}

// TestGatewayCancelReachesRemoteGrain: a client's CANCEL cancels the
// callee's context both when the grain runs on the gateway's own silo and
// when the gateway forwarded the call to another silo, which the gateway
// tells with a CANCEL of its own.
func TestGatewayCancelReachesRemoteGrain(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, nil, clusterOpt{})
	gw := tc.startNoWait("gw", func(cfg *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		cfg.Gateway = &g
	})
	b := tc.startNoWait("b", nil)
	tc.waitConverged()
	rc := dialRaw(t, "test", gw.GatewayAddr())
	for _, s := range []*Silo{gw, b} {
		id, answer := rc.call(sleepRequest(tc.keyOn(s), time.Hour))
		if err := rc.t.Send(rc.peer, &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_CANCEL, CallId: id}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		select {
		case resp := <-answer:
			if codes.Code(resp.Code) != codes.Canceled {
				t.Fatalf("grain on %s: the cancelled call got %v %q, want Canceled", s.cfg.Name, codes.Code(resp.Code), resp.Message)
			}
		case <-time.After(3 * time.Second):
			resp := <-answer // at the call's deadline
			t.Fatalf("grain on %s: the CANCEL did not reach the grain; the call ended at its deadline with %v", s.cfg.Name, codes.Code(resp.Code))
		}
	}
}

// TestGatewayStopWithHealthWatch: a gRPC health Watch stream on the
// gateway (what gRPC client-side health checking opens) hears NOT_SERVING
// as the silo begins to stop, and does not keep the gateway's server from
// stopping: Stop succeeds well within its context.
func TestGatewayStopWithHealthWatch(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, nil, clusterOpt{})
	gw := tc.startNoWait("gw", func(cfg *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		cfg.Gateway = &g
	})
	tc.waitConverged()
	cc, err := grpc.NewClient(gw.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	wctx, wcancel := context.WithCancel(testCtx(t))
	defer wcancel()
	w, err := healthpb.NewHealthClient(cc).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := w.Recv(); err != nil || st.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", st, err)
	}
	tc.remove("gw")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- gw.Stop(ctx) }()
	if st, err := w.Recv(); err != nil || st.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health as the silo stops: %v %v, want NOT_SERVING", st, err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop with a health watcher connected: %v", err)
	}
}

// TestGatewayBadEnvelopes: malformed client envelopes each get an answer
// with a fitting code, and none panics the silo.
func TestGatewayBadEnvelopes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{cfg: func(c *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		c.Gateway = &g
	}})
	rc := dialRaw(t, gateway.LocalClusterID, h.s.GatewayAddr())
	R := granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST
	for _, tc := range []struct {
		name string
		env  *granaryv1.Envelope
		want []codes.Code
	}{
		{"no type", &granaryv1.Envelope{Kind: R}, []codes.Code{codes.InvalidArgument}},
		{"no key", &granaryv1.Envelope{Kind: R, GrainType: "probe.Probe"}, []codes.Code{codes.InvalidArgument}},
		{"index past the end", &granaryv1.Envelope{Kind: R, GrainType: "probe.Probe", GrainKey: "k", Method: "Call", MethodIndex: 1<<32 - 1}, []codes.Code{codes.Unimplemented, codes.NotFound}},
		{"wrong name", &granaryv1.Envelope{Kind: R, GrainType: "probe.Probe", GrainKey: "k", Method: "Nope"}, []codes.Code{codes.Unimplemented, codes.NotFound}},
		{"negative timeout", &granaryv1.Envelope{Kind: R, GrainType: "probe.Probe", GrainKey: "k", Method: "Call", TimeoutNanos: -5}, []codes.Code{codes.OK}},
		{"bad payload", &granaryv1.Envelope{Kind: R, GrainType: "probe.Probe", GrainKey: "k", Method: "Call", Payload: []byte{0xff, 0xff, 0xff}}, []codes.Code{codes.InvalidArgument}},
		{"bad int key", &granaryv1.Envelope{Kind: R, GrainType: "probe.IntProbe", GrainKey: "x", Method: "Call"}, []codes.Code{codes.InvalidArgument}},
		{"slash in type", &granaryv1.Envelope{Kind: R, GrainType: "x/y", GrainKey: "k", Method: "Call"}, []codes.Code{codes.InvalidArgument}},
		{"unknown type", &granaryv1.Envelope{Kind: R, GrainType: "nosuch", GrainKey: "k", Method: "Call"}, []codes.Code{codes.NotFound}},
		{"nil header", &granaryv1.Envelope{Kind: R, GrainType: "probe.Probe", GrainKey: "k", Method: "Call", Headers: []*granaryv1.Header{{}, nil}}, []codes.Code{codes.OK}},
	} {
		_, ans := rc.call(tc.env)
		r := testwait.Recv(t, ans, defaultTestTimeout, "the answer to "+tc.name)
		if got := codes.Code(r.Code); !slices.Contains(tc.want, got) {
			t.Errorf("%s: got %v %q, want one of %v", tc.name, got, r.Message, tc.want)
		}
	}
}

// intProbe answers with the silo it runs on.
type intProbe struct {
	probe.UnimplementedIntProbeGrain
	silo string
}

func (g *intProbe) Call(grain.Context, *probe.Request) (*probe.Reply, error) {
	return &probe.Reply{Text: g.silo}, nil
}

// TestGatewayServesTypesHostedElsewhere: a gateway given the descriptor
// of a type another silo hosts serves it over plain gRPC, and the call
// runs on that silo; a listed type no silo hosts fails with NotFound.
func TestGatewayServesTypesHostedElsewhere(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, nil, clusterOpt{})
	gw := tc.startNoWait("gw", func(cfg *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		g.Services = []*grain.ServiceDesc{&probe.IntProbe_ServiceDesc, &probe.UUIDProbe_ServiceDesc}
		cfg.Gateway = &g
	})
	// A silo hosting IntProbe, which the gateway's silo does not.
	cfg := DefaultConfig()
	cfg.Name = "ints"
	cc := DefaultClusterConfig()
	cc.Membership.ClusterID = "test"
	cc.ShutdownGossipDelay = 0
	cc.Listener = tc.net.Listener(addrOf("ints"))
	cc.Network = tc.net.From(addrOf("ints"))
	cc.NewMembership = func(mc membership.Config, on func(membership.Event)) (membership.Service, error) {
		return tc.hub.Member(mc, on), nil
	}
	cfg.Cluster = &cc
	ints, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.RegisterIntProbeGrain(ints, func(grain.ID) probe.IntProbeGrain { return &intProbe{silo: "ints"} }); err != nil {
		t.Fatal(err)
	}
	if err := ints.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ints.Stop(testCtx(t)); err != nil {
			t.Error(err)
		}
	}()
	testwait.For(t, defaultTestTimeout, "the gateway's silo to see IntProbe hosted", func() bool {
		return hostsOf(gw, probe.IntProbeGrainType) == 1
	})
	cconn, err := grpc.NewClient(gw.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cconn.Close()
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "granary-key", "42")
	var reply probe.Reply
	if err := cconn.Invoke(ctx, "/probe.IntProbe/Call", &probe.Request{}, &reply); err != nil {
		t.Fatal(err)
	}
	if reply.Text != "ints" {
		t.Fatalf("the call ran on %q, want ints", reply.Text)
	}
	ctx = metadata.AppendToOutgoingContext(testCtx(t), "granary-key", "00000000-0000-0000-0000-000000000001")
	err = cconn.Invoke(ctx, "/probe.UUIDProbe/Call", &probe.Request{}, &reply)
	if status.Code(err) != codes.NotFound {
		t.Fatalf("a type no silo hosts: %v, want NotFound", err)
	}
}
