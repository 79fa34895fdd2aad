package client_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// filterLog records what the test's outgoing filters saw, in order.
type filterLog struct {
	mu     sync.Mutex
	events []string
}

func (l *filterLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *filterLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	return out
}

// namedFilter logs its name going out and the outcome coming back, and
// sets the header "who" to name: the innermost filter's value wins.
func namedFilter(l *filterLog, name string) grain.OutgoingFilter {
	return func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
		l.add(name + " sends " + target.String() + " " + m.Name)
		return &loggedPending{p: next(grain.WithHeader(ctx, "who", name), req), l: l, name: name}
	}
}

type loggedPending struct {
	p    grain.Pending
	l    *filterLog
	name string
}

func (p *loggedPending) Await(ctx context.Context) (proto.Message, error) {
	resp, err := p.p.Await(ctx)
	p.l.add(p.name + " sees " + status.Code(err).String())
	return resp, err
}

// TestOutgoingFilters checks the contract of WithOutgoingFilters: the
// filters run around every call, synchronous, asynchronous and one-way,
// in the order given, the first outermost; their headers reach the
// grain; they see the outcome through the Pending they wrap.
func TestOutgoingFilters(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	l := &filterLog{}
	cl := c.dial(client.WithOutgoingFilters(namedFilter(l, "outer"), namedFilter(l, "inner")))
	ctx := testCtx(t)
	ref := probe.NewProbeRef(cl, "f")

	if _, err := ref.Call(ctx, &probe.Request{Tag: "sync"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"outer sends probe.Probe/f Call", "inner sends probe.Probe/f Call", "inner sees OK", "outer sees OK"}
	if got := l.take(); !slices.Equal(got, want) {
		t.Errorf("a synchronous call: the filters saw %q, want %q", got, want)
	}
	c.l.mu.Lock()
	who := c.l.headers["sync"]
	c.l.mu.Unlock()
	if who != "inner" {
		t.Errorf("the grain saw the header who=%q, want the innermost filter's", who)
	}

	f := ref.CallAsync(ctx, &probe.Request{Tag: "async"})
	if got := l.take(); !slices.Equal(got, want[:2]) {
		t.Errorf("an asynchronous call, before Await: the filters saw %q, want %q", got, want[:2])
	}
	if _, err := f.Await(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.take(); !slices.Equal(got, want[2:]) {
		t.Errorf("an asynchronous call's Await: the filters saw %q, want %q", got, want[2:])
	}

	if _, err := ref.Tell(ctx, &probe.Request{Tag: "told"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testTimeout, "the one-way call", func() bool { return c.l.toldCount("told") == 1 })
	if got := l.take(); len(got) != 4 || got[0] != "outer sends probe.Probe/f Tell" {
		t.Errorf("a one-way call: the filters saw %q", got)
	}

	_, err := probe.NewIntProbeRef(cl, 7).Call(ctx, &probe.Request{})
	if grain.Code(err) != codes.NotFound {
		t.Fatalf("a type no silo hosts: got %v, want NotFound", err)
	}
	if got := l.take(); len(got) != 4 || got[3] != "outer sees NotFound" {
		t.Errorf("a failed call: the filters saw %q, want the NotFound last", got)
	}
}

// TestOutgoingFilterRefuses checks that a filter that returns Failed stops
// the call: it reaches no grain, and the caller gets the filter's error.
func TestOutgoingFilterRefuses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	refuse := func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
		return grain.Failed(status.Error(codes.PermissionDenied, "not today"))
	}
	cl := c.dial(client.WithOutgoingFilters(refuse))
	_, err := probe.NewProbeRef(cl, "r").Call(testCtx(t), &probe.Request{Tag: "refused"})
	if grain.Code(err) != codes.PermissionDenied {
		t.Fatalf("got %v, want the filter's PermissionDenied", err)
	}
	if _, ran := c.l.ranOn("refused"); ran {
		t.Error("a call a filter refused reached the grain")
	}
}

// TestOutgoingFilterBadCalls checks that a call without a method or a
// grain fails before any filter runs, and that Dial refuses a nil
// filter, naming the option.
func TestOutgoingFilterBadCalls(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	l := &filterLog{}
	cl := c.dial(client.WithOutgoingFilters(namedFilter(l, "f")))
	ctx := testCtx(t)
	if _, err := cl.Invoke(ctx, grain.NewID(probe.ProbeGrainType, "x"), nil, &probe.Request{}); grain.Code(err) != codes.InvalidArgument {
		t.Errorf("a call without a method: got %v, want InvalidArgument", err)
	}
	m := probe.Probe_ServiceDesc.Method("Call")
	if _, err := cl.InvokeAsync(ctx, grain.ID{}, m, &probe.Request{}).Await(ctx); grain.Code(err) != codes.InvalidArgument {
		t.Errorf("a call to no grain: got %v, want InvalidArgument", err)
	}
	if got := l.take(); len(got) != 0 {
		t.Errorf("the filters saw bad calls: %q", got)
	}

	_, err := client.Dial(ctx, client.WithGateways(c.addrs()...), client.WithOutgoingFilters(nil))
	var ce *client.ConfigError
	if !errors.As(err, &ce) || ce.Option != "WithOutgoingFilters" {
		t.Fatalf("Dial with a nil filter: got %v, want a ConfigError naming WithOutgoingFilters", err)
	}
}

// TestTracingFromClient checks the tracing package's outgoing filter on a
// client: the call's span is a child of the caller's, and the grain gets
// its traceparent.
func TestTracingFromClient(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr, err := tracing.New(testCtx(t), tracing.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	seeTraceparent := func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
		got = grain.Header(ctx, "traceparent")
		return next(ctx, req)
	}
	cl := c.dial(client.WithOutgoingFilters(tr.OutgoingFilter(), seeTraceparent))
	ctx, root := tp.Tracer("test").Start(testCtx(t), "request")
	if _, err := probe.NewProbeRef(cl, "t").Call(ctx, &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	root.End()
	var call sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "probe.Probe/Call" && s.SpanKind() == trace.SpanKindClient {
			call = s
		}
	}
	switch {
	case call == nil:
		t.Fatal("no client span for the call")
	case call.Parent().SpanID() != root.SpanContext().SpanID():
		t.Errorf("the call's span has the parent %s, want the caller's %s", call.Parent().SpanID(), root.SpanContext().SpanID())
	case !strings.Contains(got, call.SpanContext().SpanID().String()):
		t.Errorf("the call carried traceparent %q, which does not name its span %s", got, call.SpanContext().SpanID())
	}
}
