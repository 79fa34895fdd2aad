package transport

import (
	"sync/atomic"
	"testing"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// benchRequest is a small request, as a grain call's would be.
func benchRequest() *granaryv1.Envelope {
	return &granaryv1.Envelope{
		Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, GrainType: "bench.Counter", GrainKey: "k1",
		Method: "Add", MethodIndex: 1, Payload: []byte("0123456789abcdef"), TimeoutNanos: int64(30 * time.Second),
	}
}

// BenchmarkBaselineGRPCBidiPingPong is the yardstick for one call between
// silos: a plain gRPC bidirectional stream on loopback echoing the same
// envelope, one in flight at a time.
func BenchmarkBaselineGRPCBidiPingPong(b *testing.B) {
	s := startGRPCSilo(b, "test", "s", newEcho(), nil)
	st := openBaseline(b, s)
	req := benchRequest()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := st.SendMsg(req); err != nil {
			b.Fatal(err)
		}
		var resp granaryv1.Envelope
		if err := st.RecvMsg(&resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransportCall is one call at a time through the transport over
// gRPC on loopback.
func BenchmarkTransportCall(b *testing.B) {
	a, _, _ := grpcPair(b, nil)
	done := make(chan struct{}, 1)
	cb := func(env *granaryv1.Envelope, err error) {
		if err != nil {
			b.Error(err)
		}
		done <- struct{}{}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		a.tr.Call("b", benchRequest(), time.Time{}, cb)
		<-done
	}
}

// BenchmarkTransportCallParallel is many concurrent callers, as 256 grains
// calling grains on another silo would be.
func BenchmarkTransportCallParallel(b *testing.B) {
	a, _, _ := grpcPair(b, nil)
	b.SetParallelism(128) // 256 callers on 2 processors
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		done := make(chan struct{}, 1)
		cb := func(env *granaryv1.Envelope, err error) {
			if err != nil {
				b.Error(err)
			}
			done <- struct{}{}
		}
		for pb.Next() {
			a.tr.Call("b", benchRequest(), time.Time{}, cb)
			<-done
		}
	})
}

// BenchmarkTransportOneWay is one-way envelopes from one sender, counted
// when they arrive.
func BenchmarkTransportOneWay(b *testing.B) {
	hb := &countOneWays{all: make(chan struct{}, 1)}
	a := startGRPCSilo(b, "test", "a", newEcho(), nil)
	bs := startGRPCSilo(b, "test", "b", hb, nil)
	a.tr.SetPeer("b", bs.addr)
	env := benchRequest()
	env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY
	b.ReportAllocs()
	b.ResetTimer()
	hb.want.Store(int64(b.N))
	for range b.N {
		if err := a.tr.Send("b", env, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
	<-hb.all
}

// countOneWays signals all when want envelopes have arrived.
type countOneWays struct {
	n, want atomic.Int64
	all     chan struct{}
}

func (c *countOneWays) Deliver(_ string, _ *granaryv1.Envelope, _ Responder) {
	if c.n.Add(1) == c.want.Load() {
		c.all <- struct{}{}
	}
}
