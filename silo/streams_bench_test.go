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
// publishers goroutines, batch events a call each at a time (Publish for
// 1, PublishBatch for more), and reports events handled by the one
// subscriber a second, publish to handling.
func benchStream(b *testing.B, pc StreamProviderConfig, publishers, batch int, tweaks ...func(*Config)) {
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
			var msgs []*probe.Tick
			for {
				last := next.Add(int64(batch))
				first := last - int64(batch) + 1
				if first > int64(b.N) {
					return
				}
				msgs = msgs[:0]
				for n := first; n <= min(last, int64(b.N)); n++ {
					msgs = append(msgs, &probe.Tick{N: n})
				}
				var err error
				if batch == 1 {
					_, err = st.Publish(ctx, msgs[0])
				} else {
					_, err = st.PublishBatch(ctx, msgs)
				}
				if err != nil {
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
	benchStream(b, StreamProviderConfig{Buffer: 1 << 24}, 4, 1) // no drops: all delivered
}

// BenchmarkStreamDurable: the durable provider on the embedded store, one
// stream, one subscriber, 1024 publishers waiting for their appends (as
// boltstore's BenchmarkStreamLogAppend's largest case, its ceiling).
func BenchmarkStreamDurable(b *testing.B) {
	dir := b.TempDir()
	benchStream(b, StreamProviderConfig{Kind: "durable"}, 1024, 1, func(cfg *Config) { cfg.DataDir = dir })
}

// BenchmarkStreamDurableBatch: BenchmarkStreamDurable with 64 publishers
// publishing batches of 64 events (PublishBatch).
func BenchmarkStreamDurableBatch(b *testing.B) {
	dir := b.TempDir()
	benchStream(b, StreamProviderConfig{Kind: "durable"}, 64, 64, func(cfg *Config) { cfg.DataDir = dir })
}
