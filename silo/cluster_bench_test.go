package silo

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/membership"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

// grpcSilo starts a silo of cluster "bench" on loopback with real
// memberlist gossip and gRPC streams. register registers its grain types
// (none: it only calls). seeds are gossip addresses to join.
func grpcSilo(tb testing.TB, name string, seeds []string, register func(*Silo)) *Silo {
	tb.Helper()
	return grpcSiloWith(tb, name, seeds, register, nil)
}

// grpcSiloWith is grpcSilo with tweak applied to the configuration.
func grpcSiloWith(tb testing.TB, name string, seeds []string, register func(*Silo), tweak func(*Config)) *Silo {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	cc := DefaultClusterConfig()
	cc.Membership = membership.DefaultLocalConfig()
	cc.Membership.ClusterID = "bench"
	cc.Membership.Seeds = seeds
	cc.GRPCListen = "127.0.0.1:0"
	cc.ShutdownGossipDelay = 0
	cfg.Cluster = &cc
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if register != nil {
		register(s)
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
			tb.Errorf("Stop %s: %v", name, err)
		}
	})
	return s
}

// gossipAddr is the address other silos join s through.
func gossipAddr(s *Silo) string {
	gossip, _ := s.ClusterAddrs()
	return gossip
}

// tally counts one-way calls and signals reached when it has counted
// want of them.
type tally struct {
	n, want atomic.Int64
	reached chan struct{}
}

func (t *tally) add() {
	if t.n.Add(1) == t.want.Load() {
		t.reached <- struct{}{}
	}
}

// benchProbe counts one-way calls and answers the others at once.
type benchProbe struct {
	probe.UnimplementedProbeGrain
	told *tally
}

func (g *benchProbe) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	return &probe.Reply{N: req.N}, nil
}

// empty is every Tell's reply: a one-way call's reply goes nowhere, so
// the benchmarks count only the runtime's allocations.
var empty = &emptypb.Empty{}

func (g *benchProbe) Tell(ctx grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	g.told.add()
	return empty, nil
}

// benchPair is a two-silo cluster: the caller hosts no grains, so every
// grain it calls lives on the callee, one network hop away.
func benchPair(b *testing.B) (caller *Silo, told *tally) {
	return benchPairWith(b, func(string) func(*Config) { return nil })
}

// benchPairWith is benchPair with tweak(name) applied to each silo's
// configuration.
func benchPairWith(b *testing.B, tweak func(name string) func(*Config)) (caller *Silo, told *tally) {
	told = &tally{reached: make(chan struct{}, 1)}
	caller, _ = probePair(b, func() probe.ProbeGrain { return &benchProbe{told: told} }, tweak)
	return caller, told
}

// probePair starts two silos on loopback: callee, which hosts the probe
// grains newProbe makes, and caller, which hosts none, so that every
// probe call made through caller runs on callee. tweak(name) changes
// each silo's configuration.
func probePair(tb testing.TB, newProbe func() probe.ProbeGrain, tweak func(name string) func(*Config)) (caller, callee *Silo) {
	callee = grpcSiloWith(tb, "callee", nil, func(s *Silo) {
		if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return newProbe() }); err != nil {
			tb.Fatal(err)
		}
	}, tweak("callee"))
	caller = grpcSiloWith(tb, "caller", []string{gossipAddr(callee)}, nil, tweak("caller"))
	testwait.For(tb, defaultTestTimeout, "the caller to see the callee host probes", func() bool {
		return hostsOf(caller, probe.ProbeGrainType) == 1
	})
	return caller, callee
}

// BenchmarkCrossSiloCall is one call at a time from one silo to a grain
// on the other, over gRPC on loopback. Compare with
// BenchmarkBaselineGRPCBidiPingPong.
func BenchmarkCrossSiloCall(b *testing.B) {
	caller, _ := benchPair(b)
	benchSequential(b, caller)
}

// BenchmarkCrossSiloThroughput is 256 concurrent callers on one silo,
// each calling its own grain on the other silo. calls/s is the figure.
func BenchmarkCrossSiloThroughput(b *testing.B) {
	caller, _ := benchPair(b)
	benchConcurrent(b, caller)
}

// mtlsPair is benchPair with mutual TLS between the silos, from files of
// a test CA.
func mtlsPair(b *testing.B) *Silo {
	ca := newTestCA(b, "bench")
	caller, _ := benchPairWith(b, func(name string) func(*Config) {
		tweak := withClusterTLS(b, ca.siloFiles(name), nil, nil)
		return func(cfg *Config) {
			tweak(cfg)
			cfg.Cluster.LoadReportInterval = time.Second // as the plaintext pair's
		}
	})
	return caller
}

// BenchmarkCrossSiloCallMTLS is BenchmarkCrossSiloCall with mutual TLS
// between the silos: the cost of TLS records on a call's round trip.
func BenchmarkCrossSiloCallMTLS(b *testing.B) { benchSequential(b, mtlsPair(b)) }

// BenchmarkCrossSiloThroughputMTLS is BenchmarkCrossSiloThroughput with
// mutual TLS between the silos.
func BenchmarkCrossSiloThroughputMTLS(b *testing.B) { benchConcurrent(b, mtlsPair(b)) }

// benchSequential makes one call at a time through c to one probe grain.
func benchSequential(b *testing.B, c grain.Caller) {
	ref := probe.NewProbeRef(c, "one")
	ctx := context.Background()
	req := &probe.Request{Tag: "ping", N: 1}
	if _, err := ref.Call(ctx, req); err != nil { // activate it
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

// concurrentCallers is how many goroutines benchConcurrent runs.
const concurrentCallers = 256

// benchConcurrent makes calls through c from concurrentCallers
// goroutines, each calling its own probe grain, and reports calls/s.
func benchConcurrent(b *testing.B, c grain.Caller) {
	refs := make(chan probe.ProbeRef, concurrentCallers)
	for i := range concurrentCallers {
		ref := probe.NewProbeRef(c, fmt.Sprintf("t%d", i))
		if _, err := ref.Call(context.Background(), &probe.Request{}); err != nil {
			b.Fatal(err)
		}
		refs <- ref
	}
	// RunParallel starts parallelism × GOMAXPROCS goroutines: as near
	// concurrentCallers as it can, each with a grain of its own.
	b.SetParallelism(max(1, concurrentCallers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var ref probe.ProbeRef
		select {
		case ref = <-refs:
		default:
			b.Error("more callers than grains")
			return
		}
		ctx := context.Background()
		req := &probe.Request{Tag: "t", N: 1}
		for pb.Next() {
			if _, err := ref.Call(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// BenchmarkCrossSiloOneWay is one-way calls from one silo to 64 grains
// on the other, counted when they have all run. msgs/s is the figure.
func BenchmarkCrossSiloOneWay(b *testing.B) {
	caller, told := benchPair(b)
	benchOneWay(b, caller, told)
}

// benchOneWay sends b.N one-way calls through c, round robin, to 64 probe
// grains that count them in told, once each grain is active, and reports
// msgs/s: from the first call until every one has run.
func benchOneWay(b *testing.B, c grain.Caller, told *tally) {
	const grains = 64
	refs := make([]probe.ProbeRef, grains)
	for i := range refs {
		refs[i] = probe.NewProbeRef(c, fmt.Sprintf("o%d", i))
		if _, err := refs[i].Call(context.Background(), &probe.Request{}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	req := &probe.Request{Tag: "o", N: 1}
	told.want.Store(int64(b.N)) // no one-way call was made yet
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if _, err := refs[i%grains].Tell(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-told.reached:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d one-way calls arrived", told.n.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkBaselineGRPCBidiPingPong is the yardstick for a call between
// silos: a plain gRPC bidirectional stream on loopback echoing a probe
// request, one in flight at a time.
func BenchmarkBaselineGRPCBidiPingPong(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "granary.bench.Echo",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Bidi", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				for {
					var req probe.Request
					if err := ss.RecvMsg(&req); err != nil {
						return nil
					}
					if err := ss.SendMsg(&probe.Reply{N: req.N}); err != nil {
						return err
					}
				}
			},
		}},
	}, struct{}{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-done
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}, "/granary.bench.Echo/Bidi")
	if err != nil {
		b.Fatal(err)
	}
	req := &probe.Request{Tag: "ping", N: 1}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := st.SendMsg(req); err != nil {
			b.Fatal(err)
		}
		var resp probe.Reply
		if err := st.RecvMsg(&resp); err != nil {
			b.Fatal(err)
		}
	}
}
