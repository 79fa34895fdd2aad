// Package tracing traces grain calls with OpenTelemetry: a server span
// around each request a grain runs, a client span around each call sent,
// and the trace carried from one to the next, across silos and from
// clients, in W3C Trace Context headers.
//
// Set it up with New and a Config (DefaultConfig, then choose an
// exporter), and install its two filters:
//
//	tr, err := tracing.New(ctx, cfg)
//	...
//	defer tr.Shutdown(ctx)
//	if tr.Enabled() {
//		siloCfg.IncomingFilters = append(siloCfg.IncomingFilters, tr.IncomingFilter())
//		siloCfg.OutgoingFilters = append(siloCfg.OutgoingFilters, tr.OutgoingFilter())
//	}
//
// A program outside the cluster passes the outgoing filter to its client
// with client.WithOutgoingFilters, so the spans of its calls, children of
// whatever span its context holds, parent the grains' spans.
//
// The contract:
//
//   - Headers are the only caller context that travels with a call, so the
//     trace travels as the call headers traceparent and tracestate, and the
//     OpenTelemetry baggage as the header baggage. The outgoing filter
//     replaces those headers rather than adding to them: they do not grow
//     along a chain of calls. The silo's gRPC gateway (package grpcapi)
//     copies the same three from a plain gRPC client's request metadata,
//     so any client with OpenTelemetry propagation parents the grain's
//     span.
//   - Spans are named "TYPE/METHOD", such as "bank.Account/Deposit", and
//     carry rpc.system "granary", rpc.service, rpc.method, granary.grain
//     ("TYPE/KEY") and rpc.grpc.status_code. A call that fails (a grain's
//     panic included) has the status Error with its code and message.
//   - A grain method runs with a Context that holds its server span:
//     trace.SpanFromContext(ctx) returns it, and calls made with that
//     Context, or a context derived from it, are its children. The runtime
//     sees through that Context to its own, so calls, Blocking, Sleep,
//     timers and grain.FromContext work as without tracing. On a context
//     derived from the method's Context, grain.FromContext returns the
//     runtime's own Context, which lacks the span: pass the method's
//     Context, or contexts derived from it, to keep the trace.
//   - A client span ends at the first Await that returns the call's
//     outcome (a synchronous call always has one). A call whose Pending
//     is never awaited leaves its span unended, and so unexported.
//   - Sampling is parent-based: a call continues its caller's decision;
//     Config.SampleRatio decides for new traces.
//
// With the exporter "none" and no TracerProvider, New returns a Tracing
// whose Enabled is false, and a host installs no filters at all: tracing
// that is off costs nothing on the call path. Its filters still work if
// installed, passing the callers' traces on without recording spans.
package tracing
