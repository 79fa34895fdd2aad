package tracing_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// testTimeout bounds every wait in these tests: a test that needs it has
// failed.
const testTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB) context.Context { return testwait.Context(t, testTimeout) }

// recorder is a Tracing on an SDK provider that keeps every ended span in
// memory and samples everything.
type recorder struct {
	*tracetest.SpanRecorder
	tp *sdktrace.TracerProvider
	tr *tracing.Tracing
}

func newRecorder(t testing.TB) *recorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := tracing.New(testCtx(t), tracing.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Enabled() {
		t.Fatal("a Tracing with a TracerProvider is not Enabled")
	}
	return &recorder{SpanRecorder: rec, tp: tp, tr: tr}
}

// spans returns the ended spans called name of kind; grainID, unless
// empty, must be their granary.grain.
func (r *recorder) spans(name string, kind trace.SpanKind, grainID string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.Name() == name && s.SpanKind() == kind && (grainID == "" || attr(s, "granary.grain").AsString() == grainID) {
			out = append(out, s)
		}
	}
	return out
}

// span returns the one ended span called name of kind for grainID.
func (r *recorder) span(t testing.TB, name string, kind trace.SpanKind, grainID string) sdktrace.ReadOnlySpan {
	t.Helper()
	ss := r.spans(name, kind, grainID)
	if len(ss) != 1 {
		var all []string
		for _, s := range r.Ended() {
			all = append(all, fmt.Sprintf("%s(%s %s)", s.Name(), s.SpanKind(), attr(s, "granary.grain").String()))
		}
		t.Fatalf("%d %s spans %q of %s, want 1; ended: %v", len(ss), kind, name, grainID, all)
	}
	return ss[0]
}

// attr returns the span's attribute key, or an empty value.
func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// checkParent fails unless child is a child of parent in parent's trace.
func checkParent(t testing.TB, child sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if child.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("span %s is in trace %s, want %s", child.Name(), child.SpanContext().TraceID(), parent.TraceID())
	}
	if child.Parent().SpanID() != parent.SpanID() {
		t.Errorf("span %s (%s) has the parent %s, want %s", child.Name(), child.SpanKind(), child.Parent().SpanID(), parent.SpanID())
	}
}

// seen is what a hop grain saw of one call.
type seen struct {
	silo string
	// span is trace.SpanFromContext of the method's Context, derived that
	// of a context derived from it.
	span, derived trace.SpanContext
	// wire are the headers the call arrived with, as key, value pairs.
	wire []string
	// baggage is the OpenTelemetry baggage the method's Context holds.
	baggage string
	// sameCtx: grain.FromContext(ctx) returned ctx itself.
	sameCtx bool
	chain   []grain.ID
}

// ledger collects what the hop grains saw, by grain ID.
type ledger struct {
	mu    sync.Mutex
	calls map[string]seen // by grain ID
	wire  map[string][]string
	ticks chan string // the grain IDs whose timer ticked
}

func newLedger() *ledger {
	return &ledger{calls: map[string]seen{}, wire: map[string][]string{}, ticks: make(chan string, 16)}
}

func (l *ledger) seen(t testing.TB, id string) seen {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.calls[id]
	if !ok {
		t.Fatalf("grain %s saw no call", id)
	}
	return s
}

// wireFilter is an incoming filter, outside the tracing one, that keeps
// the headers each call arrived with.
func (l *ledger) wireFilter(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	kv := grainrt.AppendHeaders(nil, ctx.Value(grainrt.HeaderKey()))
	l.mu.Lock()
	l.wire[ctx.ID().String()] = kv
	l.mu.Unlock()
	return next(ctx, req)
}

type derivedKey struct{}

// hop is a probe grain (of type Probe or ReentrantProbe) that records
// what it sees and calls the grains its request's path names, in turn,
// each with the rest of the path. Its request's tag says what else:
//
//	""         nothing
//	"fail"     fail with FailedPrecondition
//	"panic"    panic
//	"inspect"  use the Context through the tracing filter's wrapper:
//	           Sleep, a timer, a derived context, and make its call from
//	           inside Blocking with a derived context
//	"derived"  call the path req.N times, on its turn, each time with a
//	           new context derived from the Context by a value
type hop struct {
	probe.UnimplementedProbeGrain
	silo string
	l    *ledger
}

func (h *hop) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	id := ctx.ID().String()
	derived := context.WithValue(ctx, derivedKey{}, "x")
	fc, _ := grain.FromContext(ctx)
	h.l.mu.Lock()
	h.l.calls[id] = seen{
		silo:    h.silo,
		span:    trace.SpanFromContext(ctx).SpanContext(),
		derived: trace.SpanFromContext(derived).SpanContext(),
		wire:    h.l.wire[id],
		baggage: baggage.FromContext(ctx).String(),
		sameCtx: fc == ctx,
		chain:   ctx.CallChain(),
	}
	h.l.mu.Unlock()
	switch req.Tag {
	case "fail":
		return nil, grain.Errorf(codes.FailedPrecondition, "hop %s refuses", id)
	case "panic":
		panic("hop " + id + " panics")
	case "inspect":
		return h.inspect(ctx, derived, req)
	case "derived":
		for i := range req.N {
			if _, err := h.next(ctx, context.WithValue(ctx, derivedKey{}, i), req.Path); err != nil {
				return nil, err
			}
		}
		return &probe.Reply{N: req.N}, nil
	}
	return h.next(ctx, ctx, req.Path)
}

func (h *hop) Tell(ctx grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	_, err := h.Call(ctx, req)
	return &emptypb.Empty{}, err
}

// inspect exercises the wrapper Context the tracing filter hands on.
func (h *hop) inspect(ctx grain.Context, derived context.Context, req *probe.Request) (*probe.Reply, error) {
	if err := grain.Sleep(ctx, time.Millisecond); err != nil {
		return nil, fmt.Errorf("Sleep: %w", err)
	}
	id := ctx.ID().String()
	if _, err := ctx.RegisterTimer("tick", func(grain.Context) error {
		h.l.ticks <- id
		return nil
	}, time.Millisecond, 0); err != nil {
		return nil, fmt.Errorf("RegisterTimer: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		return nil, fmt.Errorf("the Context has no deadline")
	}
	var reply *probe.Reply
	var err error
	grain.Blocking(ctx, func() { reply, err = h.next(ctx, derived, req.Path) })
	return reply, err
}

// next calls the first grain of path, "TYPE/KEY", with the rest, with
// callCtx.
func (h *hop) next(ctx grain.Context, callCtx context.Context, path []string) (*probe.Reply, error) {
	if len(path) == 0 {
		return &probe.Reply{Text: h.silo}, nil
	}
	id, err := grain.ParseID(path[0])
	if err != nil {
		return nil, err
	}
	req := &probe.Request{Path: path[1:]}
	switch id.Type {
	case probe.ProbeGrainType:
		return probe.ProbeRefFromID(ctx.Caller(), id).Call(callCtx, req)
	case probe.ReentrantProbeGrainType:
		return probe.ReentrantProbeRefFromID(ctx.Caller(), id).Call(callCtx, req)
	}
	return nil, grain.Errorf(codes.InvalidArgument, "hop: no grain type %s", id.Type)
}

// hopTypes says which hop grain types a silo hosts.
type hopTypes struct{ probe, reentrant bool }

// siloConfig is the config of a silo called name that traces with r and
// records in l.
func siloConfig(name string, r *recorder, l *ledger) silo.Config {
	cfg := silo.DefaultConfig()
	cfg.Name = name
	cfg.IncomingFilters = []grain.IncomingFilter{l.wireFilter, r.tr.IncomingFilter()}
	cfg.OutgoingFilters = []grain.OutgoingFilter{r.tr.OutgoingFilter()}
	return cfg
}

// startSilo starts a silo with cfg, hosting the hop types, and stops it
// when the test ends.
func startSilo(t testing.TB, cfg silo.Config, l *ledger, types hopTypes) *silo.Silo {
	t.Helper()
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if types.probe {
		if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &hop{silo: cfg.Name, l: l} }); err != nil {
			t.Fatal(err)
		}
	}
	if types.reentrant {
		if err := probe.RegisterReentrantProbeGrain(s, func(grain.ID) probe.ReentrantProbeGrain { return &hop{silo: cfg.Name, l: l} }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(testCtx(t)); err != nil {
			t.Errorf("Stop %s: %v", cfg.Name, err)
		}
	})
	return s
}

// cluster is two silos in one process on an in-memory membership hub and
// network, each with a gateway on loopback TCP: silo-1 hosts the type
// Probe, silo-2 ReentrantProbe, so a call from one type to the other
// crosses silos.
type cluster struct {
	silos []*silo.Silo
}

func newCluster(t *testing.T, r *recorder, l *ledger) *cluster {
	t.Helper()
	hub, net := membership.NewHub(), transport.NewMemNetwork()
	t.Cleanup(net.Wait) // after the silos stop
	c := &cluster{}
	for i, types := range []hopTypes{{probe: true}, {reentrant: true}} {
		name := fmt.Sprintf("silo-%d", i+1)
		cfg := siloConfig(name, r, l)
		cc := silo.DefaultClusterConfig()
		cc.Membership.ClusterID = "tracing-test"
		cc.ShutdownGossipDelay = 0
		cc.Listener = net.Listener(name + ":7947")
		cc.Network = net.From(name + ":7947")
		cc.NewMembership = func(mc membership.Config, on func(membership.Event)) (membership.Service, error) {
			return hub.Member(mc, on), nil
		}
		cfg.Cluster = &cc
		gc := silo.DefaultGatewayConfig()
		gc.Listen = "127.0.0.1:0"
		cfg.Gateway = &gc
		c.silos = append(c.silos, startSilo(t, cfg, l, types))
	}
	testwait.For(t, testTimeout, "the silos to see each other", func() bool {
		for _, s := range c.silos {
			if st := s.Stats().Cluster; st == nil || st.Active != len(c.silos) {
				return false
			}
		}
		return true
	})
	return c
}

// dial returns a client of the cluster with opts, closed when the test
// ends.
func (c *cluster) dial(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	var gws []string
	for _, s := range c.silos {
		gws = append(gws, s.GatewayAddr())
	}
	cl, err := client.Dial(testCtx(t), append([]client.Option{client.WithGateways(gws...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// headerKeys returns the keys of the header pairs kv, sorted.
func headerKeys(kv []string) []string {
	var keys []string
	for i := 0; i+1 < len(kv); i += 2 {
		keys = append(keys, kv[i])
	}
	slices.Sort(keys)
	return keys
}

// header returns the value of key in the header pairs kv, or "".
func header(kv []string, key string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == key {
			return kv[i+1]
		}
	}
	return ""
}
