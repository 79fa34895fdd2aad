package tracing_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"go.opentelemetry.io/otel/baggage"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

const (
	probeCall     = "probe.Probe/Call"
	reentrantCall = "probe.ReentrantProbe/Call"
)

// TestTraceAcrossClientAndSilos follows one trace from a program's span
// through the client, grain A on silo-1 and grain B on silo-2: one
// trace, each span the child of the one before.
func TestTraceAcrossClientAndSilos(t *testing.T) {
	t.Parallel()
	r, l := newRecorder(t), newLedger()
	c := newCluster(t, r, l)
	cl := c.dial(t, client.WithOutgoingFilters(r.tr.OutgoingFilter()))

	ctx, root := r.tp.Tracer("test").Start(testCtx(t), "request")
	reply, err := probe.NewProbeRef(cl, "a").Call(ctx, &probe.Request{Path: []string{"probe.ReentrantProbe/b"}})
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if reply.Text != "silo-2" {
		t.Fatalf("the chain ended on %q, want silo-2", reply.Text)
	}
	if a, b := l.seen(t, "probe.Probe/a"), l.seen(t, "probe.ReentrantProbe/b"); a.silo != "silo-1" || b.silo != "silo-2" {
		t.Fatalf("A ran on %s and B on %s, want silo-1 and silo-2", a.silo, b.silo)
	}

	clientA := r.span(t, probeCall, trace.SpanKindClient, "probe.Probe/a")
	serverA := r.span(t, probeCall, trace.SpanKindServer, "probe.Probe/a")
	clientB := r.span(t, reentrantCall, trace.SpanKindClient, "probe.ReentrantProbe/b")
	serverB := r.span(t, reentrantCall, trace.SpanKindServer, "probe.ReentrantProbe/b")
	checkParent(t, clientA, root.SpanContext())
	checkParent(t, serverA, clientA.SpanContext())
	checkParent(t, clientB, serverA.SpanContext())
	checkParent(t, serverB, clientB.SpanContext())
	for _, s := range []sdktrace.ReadOnlySpan{serverA, serverB} {
		if !s.Parent().IsRemote() {
			t.Errorf("server span %s: its parent is not remote", s.Name())
		}
	}
	if got := l.seen(t, "probe.Probe/a").span; !got.Equal(serverA.SpanContext()) {
		t.Errorf("grain A saw the span %v, want its server span %v", got, serverA.SpanContext())
	}

	want := map[string]string{
		"rpc.system":           "granary",
		"rpc.service":          "probe.ReentrantProbe",
		"rpc.method":           "Call",
		"granary.grain":        "probe.ReentrantProbe/b",
		"rpc.grpc.status_code": "0",
	}
	for _, s := range []sdktrace.ReadOnlySpan{clientB, serverB} {
		for k, v := range want {
			if got := attr(s, k).String(); got != v {
				t.Errorf("%s span %s: %s = %q, want %q", s.SpanKind(), s.Name(), k, got, v)
			}
		}
		if s.Status().Code != otelcodes.Unset {
			t.Errorf("%s span %s: status %v, want Unset", s.SpanKind(), s.Name(), s.Status())
		}
	}

	// What reached B is one traceparent, naming the client span A->B.
	wire := l.seen(t, "probe.ReentrantProbe/b").wire
	if keys := headerKeys(wire); !slices.Equal(keys, []string{"traceparent"}) {
		t.Errorf("B's call carried the headers %v, want only traceparent", wire)
	}
	if tp := header(wire, "traceparent"); !strings.Contains(tp, clientB.SpanContext().SpanID().String()) {
		t.Errorf("B's traceparent %q does not name the client span %s", tp, clientB.SpanContext().SpanID())
	}

	t.Run("failure through the client", func(t *testing.T) {
		r.Reset()
		_, err := probe.NewProbeRef(cl, "a").Call(testCtx(t), &probe.Request{Tag: "fail"})
		if grain.Code(err) != codes.FailedPrecondition {
			t.Fatalf("the call failed with %v, want FailedPrecondition", err)
		}
		cs := r.span(t, probeCall, trace.SpanKindClient, "probe.Probe/a")
		checkFailed(t, cs, codes.FailedPrecondition)
		checkFailed(t, r.span(t, probeCall, trace.SpanKindServer, "probe.Probe/a"), codes.FailedPrecondition)
		if cs.Parent().IsValid() {
			t.Errorf("a call from a context without a span made a client span with the parent %v", cs.Parent())
		}
	})
}

// checkFailed fails unless s has the status Error naming code, and code
// as its rpc.grpc.status_code.
func checkFailed(t *testing.T, s sdktrace.ReadOnlySpan, code codes.Code) {
	t.Helper()
	if st := s.Status(); st.Code != otelcodes.Error || !strings.HasPrefix(st.Description, code.String()+": ") {
		t.Errorf("%s span %s: status %+v, want Error %q", s.SpanKind(), s.Name(), st, code.String()+": ...")
	}
	if got := attr(s, "rpc.grpc.status_code").AsInt64(); got != int64(code) {
		t.Errorf("%s span %s: rpc.grpc.status_code %d, want %d", s.SpanKind(), s.Name(), got, code)
	}
}

// TestFailedCallSpans checks the status of the spans of calls that fail:
// by the grain's error, by its panic, and before reaching any grain.
func TestFailedCallSpans(t *testing.T) {
	t.Parallel()
	r, l := newRecorder(t), newLedger()
	s := startSilo(t, siloConfig("alone", r, l), l, hopTypes{probe: true})
	tests := []struct {
		name     string
		id       grain.ID
		req      *probe.Request
		code     codes.Code
		reachesA bool // a server span exists
	}{
		{name: "grain error", id: grain.NewID(probe.ProbeGrainType, "f"), req: &probe.Request{Tag: "fail"}, code: codes.FailedPrecondition, reachesA: true},
		{name: "grain panic", id: grain.NewID(probe.ProbeGrainType, "p"), req: &probe.Request{Tag: "panic"}, code: codes.Internal, reachesA: true},
		{name: "unknown grain type", id: grain.NewID(probe.ReentrantProbeGrainType, "u"), req: &probe.Request{}, code: codes.NotFound},
		{name: "error down the chain", id: grain.NewID(probe.ProbeGrainType, "c"), req: &probe.Request{Path: []string{"probe.ReentrantProbe/x"}}, code: codes.NotFound, reachesA: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.Reset()
			m := probe.Probe_ServiceDesc.Method("Call")
			if tt.id.Type == probe.ReentrantProbeGrainType {
				m = probe.ReentrantProbe_ServiceDesc.Method("Call")
			}
			_, err := s.Invoke(testCtx(t), tt.id, m, tt.req)
			if grain.Code(err) != tt.code {
				t.Fatalf("the call failed with %v, want %v", err, tt.code)
			}
			name := tt.id.Type + "/Call"
			cs := r.span(t, name, trace.SpanKindClient, tt.id.String())
			checkFailed(t, cs, tt.code)
			servers := r.spans(name, trace.SpanKindServer, tt.id.String())
			switch {
			case !tt.reachesA && len(servers) != 0:
				t.Errorf("a call that reached no grain has %d server spans", len(servers))
			case tt.reachesA:
				if len(servers) != 1 {
					t.Fatalf("%d server spans, want 1", len(servers))
				}
				checkFailed(t, servers[0], tt.code)
				checkParent(t, servers[0], cs.SpanContext())
			}
		})
	}
}

// TestGrainSeesItsSpan checks what grain code sees through the Context
// the incoming filter hands on: its server span, directly and through a
// derived context; the runtime's services (Sleep, timers, Blocking,
// CallChain, grain.FromContext); and a call made inside Blocking with a
// derived context, which is the server span's child.
func TestGrainSeesItsSpan(t *testing.T) {
	t.Parallel()
	r, l := newRecorder(t), newLedger()
	s := startSilo(t, siloConfig("alone", r, l), l, hopTypes{probe: true, reentrant: true})

	_, err := probe.NewProbeRef(s, "a").Call(testCtx(t), &probe.Request{Tag: "inspect", Path: []string{"probe.ReentrantProbe/b"}})
	if err != nil {
		t.Fatal(err)
	}
	serverA := r.span(t, probeCall, trace.SpanKindServer, "probe.Probe/a")
	a := l.seen(t, "probe.Probe/a")
	switch {
	case !a.span.Equal(serverA.SpanContext()):
		t.Errorf("trace.SpanFromContext in the grain: %v, want the server span %v", a.span, serverA.SpanContext())
	case !a.derived.Equal(serverA.SpanContext()):
		t.Errorf("trace.SpanFromContext of a derived context: %v, want the server span %v", a.derived, serverA.SpanContext())
	case !a.sameCtx:
		t.Error("grain.FromContext(ctx) did not return the method's Context")
	}
	select {
	case id := <-l.ticks:
		if id != "probe.Probe/a" {
			t.Errorf("the timer of %s ticked, want probe.Probe/a's", id)
		}
	case <-testCtx(t).Done():
		t.Fatal("the timer registered through the wrapper never ticked")
	}

	clientB := r.span(t, reentrantCall, trace.SpanKindClient, "probe.ReentrantProbe/b")
	serverB := r.span(t, reentrantCall, trace.SpanKindServer, "probe.ReentrantProbe/b")
	checkParent(t, clientB, serverA.SpanContext())
	checkParent(t, serverB, clientB.SpanContext())
	b := l.seen(t, "probe.ReentrantProbe/b")
	if want := []grain.ID{grain.NewID(probe.ProbeGrainType, "a")}; !slices.Equal(b.chain, want) {
		t.Errorf("B's call chain is %v, want %v: the call from Blocking lost its caller", b.chain, want)
	}
	if !b.span.Equal(serverB.SpanContext()) {
		t.Errorf("B saw the span %v, want its server span %v", b.span, serverB.SpanContext())
	}
}

// TestCallsWithDerivedContexts checks calls a grain makes on its turn with
// contexts derived from its Context by values: each is a child of the
// grain's server span, and none leaves anything running behind (the
// context package would watch such a context with a goroutine if the
// filters did not hand the watch to the runtime).
func TestCallsWithDerivedContexts(t *testing.T) {
	t.Parallel()
	r, l := newRecorder(t), newLedger()
	s := startSilo(t, siloConfig("alone", r, l), l, hopTypes{probe: true})
	const calls = 50
	if _, err := probe.NewProbeRef(s, "d").Call(testCtx(t), &probe.Request{Tag: "derived", N: calls, Path: []string{"probe.Probe/e"}}); err != nil {
		t.Fatal(err)
	}
	serverD := r.span(t, probeCall, trace.SpanKindServer, "probe.Probe/d")
	clients := r.spans(probeCall, trace.SpanKindClient, "probe.Probe/e")
	servers := r.spans(probeCall, trace.SpanKindServer, "probe.Probe/e")
	if len(clients) != calls || len(servers) != calls {
		t.Fatalf("%d client and %d server spans for e, want %d of each", len(clients), len(servers), calls)
	}
	parents := map[trace.SpanID]bool{}
	for _, c := range clients {
		checkParent(t, c, serverD.SpanContext())
		parents[c.SpanContext().SpanID()] = true
	}
	for _, s := range servers {
		if !parents[s.Parent().SpanID()] {
			t.Errorf("a server span of e has the parent %s, which is none of d's client spans", s.Parent().SpanID())
		}
	}
}

// TestHeadersDoNotGrow runs a chain of five calls whose first context
// carries a stale traceparent, a tracestate, baggage and a header of its
// own: every hop gets each of them once, the trace state and baggage
// unchanged, and a traceparent naming its caller's client span.
func TestHeadersDoNotGrow(t *testing.T) {
	t.Parallel()
	r, l := newRecorder(t), newLedger()
	s := startSilo(t, siloConfig("alone", r, l), l, hopTypes{probe: true})

	ts, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3},
		SpanID:     trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
		Remote:     true,
	})
	ctx := trace.ContextWithRemoteSpanContext(testCtx(t), remote)
	ctx, root := r.tp.Tracer("test").Start(ctx, "request")
	defer root.End()
	member, err := baggage.NewMember("user", "alice")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx = baggage.ContextWithBaggage(ctx, bag)
	ctx = grain.WithHeader(ctx, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	ctx = grain.WithHeader(ctx, "who", "test")

	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	var path []string
	for _, k := range keys[1:] {
		path = append(path, probe.ProbeGrainType+"/"+k)
	}
	if _, err := probe.NewProbeRef(s, keys[0]).Call(ctx, &probe.Request{Path: path}); err != nil {
		t.Fatal(err)
	}

	parent := root.SpanContext()
	for _, k := range keys {
		id := probe.ProbeGrainType + "/" + k
		seen := l.seen(t, id)
		if got, want := headerKeys(seen.wire), []string{"baggage", "traceparent", "tracestate", "who"}; !slices.Equal(got, want) {
			t.Errorf("%s got the headers %v, want each of %v once", id, seen.wire, want)
		}
		if got := header(seen.wire, "tracestate"); got != "vendor=x" {
			t.Errorf("%s: tracestate %q, want vendor=x", id, got)
		}
		if got := header(seen.wire, "who"); got != "test" {
			t.Errorf("%s: the header who is %q, want test", id, got)
		}
		if seen.baggage != "user=alice" {
			t.Errorf("%s: the grain's baggage is %q, want user=alice", id, seen.baggage)
		}
		cs := r.span(t, probeCall, trace.SpanKindClient, id)
		ss := r.span(t, probeCall, trace.SpanKindServer, id)
		checkParent(t, cs, parent)
		checkParent(t, ss, cs.SpanContext())
		if tp := header(seen.wire, "traceparent"); !strings.Contains(tp, cs.SpanContext().SpanID().String()) {
			t.Errorf("%s: traceparent %q does not name its client span %s", id, tp, cs.SpanContext().SpanID())
		}
		if got := ss.SpanContext().TraceState().String(); got != "vendor=x" {
			t.Errorf("%s: the server span's trace state is %q, want vendor=x", id, got)
		}
		parent = ss.SpanContext()
	}
}

// TestOneWayCall checks the spans of a one-way call: the client span ends
// when the call is sent, and the grain's server span is its child.
func TestOneWayCall(t *testing.T) {
	t.Parallel()
	r, l := newRecorder(t), newLedger()
	s := startSilo(t, siloConfig("alone", r, l), l, hopTypes{probe: true})
	if _, err := probe.NewProbeRef(s, "w").Tell(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	const tell = "probe.Probe/Tell"
	cs := r.span(t, tell, trace.SpanKindClient, "probe.Probe/w")
	testwait.For(t, testTimeout, "the one-way call's server span", func() bool {
		return len(r.spans(tell, trace.SpanKindServer, "probe.Probe/w")) == 1
	})
	checkParent(t, r.span(t, tell, trace.SpanKindServer, "probe.Probe/w"), cs.SpanContext())
}

// TestSiloWithoutTracing checks that a grain on a silo without the
// filters sees no span and calls on with its caller's headers unchanged:
// a silo that does not trace passes the trace through.
func TestSiloWithoutTracing(t *testing.T) {
	t.Parallel()
	r, l := newRecorder(t), newLedger()
	cfg := silo.DefaultConfig()
	cfg.Name = "plain"
	cfg.IncomingFilters = []grain.IncomingFilter{l.wireFilter}
	s := startSilo(t, cfg, l, hopTypes{probe: true})

	ctx, root := r.tp.Tracer("test").Start(testCtx(t), "request")
	defer root.End()
	call := r.tr.OutgoingFilter()
	m := probe.Probe_ServiceDesc.Method("Call")
	p := call(ctx, grain.NewID(probe.ProbeGrainType, "a"), m, &probe.Request{Path: []string{"probe.Probe/b"}},
		func(ctx context.Context, req proto.Message) grain.Pending {
			return s.InvokeAsync(ctx, grain.NewID(probe.ProbeGrainType, "a"), m, req)
		})
	if _, err := p.Await(ctx); err != nil {
		t.Fatal(err)
	}
	cs := r.span(t, probeCall, trace.SpanKindClient, "probe.Probe/a")
	checkParent(t, cs, root.SpanContext())
	a, b := l.seen(t, "probe.Probe/a"), l.seen(t, "probe.Probe/b")
	if a.span.IsValid() {
		t.Errorf("a grain on a silo without tracing sees the span %v", a.span)
	}
	if !slices.Equal(a.wire, b.wire) || header(b.wire, "traceparent") == "" {
		t.Errorf("the headers changed from %v to %v along an untraced silo", a.wire, b.wire)
	}
}
