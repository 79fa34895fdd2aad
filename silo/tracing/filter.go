package tracing

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The attributes of the spans. Granary's status codes are gRPC's, so a
// span's code has the key gRPC instrumentation uses.
const (
	attrSystem     = attribute.Key("rpc.system")
	attrService    = attribute.Key("rpc.service")
	attrMethod     = attribute.Key("rpc.method")
	attrGrain      = attribute.Key("granary.grain")
	attrStatusCode = attribute.Key("rpc.grpc.status_code")

	systemName = "granary"
)

var (
	headerKey = grainrt.HeaderKey()

	serverStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// IncomingFilter returns the filter that starts a server span around each
// request a grain receives, for a silo's IncomingFilters. The span is
// named after the method, "TYPE/METHOD" (such as "bank.Account/Deposit"),
// continues the trace of the call's traceparent and tracestate headers,
// and carries the attributes rpc.system ("granary"), rpc.service (the
// grain type), rpc.method, granary.grain ("TYPE/KEY") and
// rpc.grpc.status_code; a failed call (a panic included) gets the status
// Error with the code and the message.
//
// The method runs with a Context that holds the span:
// trace.SpanFromContext finds it, spans the grain starts are its
// children, and calls made with the Context, or with a context derived
// from it, carry it as their parent in their headers.
func (t *Tracing) IncomingFilter() grain.IncomingFilter { return t.incoming }

// incoming is the IncomingFilter. The grain's turn.
func (t *Tracing) incoming(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	if m == nil {
		return next(ctx, req)
	}
	gc := &grainCtx{Context: ctx, t: t}
	gc.in.ctx = ctx
	parent := t.prop.Extract(context.Background(), &gc.in)
	id := ctx.ID()
	inner, span := t.tracer.Start(parent, spanName(id.Type, m), serverStart...)
	if span.IsRecording() {
		span.SetAttributes(
			attrSystem.String(systemName),
			attrService.String(id.Type),
			attrMethod.String(m.Name),
			attrGrain.String(id.String()),
		)
	}
	gc.inner = inner
	returned := false
	defer func() {
		if !returned { // the method panicked; the panic goes on to the runtime
			endSpan(span, status.Error(codes.Internal, "granary: the grain method panicked"))
		}
	}()
	resp, err := next(gc, req)
	returned = true
	endSpan(span, err)
	return resp, err
}

// OutgoingFilter returns the filter that starts a client span around each
// call sent, for a silo's OutgoingFilters or a client's
// (client.WithOutgoingFilters). The span is a child of the span in the
// call's context: the server span of the request a grain is running, or
// whatever span a program put in the context it calls with. It has the
// name and attributes of the server span, and it ends when the call does,
// at the Await that returns the call's outcome; a call whose Pending is
// never awaited leaves its span unended, and so unexported. A one-way
// method's span ends once the call is sent.
//
// The call carries the span in its traceparent and tracestate headers,
// and the context's baggage in its baggage header. They replace those
// the context held, so headers do not pile up along a chain of calls.
func (t *Tracing) OutgoingFilter() grain.OutgoingFilter { return t.outgoing }

// outgoing is the OutgoingFilter. The caller's goroutine.
func (t *Tracing) outgoing(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
	if m == nil {
		return next(ctx, req) // the runtime refuses it
	}
	sctx, span := t.tracer.Start(ctx, spanName(target.Type, m), clientStart...)
	if span.IsRecording() {
		span.SetAttributes(
			attrSystem.String(systemName),
			attrService.String(target.Type),
			attrMethod.String(m.Name),
			attrGrain.String(target.String()),
		)
	}
	hc := &headerCtx{Context: ctx, headers: t.headers(ctx.Value(headerKey), sctx)}
	p := next(hc, req)
	if m.OneWay {
		span.End()
		return p
	}
	return &pending{p: p, span: span, call: ctx}
}

// spanName is "TYPE/METHOD": the method's full gRPC name without its
// leading slash.
func spanName(typ string, m *grain.MethodDesc) string {
	if n := m.FullName; len(n) > 1 && n[0] == '/' {
		return n[1:]
	}
	return typ + "/" + m.Name
}

// endSpan records the outcome of a call on its span and ends it.
func endSpan(span trace.Span, err error) {
	if span.IsRecording() {
		st := status.Convert(err)
		span.SetAttributes(attrStatusCode.Int(int(st.Code())))
		if err != nil {
			span.SetStatus(otelcodes.Error, st.Code().String()+": "+st.Message())
		}
	}
	span.End()
}

// headers returns the headers base (the value a context holds under
// grainrt.HeaderKey) with the propagator's fields replaced by those of
// ctx: its span and its baggage.
func (t *Tracing) headers(base any, ctx context.Context) any {
	w := &pairs{}
	w.kv = grainrt.AppendHeaders(w.buf[:0], base)
	keep := w.kv[:0]
	for i := 0; i+1 < len(w.kv); i += 2 {
		if !t.isField(w.kv[i]) {
			keep = append(keep, w.kv[i], w.kv[i+1])
		}
	}
	w.kv = keep
	t.prop.Inject(ctx, w)
	return grainrt.HeadersFromPairs(w.kv)
}

// isField reports whether key is a header the propagator writes.
func (t *Tracing) isField(key string) bool {
	for _, f := range t.fields {
		if key == f {
			return true
		}
	}
	return false
}

// pairs is the propagation.TextMapCarrier that headers injects into:
// call headers as key, value pairs, the earliest first.
type pairs struct {
	kv  []string
	buf [6]string
}

// Get returns the value of key, or "".
func (p *pairs) Get(key string) string {
	for i := 0; i+1 < len(p.kv); i += 2 {
		if p.kv[i] == key {
			return p.kv[i+1]
		}
	}
	return ""
}

// Set sets key to value, in its place if it is there already.
func (p *pairs) Set(key, value string) {
	for i := 0; i+1 < len(p.kv); i += 2 {
		if p.kv[i] == key {
			p.kv[i+1] = value
			return
		}
	}
	p.kv = append(p.kv, key, value)
}

// Keys lists the keys.
func (p *pairs) Keys() []string {
	keys := make([]string, 0, len(p.kv)/2)
	for i := 0; i+1 < len(p.kv); i += 2 {
		keys = append(keys, p.kv[i])
	}
	return keys
}

// callHeaders is the propagation.TextMapCarrier that reads a call's
// headers from its context. Reading only: Set does nothing.
type callHeaders struct{ ctx context.Context }

// Get returns the header key, or "".
func (h *callHeaders) Get(key string) string { return grain.Header(h.ctx, key) }

// Set does nothing: the headers of a call that arrived are fixed.
func (h *callHeaders) Set(string, string) {}

// Keys lists the headers' keys, the earliest set first.
func (h *callHeaders) Keys() []string {
	kv := grainrt.AppendHeaders(nil, h.ctx.Value(headerKey))
	keys := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		keys = append(keys, kv[i])
	}
	return keys
}

// grainCtx is the Context a grain method runs with under the incoming
// filter: the runtime's Context, plus the server span. Everything but
// Value goes to the runtime's Context, so the runtime still finds its
// turn through it (grainrt.ContextKey answers with the runtime's Context)
// and calls, Blocking, Sleep and timers work as without it.
type grainCtx struct {
	grain.Context
	t *Tracing
	// inner holds the server span and the call's baggage, which Value
	// answers from.
	inner context.Context
	in    callHeaders
	// headers are the call's headers with the server span as the
	// parent, made at the first call that asks for them.
	once    sync.Once
	headers any
}

// Value answers grainrt.HeaderKey with the call's headers carrying the
// server span, OpenTelemetry's keys from the span's context, and the
// rest as the runtime's Context does.
func (c *grainCtx) Value(key any) any {
	if key == headerKey {
		c.once.Do(c.makeHeaders)
		return c.headers
	}
	if v := c.inner.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

func (c *grainCtx) makeHeaders() {
	c.headers = c.t.headers(c.Context.Value(headerKey), c.inner)
}

// AfterFunc lets the context package watch the runtime's Context, as it
// watches it without the filter, instead of a goroutine per derived
// context.
func (c *grainCtx) AfterFunc(f func()) (stop func() bool) { return afterFunc(c.Context, f) }

// headerCtx is the context an outgoing call is sent with: its caller's,
// with the headers replaced. It forwards AfterFunc, so a call made from
// a grain watches the grain's Context as it would without the filter.
type headerCtx struct {
	context.Context
	headers any
}

// Value answers grainrt.HeaderKey with the call's headers, and the rest as
// the caller's context does.
func (c *headerCtx) Value(key any) any {
	if key == headerKey {
		return c.headers
	}
	return c.Context.Value(key)
}

// AfterFunc runs f when the caller's context ends.
func (c *headerCtx) AfterFunc(f func()) (stop func() bool) { return afterFunc(c.Context, f) }

// afterFuncer is a context that runs a function when it ends, as the
// runtime's grain Context does.
type afterFuncer interface {
	AfterFunc(f func()) (stop func() bool)
}

// afterFunc runs f when ctx ends, as context.AfterFunc does. When ctx is
// a grain's Context, or derives from one by values alone (so ends with
// it), the grain's Context watches: the context package would otherwise
// start a goroutine to watch a context whose only cancellation comes
// from an afterFuncer under a value, a goroutine that could outlive the
// turn.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if g, ok := grain.FromContext(ctx); ok {
		if a, ok := g.(afterFuncer); ok && ctx.Done() == g.Done() {
			return a.AfterFunc(f)
		}
	}
	return context.AfterFunc(ctx, f)
}

// pending is a traced call in flight: it ends the call's client span at
// the first Await that returns the call's outcome.
type pending struct {
	p     grain.Pending
	span  trace.Span
	call  context.Context // the context the call was made with
	ended atomic.Bool
}

// Await waits for the reply, as the wrapped Pending does. An Await whose
// own context ended while the call goes on leaves the span open for a
// later Await.
func (w *pending) Await(ctx context.Context) (proto.Message, error) {
	resp, err := w.p.Await(ctx)
	if err != nil && ctx.Err() != nil && w.call.Err() == nil {
		return resp, err
	}
	if w.ended.CompareAndSwap(false, true) {
		endSpan(w.span, err)
	}
	return resp, err
}
