package tracing_test

import (
	"context"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/proto"
)

// benchGrain replies to Call with a fresh message; Read relays req.N
// calls to the grain named by req.Text, for the grain-to-grain shape.
type benchGrain struct {
	probe.UnimplementedProbeGrain
	n int64
}

func (g *benchGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	g.n++
	return &probe.Reply{N: g.n}, nil
}

func (g *benchGrain) Read(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	callee := probe.NewProbeRef(ctx.Caller(), req.Text)
	inner := &probe.Request{}
	for range req.N {
		if _, err := callee.Call(ctx, inner); err != nil {
			return nil, err
		}
	}
	return &probe.Reply{N: req.N}, nil
}

// benchMode is one tracing set-up of the benchmark.
type benchMode struct {
	name string
	// filters: install filters; sampler, when set, makes them tracing's,
	// else filters that only call on, which measure what the silo's
	// filter path itself costs.
	filters bool
	sampler sdktrace.Sampler
}

// benchModes are the set-ups compared: no filters (as a host installs
// with the exporter "none"), filters that do nothing, tracing's filters
// with a sampler that records nothing, and with one that records every
// span into a batch processor whose exporter drops them.
var benchModes = []benchMode{
	{name: "off"},
	{name: "passthrough", filters: true},
	{name: "never", filters: true, sampler: sdktrace.NeverSample()},
	{name: "always", filters: true, sampler: sdktrace.AlwaysSample()},
}

func passIncoming(ctx grain.Context, _ *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	return next(ctx, req)
}

func passOutgoing(ctx context.Context, _ grain.ID, _ *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
	return next(ctx, req)
}

// startBenchSilo starts a silo alone hosting benchGrain, with mode's
// filters, and closes it when the benchmark ends.
func startBenchSilo(b *testing.B, mode benchMode) *silo.Silo {
	b.Helper()
	cfg := silo.DefaultConfig()
	sampler := mode.sampler
	if mode.filters && sampler == nil {
		cfg.IncomingFilters = []grain.IncomingFilter{passIncoming}
		cfg.OutgoingFilters = []grain.OutgoingFilter{passOutgoing}
	}
	if sampler != nil {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		tr, err := tracing.New(context.Background(), tracing.Config{TracerProvider: tp})
		if err != nil {
			b.Fatal(err)
		}
		cfg.IncomingFilters = []grain.IncomingFilter{tr.IncomingFilter()}
		cfg.OutgoingFilters = []grain.OutgoingFilter{tr.OutgoingFilter()}
	}
	s, err := silo.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &benchGrain{} }); err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkTracedCall measures a local grain call, one at a time, in each
// tracing mode: from a goroutine outside the silo (outside), and from a
// grain to another grain (grain), which is a call with a client and a
// server span.
func BenchmarkTracedCall(b *testing.B) {
	for _, mode := range benchModes {
		b.Run("from=outside/tracing="+mode.name, func(b *testing.B) {
			s := startBenchSilo(b, mode)
			ref := probe.NewProbeRef(s, "callee")
			ctx := context.Background()
			req := &probe.Request{}
			if _, err := ref.Call(ctx, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := ref.Call(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, mode := range benchModes {
		b.Run("from=grain/tracing="+mode.name, func(b *testing.B) {
			s := startBenchSilo(b, mode)
			caller := probe.NewProbeRef(s, "caller")
			ctx := context.Background()
			if _, err := caller.Read(ctx, &probe.Request{Text: "callee", N: 1}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if _, err := caller.Read(ctx, &probe.Request{Text: "callee", N: int64(b.N)}, grain.WithTimeout(time.Hour)); err != nil {
				b.Fatal(err)
			}
		})
	}
}
