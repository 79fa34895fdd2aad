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
	c := gatewayAndClient(b, &tally{})
	b.Run("sequential", func(b *testing.B) { benchSequential(b, c) })
	b.Run("concurrent=256", func(b *testing.B) { benchConcurrent(b, c) })
}

// BenchmarkClientOneWay is one-way calls from an external client through
// a silo's gateway to 64 grains on that silo, round robin, over gRPC on
// loopback: BenchmarkCrossSiloOneWay with a client in the caller's place.
func BenchmarkClientOneWay(b *testing.B) {
	told := &tally{reached: make(chan struct{}, 1)}
	benchOneWay(b, gatewayAndClient(b, told), told)
}

// gatewayAndClient starts a silo with a gateway on loopback, hosting
// probe grains that count one-way calls in told, and a client of it; the
// benchmark's end stops both.
func gatewayAndClient(b *testing.B, told *tally) *client.Client {
	cfg := DefaultConfig()
	cfg.Name = "gateway"
	gc := DefaultGatewayConfig()
	gc.Listen = "127.0.0.1:0"
	cfg.Gateway = &gc
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &benchProbe{told: told} }); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			b.Error(err)
		}
	})
	c, err := client.Dial(ctx, client.WithGateways(s.GatewayAddr()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}
