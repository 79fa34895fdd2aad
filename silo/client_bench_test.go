package silo

import (
	"context"
	"testing"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
)

// BenchmarkClientCall is calls from an external client through a silo's
// gateway to grains on that silo, over gRPC on loopback: one at a time
// (sequential), and from 256 concurrent callers, each calling its own
// grain (concurrent=256; calls/s is the figure). Compare them with
// BenchmarkCrossSiloCall and BenchmarkCrossSiloThroughput: the same
// calls between two silos.
func BenchmarkClientCall(b *testing.B) {
	c := gatewayAndClient(b, func() probe.ProbeGrain { return &benchProbe{told: &tally{}} }, nil)
	b.Run("sequential", func(b *testing.B) { benchSequential(b, c) })
	b.Run("concurrent=256", func(b *testing.B) { benchConcurrent(b, c) })
}

// BenchmarkClientOneWay is one-way calls from an external client through
// a silo's gateway to 64 grains on that silo, round robin, over gRPC on
// loopback: BenchmarkCrossSiloOneWay with a client in the caller's place.
func BenchmarkClientOneWay(b *testing.B) {
	told := &tally{reached: make(chan struct{}, 1)}
	benchOneWay(b, gatewayAndClient(b, func() probe.ProbeGrain { return &benchProbe{told: told} }, nil), told)
}

// gatewayAndClient starts a silo with a gateway on loopback, hosting the
// probe grains newProbe makes, and a client of it; the end of tb stops
// both. tweak, if not nil, changes the silo's configuration.
func gatewayAndClient(tb testing.TB, newProbe func() probe.ProbeGrain, tweak func(*Config)) *client.Client {
	cfg := DefaultConfig()
	cfg.Name = "gateway"
	gc := DefaultGatewayConfig()
	gc.Listen = "127.0.0.1:0"
	cfg.Gateway = &gc
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return newProbe() }); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			tb.Error(err)
		}
	})
	c, err := client.Dial(ctx, client.WithGateways(s.GatewayAddr()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
