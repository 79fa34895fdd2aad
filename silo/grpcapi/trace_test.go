package grpcapi_test

import (
	"context"
	"sync"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/grpcapi"
	"github.com/granaryio/granary/silo/tracing"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// traceSeen is what a traceProbe saw of a call: its trace headers and
// the span its Context holds.
type traceSeen struct {
	traceparent, tracestate, baggage string
	span                             trace.SpanContext
}

// traceProbe is a KeyedProbe that records, by its key, what it saw.
type traceProbe struct {
	mu   *sync.Mutex
	seen map[string]traceSeen
}

// record is an incoming filter, outside the tracing one, that keeps the
// trace headers each call arrived with: inside, the grain's Context
// answers with the headers its own calls carry, parented by its span.
func (p traceProbe) record(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	p.mu.Lock()
	p.seen[ctx.ID().Key] = traceSeen{
		traceparent: grain.Header(ctx, "traceparent"),
		tracestate:  grain.Header(ctx, "tracestate"),
		baggage:     grain.Header(ctx, "baggage"),
	}
	p.mu.Unlock()
	return next(ctx, req)
}

func (p traceProbe) Call(ctx grain.Context, req *probe.KeyedRequest) (*probe.Reply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.seen[ctx.ID().Key]
	s.span = trace.SpanFromContext(ctx).SpanContext()
	p.seen[ctx.ID().Key] = s
	return &probe.Reply{Text: ctx.ID().Key}, nil
}

func (traceProbe) Tell(grain.Context, *probe.KeyedRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

// newTracedGateway starts a silo that traces calls into tp,
// hosting traceProbe, behind a gRPC server that serves it with Register,
// and returns a client connection to the server and what the grains saw.
func newTracedGateway(t *testing.T, tp trace.TracerProvider) (*grpc.ClientConn, func(key string) traceSeen) {
	t.Helper()
	tr, err := tracing.New(testContext(t), tracing.Config{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	cfg := silo.DefaultConfig()
	cfg.Name = "grpcapi-trace-test"
	p := traceProbe{mu: &sync.Mutex{}, seen: map[string]traceSeen{}}
	cfg.IncomingFilters = []grain.IncomingFilter{p.record, tr.IncomingFilter()}
	s := startSilo(t, cfg, func(s *silo.Silo) error {
		return probe.RegisterKeyedProbeGrain(s, func(grain.ID) probe.KeyedProbeGrain { return p })
	})
	srv := grpc.NewServer()
	if err := grpcapi.Register(srv, s, []*grain.ServiceDesc{&probe.KeyedProbe_ServiceDesc}, nil); err != nil {
		t.Fatal(err)
	}
	cc := serveLoopback(t, srv)
	return cc, func(key string) traceSeen {
		p.mu.Lock()
		defer p.mu.Unlock()
		s, ok := p.seen[key]
		if !ok {
			t.Fatalf("grain %s saw no call", key)
		}
		return s
	}
}

// TestTraceMetadata checks that the W3C trace metadata of a plain gRPC
// call reaches the grain as call headers, so that the span of a client
// with OpenTelemetry propagation parents the grain's server span.
func TestTraceMetadata(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cc, seen := newTracedGateway(t, tp)

	// A client with OpenTelemetry propagation: its span and baggage,
	// injected into the request metadata.
	ctx, span := tp.Tracer("test-client").Start(testContext(t), "client call", trace.WithSpanKind(trace.SpanKindClient))
	member, err := baggage.NewMember("tenant", "blue")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx = baggage.ContextWithBaggage(ctx, bag)
	carrier := propagation.MapCarrier{}
	propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}).Inject(ctx, carrier)
	var md []string
	for k, v := range carrier {
		md = append(md, k, v)
	}
	md = append(md, "tracestate", "vendor=1", "tracestate", "other=2")
	err = cc.Invoke(metadata.AppendToOutgoingContext(ctx, md...), "/probe.KeyedProbe/Call", &probe.KeyedRequest{Name: "traced"}, &probe.Reply{})
	span.End()
	if err != nil {
		t.Fatal(err)
	}

	got := seen("traced")
	if got.traceparent != carrier.Get("traceparent") {
		t.Errorf("the grain saw traceparent %q, want the client's %q", got.traceparent, carrier.Get("traceparent"))
	}
	if got.tracestate != "vendor=1,other=2" {
		t.Errorf("the grain saw tracestate %q, want the two values joined, %q", got.tracestate, "vendor=1,other=2")
	}
	if got.baggage != "tenant=blue" {
		t.Errorf("the grain saw baggage %q, want tenant=blue", got.baggage)
	}
	var server sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			server = s
		}
	}
	switch {
	case server == nil:
		t.Fatal("the grain's call made no server span")
	case server.Parent().SpanID() != span.SpanContext().SpanID() || server.SpanContext().TraceID() != span.SpanContext().TraceID():
		t.Errorf("the server span's parent is %v, want the client's span %v", server.Parent(), span.SpanContext())
	case !got.span.Equal(server.SpanContext()):
		t.Errorf("the grain saw the span %v, want its server span %v", got.span, server.SpanContext())
	case server.SpanContext().TraceState().String() != "vendor=1,other=2":
		t.Errorf("the server span's trace state is %q, want vendor=1,other=2", server.SpanContext().TraceState())
	}

	// A call without trace metadata has no trace headers and starts a
	// trace of its own.
	rec.Reset()
	if err := cc.Invoke(testContext(t), "/probe.KeyedProbe/Call", &probe.KeyedRequest{Name: "plain"}, &probe.Reply{}); err != nil {
		t.Fatal(err)
	}
	if got := seen("plain"); got.traceparent != "" || got.tracestate != "" || got.baggage != "" {
		t.Errorf("a call without trace metadata carried the headers %+v", got)
	}
	if ended := rec.Ended(); len(ended) != 1 || ended[0].Parent().IsValid() {
		t.Errorf("a call without trace metadata: %d spans, want one with no parent", len(ended))
	}
}
