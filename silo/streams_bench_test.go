package silo

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/proto/probe"
)

// countTicks is a stream handler that counts the events it gets.
var countTicks = streams.NewHandler("count", func(l *counter, ctx grain.Context, ev streams.Event[*probe.Tick]) error {
	if l.n.Add(1) == l.want.Load() {
		close(l.done)
	}
	return nil
})

// counter is a Listener whose handler counts; one instance serves every
// activation of a benchmark, which has one subscriber.
type counter struct {
	listener
	n, want atomic.Int64
	done    chan struct{}
}

func (l *counter) Subscribe(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	sub, err := ticks(ctx.Caller(), op).Subscribe(ctx, countTicks)
	if err != nil {
		return nil, err
	}
	return &probe.ListenReply{Subscription: sub.ID}, nil
}

// benchStream publishes b.N events to one stream of provider pc from
// publishers goroutines, one event each at a time, and reports events
// handled by the one subscriber a second, publish to handling.
func benchStream(b *testing.B, pc StreamProviderConfig, publishers int, tweaks ...func(*Config)) {
	c := &counter{done: make(chan struct{})}
	c.want.Store(int64(b.N))
	cfg := DefaultConfig()
	cfg.Name = "bench"
	cfg.Streams = &StreamsConfig{Providers: map[string]StreamProviderConfig{"default": pc}}
	for _, tw := range tweaks {
		tw(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := probe.RegisterListenerGrain(s, func(grain.ID) probe.ListenerGrain { return c }, streams.WithHandlers(countTicks)); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(ctx)
	o := op("bench", "s")
	if _, err := probe.NewListenerRef(s, "sub").Subscribe(ctx, o); err != nil {
		b.Fatal(err)
	}
	st := ticks(s, o)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range publishers {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				if _, err := st.Publish(ctx, &probe.Tick{N: n}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	<-c.done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")

}

// BenchmarkStreamMemory: the memory provider, one stream, one subscriber
// on the same silo, 4 publishers; a buffer as large as the run, so that
// every event is delivered.
func BenchmarkStreamMemory(b *testing.B) {
	benchStream(b, StreamProviderConfig{Buffer: 1 << 24}, 4) // no drops: all delivered
}

// BenchmarkStreamDurable: the durable provider on the embedded store, one
// stream, one subscriber, 1024 publishers waiting for their appends (as
// boltstore's BenchmarkStreamLogAppend's largest case, its ceiling).
func BenchmarkStreamDurable(b *testing.B) {
	dir := b.TempDir()
	benchStream(b, StreamProviderConfig{Kind: "durable"}, 1024, func(cfg *Config) { cfg.DataDir = dir })
}
