package client_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// testTimeout bounds every wait in these tests: a test that needs it has
// failed.
const testTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB) context.Context { return testwait.Context(t, testTimeout) }

// ledger is what the probe grains of a test did, across silos.
type ledger struct {
	mu   sync.Mutex
	ran  map[string]string // call tag -> the silo that ran it
	told map[string]int    // one-way tags received
	// started is told the tag of each Slow call once it runs; cancelled
	// the tag and its context's error once its context ends.
	started   chan string
	cancelled chan string
	headers   map[string]string // call tag -> the "who" header
	deadlines map[string]time.Duration
}

func newLedger() *ledger {
	return &ledger{
		ran: map[string]string{}, told: map[string]int{}, headers: map[string]string{},
		deadlines: map[string]time.Duration{},
		started:   make(chan string, 16), cancelled: make(chan string, 16),
	}
}

func (l *ledger) ranOn(tag string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.ran[tag]
	return s, ok
}

func (l *ledger) toldCount(tag string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.told[tag]
}

// probeGrain counts its calls and records them in the ledger.
type probeGrain struct {
	probe.UnimplementedProbeGrain
	l    *ledger
	silo string
	n    int64
}

func (g *probeGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	if len(req.Path) > 0 {
		return g.callObserver(ctx, req)
	}
	g.n++
	g.l.mu.Lock()
	if req.Tag != "" {
		g.l.ran[req.Tag] = g.silo
		g.l.headers[req.Tag] = grain.Header(ctx, "who")
		if d, ok := ctx.Deadline(); ok {
			g.l.deadlines[req.Tag] = time.Until(d)
		}
	}
	g.l.mu.Unlock()
	return &probe.Reply{Text: g.silo, N: g.n, Activation: ctx.ActivationID()}, nil
}

// callObserver calls the observer whose ID is req.Path[0]: for tag
// "notify", req.N one-way Notify calls numbered 1 to N; for "ask", one
// Ask, whose reply it returns.
func (g *probeGrain) callObserver(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	id, err := grain.ParseID(req.Path[0])
	if err != nil {
		return nil, err
	}
	obs := probe.ProbeObserverRefFromID(ctx.Caller(), id)
	switch req.Tag {
	case "notify":
		for i := int64(1); i <= req.N; i++ {
			if _, err := obs.Notify(ctx, &probe.Request{N: i, Text: g.silo}); err != nil {
				return nil, err
			}
		}
		return &probe.Reply{Text: g.silo}, nil
	case "ask":
		return obs.Ask(ctx, &probe.Request{Text: req.Text})
	}
	return nil, fmt.Errorf("no observer behaviour %q", req.Tag)
}

func (g *probeGrain) Tell(_ grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	g.l.mu.Lock()
	g.l.told[req.Tag]++
	g.l.mu.Unlock()
	return &emptypb.Empty{}, nil
}

// Slow waits until its context ends and reports both ends.
func (g *probeGrain) Slow(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	g.l.started <- req.Tag
	var err error
	grain.Blocking(ctx, func() {
		<-ctx.Done()
		err = ctx.Err()
	})
	g.l.cancelled <- req.Tag + ": " + err.Error()
	return nil, err
}

// cluster is silos in one process on an in-memory membership hub and
// network, each serving a gateway on loopback TCP and hosting probe
// grains.
type cluster struct {
	t   *testing.T
	hub *membership.Hub
	net *transport.MemNetwork
	l   *ledger

	mu    sync.Mutex
	silos map[string]*silo.Silo
}

func newCluster(t *testing.T, names ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, hub: membership.NewHub(), net: transport.NewMemNetwork(), l: newLedger(), silos: map[string]*silo.Silo{}}
	t.Cleanup(c.stopAll)
	for _, n := range names {
		c.start(n)
	}
	c.waitGateways(len(names))
	return c
}

// start starts a silo called name.
func (c *cluster) start(name string) *silo.Silo {
	c.t.Helper()
	cfg := silo.DefaultConfig()
	cfg.Name = name
	cc := silo.DefaultClusterConfig()
	cc.Membership.ClusterID = "client-test"
	cc.ShutdownGossipDelay = 0
	cc.LoadReportInterval = 50 * time.Millisecond
	cc.Listener = c.net.Listener(name + ":7947")
	cc.Network = c.net.From(name + ":7947")
	cc.NewMembership = func(mc membership.Config, on func(membership.Event)) (membership.Service, error) {
		return c.hub.Member(mc, on), nil
	}
	cfg.Cluster = &cc
	gc := silo.DefaultGatewayConfig()
	gc.Listen = "127.0.0.1:0"
	cfg.Gateway = &gc
	if testing.Verbose() {
		cfg.Logger, _ = zap.NewDevelopment()
	}
	s, err := silo.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(id grain.ID) probe.ProbeGrain { return &probeGrain{l: c.l, silo: name} }); err != nil {
		c.t.Fatal(err)
	}
	if err := s.Start(testCtx(c.t)); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.silos[name] = s
	c.mu.Unlock()
	return s
}

func (c *cluster) silo(name string) *silo.Silo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.silos[name]
}

func (c *cluster) remove(name string) *silo.Silo {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.silos[name]
	delete(c.silos, name)
	if s == nil {
		c.t.Fatalf("no silo %s", name)
	}
	return s
}

// kill ends the silo called name at once, as a killed process would end.
func (c *cluster) kill(name string) {
	c.t.Helper()
	s := c.remove(name)
	c.net.Down(name+":7947", true)
	c.hub.Kill(s.Member())
	s.Close()
}

// stop stops the silo called name gracefully.
func (c *cluster) stop(name string) {
	c.t.Helper()
	s := c.remove(name)
	if err := s.Stop(testCtx(c.t)); err != nil {
		c.t.Errorf("Stop %s: %v", name, err)
	}
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	ss := c.silos
	c.silos = map[string]*silo.Silo{}
	c.mu.Unlock()
	for name, s := range ss {
		if err := s.Stop(testCtx(c.t)); err != nil {
			c.t.Errorf("Stop %s: %v", name, err)
		}
	}
	c.net.Wait()
}

// waitGateways waits until a client dialled to any silo learns n
// gateways.
func (c *cluster) waitGateways(n int) {
	c.t.Helper()
	testwait.For(c.t, testTimeout, "the gateways to be listed", func() bool {
		cl, err := client.Dial(testCtx(c.t), client.WithGateways(c.addrs()...))
		if err != nil {
			return false
		}
		defer cl.Close()
		return len(cl.Gateways()) == n
	})
}

// addrs returns the gateway addresses of the running silos.
func (c *cluster) addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.silos {
		out = append(out, s.GatewayAddr())
	}
	return out
}

// dial returns a client of the cluster, closed when the test ends.
func (c *cluster) dial(opts ...client.Option) *client.Client {
	c.t.Helper()
	cl, err := client.Dial(testCtx(c.t), append([]client.Option{client.WithGateways(c.addrs()...)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
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
			return &granaryv1.GatewaysResponse{ClusterId: "fake", Gateways: []*granaryv1.GatewayEndpoint{{Silo: "fake", Address: *f.addr.Load()}}}, nil
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
