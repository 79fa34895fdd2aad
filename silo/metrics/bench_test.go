package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeCtx is the grain.Context of a call made straight to the filter:
// the filter asks it only for the grain's ID.
type fakeCtx struct {
	grain.Context
	id grain.ID
}

func (c *fakeCtx) ID() grain.ID { return c.id }

// answer is the end of a filter chain: it returns its reply or error.
func answer(reply proto.Message, err error) grain.Invocation {
	return func(grain.Context, proto.Message) (proto.Message, error) { return reply, err }
}

func TestFilterAllocatesNothingOnSuccess(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m, err := New(Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	f := m.IncomingFilter()
	var ctx grain.Context = &fakeCtx{id: grain.NewID("t.T", "k")}
	md := &grain.MethodDesc{Name: "Get", FullName: "/t.T/Get"}
	req, next := &probe.Request{}, answer(&probe.Reply{}, nil)
	if _, err := f(ctx, md, req, next); err != nil { // makes the method's stats
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = f(ctx, md, req, next) }); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
	if got := m.CallTotals(); len(got) != 1 || got[0].Calls != 1002 || got[0].Errors != 0 {
		t.Fatalf("CallTotals() = %v, want 1,002 calls of t.T", got)
	}
}

func TestFilterCountsUnnamedCodes(t *testing.T) {
	m, err := New(Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var ctx grain.Context = &fakeCtx{id: grain.NewID("t.T", "k")}
	md := &grain.MethodDesc{Name: "Get", FullName: "/t.T/Get"}
	odd := status.Error(codes.Code(40), "a code with no name")
	for range 3 {
		if _, err := m.IncomingFilter()(ctx, md, nil, answer(nil, odd)); !errors.Is(err, odd) {
			t.Fatalf("the filter changed the error to %v", err)
		}
	}
	if got := m.CallTotals(); len(got) != 1 || got[0].Calls != 3 || got[0].Errors != 3 {
		t.Fatalf("CallTotals() = %v, want 3 failed calls", got)
	}
	if errs := m.RecentErrors(); len(errs) != 3 || errs[0].Code != 40 || errs[0].Message != "a code with no name" {
		t.Fatalf("RecentErrors() = %+v", errs)
	}
}

func benchSilo(b *testing.B, filters []grain.IncomingFilter) *silo.Silo {
	b.Helper()
	cfg := silo.DefaultConfig()
	cfg.IncomingFilters = filters
	s, err := silo.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &probeGrain{} }); err != nil {
		b.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// passThrough is a filter that does nothing: what the silo's filter chain
// costs by itself.
func passThrough(ctx grain.Context, _ *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
	return next(ctx, req)
}

// BenchmarkLocalCall: a goroutine outside the silo calls one grain, one
// call at a time, through a silo without filters, one with a filter that
// does nothing, and one with the metrics filter alone.
func BenchmarkLocalCall(b *testing.B) {
	m, err := New(Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		filters []grain.IncomingFilter
	}{
		{"plain", nil},
		{"passthrough", []grain.IncomingFilter{passThrough}},
		{"metrics", []grain.IncomingFilter{m.IncomingFilter()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := benchSilo(b, bc.filters)
			ref := probe.NewProbeRef(s, "bench")
			ctx, req := context.Background(), &probe.Request{}
			if _, err := ref.Call(ctx, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ref.Call(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFilter: the filter alone around a method that returns at once,
// called from one goroutine and from GOMAXPROCS goroutines at once (which
// share the method's counters).
func BenchmarkFilter(b *testing.B) {
	m, err := New(Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	f := m.IncomingFilter()
	var ctx grain.Context = &fakeCtx{id: grain.NewID("t.T", "k")}
	md := &grain.MethodDesc{Name: "Get", FullName: "/t.T/Get"}
	req, next := &probe.Request{}, answer(&probe.Reply{}, nil)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = f(ctx, md, req, next)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = f(ctx, md, req, next)
			}
		})
	})
}

// BenchmarkScrape: one Gather of a silo hosting the probe types, whose
// metrics filter has seen calls to ten grain types of five methods each,
// with two status codes per method: 100 call series.
func BenchmarkScrape(b *testing.B) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	s := benchSilo(b, []grain.IncomingFilter{m.IncomingFilter()})
	if err := m.Attach(s); err != nil {
		b.Fatal(err)
	}
	f := m.IncomingFilter()
	failed := status.Error(codes.NotFound, "no such thing")
	for typ := range 10 {
		var ctx grain.Context = &fakeCtx{id: grain.NewID(fmt.Sprintf("bench.Type%d", typ), "k")}
		for meth := range 5 {
			md := &grain.MethodDesc{Name: fmt.Sprint("M", meth), FullName: fmt.Sprintf("/bench.Type%d/M%d", typ, meth)}
			_, _ = f(ctx, md, nil, answer(&probe.Reply{}, nil))
			_, _ = f(ctx, md, nil, answer(nil, failed))
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	series := 0
	for _, mf := range mfs {
		series += len(mf.GetMetric())
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(mfs)), "families")
	b.ReportMetric(float64(series), "series")
}

// BenchmarkClockRead: a full time.Now (wall and monotonic clock) against
// the monotonic-only time.Since that elapsed makes with the real clock.
func BenchmarkClockRead(b *testing.B) {
	epoch := time.Now()
	var sink time.Duration
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			//lint:ignore S1012 the benchmark measures this expression against time.Since
			sink += time.Now().Sub(epoch)
		}
	})
	b.Run("since", func(b *testing.B) {
		for b.Loop() {
			sink += time.Since(epoch)
		}
	})
	_ = sink
}
