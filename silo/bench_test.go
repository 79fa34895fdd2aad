package silo

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/overload"
)

// benchGrain is the leanest useful grain: it counts and replies with a
// fresh message, as a real method would.
type benchGrain struct {
	probe.UnimplementedProbeGrain
	n int64
}

func (g *benchGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	g.n++
	return &probe.Reply{N: g.n}, nil
}

// Read relays to the grain named by the request's text: the grain-to-grain
// benchmark's caller.
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

func newBenchSilo(b *testing.B) *Silo {
	return startBenchSilo(b, func() probe.ProbeGrain { return &benchGrain{} })
}

// startBenchSilo starts a silo of the default configuration whose probe
// grains are made by impl, and closes it when the benchmark ends.
func startBenchSilo(b *testing.B, impl func() probe.ProbeGrain) *Silo {
	b.Helper()
	return startProbeSilo(b, DefaultConfig(), impl)
}

// startProbeSilo starts a silo of cfg whose probe grains are made by
// impl, and closes it when the test ends.
func startProbeSilo(tb testing.TB, cfg Config, impl func() probe.ProbeGrain) *Silo {
	tb.Helper()
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return impl() }); err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkBaselineChanAsk is the yardstick for BenchmarkLocalCall: a
// goroutine actor that answers each request on the caller's reply
// channel, the plainest request/response in Go.
func BenchmarkBaselineChanAsk(b *testing.B) {
	type ask struct {
		req   *probe.Request
		reply chan *probe.Reply
	}
	asks := make(chan ask)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var n int64
		for a := range asks {
			n++
			a.reply <- &probe.Reply{N: n}
		}
	}()
	reply := make(chan *probe.Reply)
	req := &probe.Request{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		asks <- ask{req: req, reply: reply}
		<-reply
	}
	b.StopTimer()
	close(asks)
	<-done
}

// BenchmarkLocalCall: a goroutine outside the silo calls one grain,
// request/response, one call at a time.
func BenchmarkLocalCall(b *testing.B) {
	s := newBenchSilo(b)
	ref := probe.NewProbeRef(s, "bench")
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
}

// BenchmarkLocalCallParallel: GOMAXPROCS goroutines call 1,000 grains.
func BenchmarkLocalCallParallel(b *testing.B) {
	s := newBenchSilo(b)
	const grains = 1000
	refs := make([]probe.ProbeRef, grains)
	for i := range refs {
		refs[i] = probe.NewProbeRef(s, strconv.Itoa(i))
		if _, err := refs[i].Call(context.Background(), &probe.Request{}); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		req := &probe.Request{}
		ctx := context.Background()
		for pb.Next() {
			i++
			if _, err := refs[i%grains].Call(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGrainToGrain: grain A calls grain B, both local; one op is
// one call.
func BenchmarkGrainToGrain(b *testing.B) {
	s := newBenchSilo(b)
	a := probe.NewProbeRef(s, "a")
	if _, err := a.Read(context.Background(), &probe.Request{Text: "b", N: 1}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if _, err := a.Read(context.Background(), &probe.Request{Text: "b", N: int64(b.N)}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkActivate: activations per second, each made by a call to a
// new grain. It also reports the heap bytes an idle activation of an
// empty grain keeps, over 100,000 of them.
func BenchmarkActivate(b *testing.B) {
	s := newBenchSilo(b)
	ctx := context.Background()
	req := &probe.Request{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := probe.NewProbeRef(s, "act-"+strconv.Itoa(i)).Call(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(bytesPerActivation(b, 100_000)), "B/activation")
}

// bytesPerActivation activates n empty grains on a fresh silo and returns
// the heap growth per activation, measured after a GC.
func bytesPerActivation(b *testing.B, n int) uint64 {
	s := startBenchSilo(b, func() probe.ProbeGrain { return emptyGrain{} })
	defer s.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("idle-%07d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req := &probe.Request{}
	for _, k := range keys {
		if _, err := probe.NewProbeRef(s, k).Call(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Stats().Activations != n {
		b.Fatalf("%d activations, want %d", s.Stats().Activations, n)
	}
	return (after.HeapAlloc - before.HeapAlloc) / uint64(n)
}

// emptyGrain holds nothing: what remains per activation is the runtime's.
type emptyGrain struct{ probe.UnimplementedProbeGrain }

func (emptyGrain) Call(grain.Context, *probe.Request) (*probe.Reply, error) { return nil, nil }

// BenchmarkLocalTell is one-way calls from four goroutines outside the
// silo to 64 grains, counted when they have all run: the scenario tell of
// the benchmark suite. msgs/s is the figure.
func BenchmarkLocalTell(b *testing.B) {
	told := &tally{reached: make(chan struct{}, 1)}
	s := startBenchSilo(b, func() probe.ProbeGrain { return &benchProbe{told: told} })
	const grains, senders = 64, 4
	refs := make([]probe.ProbeRef, grains)
	for i := range refs {
		refs[i] = probe.NewProbeRef(s, "t"+strconv.Itoa(i))
		if _, err := refs[i].Call(context.Background(), &probe.Request{}); err != nil {
			b.Fatal(err)
		}
	}
	told.want.Store(int64(b.N))
	var next atomic.Int64
	req := &probe.Request{}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if _, err := refs[i%grains].Tell(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-told.reached:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d one-way calls ran", told.n.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// timerGrain registers a timer whose due time and period are its Call's
// N, in nanoseconds, and counts the ticks in ticked.
type timerGrain struct {
	probe.UnimplementedProbeGrain
	ticked *tally
}

func (g *timerGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	tick := func(grain.Context) error {
		g.ticked.add()
		return nil
	}
	_, err := ctx.RegisterTimer("tick", tick, time.Duration(req.N), time.Duration(req.N))
	return &probe.Reply{}, err
}

// BenchmarkTimerTicks is grain timer ticks at a fixed rate: 10,000
// grains each with a timer of a 20 ms period ask for half a million ticks
// a second, about what two cores keep up with. cpu-ns/tick is the
// process's CPU time over the ticks: the timers scenario's figure,
// without its idle noise, at a rate that makes the ticks the process's
// main work.
func BenchmarkTimerTicks(b *testing.B) {
	ticked := &tally{reached: make(chan struct{}, 1)}
	s := startBenchSilo(b, func() probe.ProbeGrain { return &timerGrain{ticked: ticked} })
	const grains = 10000
	req := &probe.Request{N: int64(20 * time.Millisecond)}
	for i := range grains {
		if _, err := probe.NewProbeRef(s, "t"+strconv.Itoa(i)).Call(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := overload.ProcessCPUTime()
	want := ticked.n.Load() + int64(b.N)
	ticked.want.Store(want)
	// Ticks fire meanwhile: the count may have passed want before it was
	// stored, and then nothing signals reached.
	if ticked.n.Load() < want {
		select {
		case <-ticked.reached:
		case <-time.After(time.Minute):
			b.Fatalf("%d of %d ticks fired", ticked.n.Load()-want+int64(b.N), b.N)
		}
	}
	b.ReportMetric(float64(overload.ProcessCPUTime()-cpu0)/float64(b.N), "cpu-ns/tick")
}
