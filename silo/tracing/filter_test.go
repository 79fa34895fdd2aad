package tracing_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/tracing"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// gate is a Pending whose outcome comes when the test opens it.
type gate struct {
	open chan struct{}
	err  error
}

func newGate(err error) *gate { return &gate{open: make(chan struct{}), err: err} }

func (g *gate) Await(ctx context.Context) (proto.Message, error) {
	select {
	case <-g.open:
		if g.err != nil {
			return nil, g.err
		}
		return &probe.Reply{Text: "done"}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

var (
	testTarget = grain.NewID(probe.ProbeGrainType, "t")
	testMethod = probe.Probe_ServiceDesc.Method("Call")
)

// send runs the outgoing filter of tr around a call whose runtime returns
// p, and returns the Pending and the context the runtime got.
func send(ctx context.Context, tr *tracing.Tracing, m *grain.MethodDesc, p grain.Pending) (grain.Pending, context.Context) {
	var sent context.Context
	out := tr.OutgoingFilter()(ctx, testTarget, m, &probe.Request{}, func(ctx context.Context, _ proto.Message) grain.Pending {
		sent = ctx
		return p
	})
	return out, sent
}

// TestOutgoingHeaders checks the headers the outgoing filter sends: its
// span's traceparent once, whatever trace headers the context held
// before (duplicates and a stale tracestate included), and every other
// header unchanged and in order.
func TestOutgoingHeaders(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	ctx, root := r.tp.Tracer("test").Start(testCtx(t), "request")
	defer root.End()
	ctx = grain.WithHeader(ctx, "first", "1")
	ctx = grain.WithHeader(ctx, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	ctx = grain.WithHeader(ctx, "tracestate", "stale=1")
	ctx = grain.WithHeader(ctx, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01")
	ctx = grain.WithHeader(ctx, "second", "2")

	p, sent := send(ctx, r.tr, testMethod, grain.Failed(nil))
	if _, err := p.Await(ctx); err != nil {
		t.Fatal(err)
	}
	kv := grainrt.AppendHeaders(nil, sent.Value(grainrt.HeaderKey()))
	cs := r.span(t, probeCall, trace.SpanKindClient, testTarget.String())
	want := []string{"first", "1", "second", "2", "traceparent", "00-" + cs.SpanContext().TraceID().String() + "-" + cs.SpanContext().SpanID().String() + "-01"}
	if !slices.Equal(kv, want) {
		t.Errorf("the call carried the headers %q, want %q", kv, want)
	}
	if got := grain.Header(ctx, "traceparent"); !strings.Contains(got, "00f067aa0ba902b7") {
		t.Errorf("the filter changed its caller's context: traceparent %q", got)
	}
	checkParent(t, cs, root.SpanContext())
}

// TestAwaitEndsSpan checks when the client span ends: not at an Await
// that only gave up waiting, once at the Await that got the outcome,
// however many Awaits there are.
func TestAwaitEndsSpan(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	g := newGate(status.Error(codes.Unavailable, "gone"))
	p, _ := send(testCtx(t), r.tr, testMethod, g)

	gaveUp, cancel := context.WithCancel(testCtx(t))
	cancel()
	if _, err := p.Await(gaveUp); status.Code(err) != codes.Canceled {
		t.Fatalf("an Await whose context ended returned %v, want Canceled", err)
	}
	if n := len(r.Ended()); n != 0 {
		t.Fatalf("%d spans ended while the call goes on, want 0", n)
	}

	close(g.open)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := p.Await(testCtx(t)); status.Code(err) != codes.Unavailable {
				t.Errorf("Await returned %v, want the call's Unavailable", err)
			}
		})
	}
	wg.Wait()
	cs := r.span(t, probeCall, trace.SpanKindClient, testTarget.String())
	if st := cs.Status(); st.Code != otelcodes.Error || st.Description != "Unavailable: gone" {
		t.Errorf("the span's status is %+v, want Error \"Unavailable: gone\"", st)
	}
}

// TestAwaitOnCallContext checks that an Await with the context the call
// was made with ends the span when that context ends: the call ends with
// it.
func TestAwaitOnCallContext(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	p, _ := send(ctx, r.tr, testMethod, newGate(nil))
	cancel()
	if _, err := p.Await(ctx); status.Code(err) != codes.Canceled {
		t.Fatalf("Await returned %v, want Canceled", err)
	}
	checkFailed(t, r.span(t, probeCall, trace.SpanKindClient, testTarget.String()), codes.Canceled)
}

// TestOneWaySpanEndsAtSend checks that a one-way method's span ends as
// the call is sent, with no Await.
func TestOneWaySpanEndsAtSend(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	m := probe.Probe_ServiceDesc.Method("Tell")
	send(testCtx(t), r.tr, m, grain.Failed(nil))
	r.span(t, "probe.Probe/Tell", trace.SpanKindClient, testTarget.String())
}

// TestNoMethod checks that the filters pass a call without a method on
// to the runtime, which refuses it, instead of failing themselves.
func TestNoMethod(t *testing.T) {
	t.Parallel()
	r := newRecorder(t)
	refused := grain.Failed(status.Error(codes.InvalidArgument, "no method"))
	p, sent := send(testCtx(t), r.tr, nil, refused)
	if _, err := p.Await(testCtx(t)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Await returned %v, want the runtime's InvalidArgument", err)
	}
	if sent == nil || len(r.Started()) != 0 {
		t.Errorf("a call without a method: runtime reached %v, %d spans started; want reached, none", sent != nil, len(r.Started()))
	}
}

// TestDisabledPassesTraceOn checks a Tracing that records nothing: its
// outgoing filter still carries its caller's trace on.
func TestDisabledPassesTraceOn(t *testing.T) {
	t.Parallel()
	tr, err := tracing.New(testCtx(t), tracing.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() {
		t.Fatal("a Tracing with the exporter none is Enabled")
	}
	r := newRecorder(t)
	ctx, root := r.tp.Tracer("test").Start(testCtx(t), "request")
	defer root.End()
	_, sent := send(ctx, tr, testMethod, grain.Failed(nil))
	want := "00-" + root.SpanContext().TraceID().String() + "-" + root.SpanContext().SpanID().String() + "-01"
	if got := grain.Header(sent, "traceparent"); got != want {
		t.Errorf("traceparent %q, want the caller's %q", got, want)
	}
	if err := tr.Shutdown(testCtx(t)); err != nil {
		t.Errorf("Shutdown of a disabled Tracing: %v", err)
	}
}
