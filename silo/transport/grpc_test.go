package transport

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// grpcSilo is a transport served by a gRPC server on a loopback port.
type grpcSilo struct {
	tr   *Transport
	net  *GRPCNetwork
	srv  *grpc.Server
	addr string
	done chan struct{}
}

func startGRPCSilo(tb testing.TB, cluster, self string, h Handler, tweak func(*Config)) *grpcSilo {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Self = cluster, self
	if tweak != nil {
		tweak(&cfg)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gn := NewGRPCNetwork(cfg)
	tr, err := New(cfg, gn, h)
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(cfg)...)
	RegisterGRPC(srv, tr)
	registerBaseline(srv)
	s := &grpcSilo{tr: tr, net: gn, srv: srv, addr: lis.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		srv.Serve(lis)
	}()
	tb.Cleanup(s.stop)
	return s
}

func (s *grpcSilo) stop() {
	s.tr.Close()
	s.net.Close()
	s.srv.Stop()
	<-s.done
}

func grpcPair(tb testing.TB, tweak func(*Config)) (a, b *grpcSilo, hb *echo) {
	hb = newEcho()
	a = startGRPCSilo(tb, "test", "a", newEcho(), tweak)
	b = startGRPCSilo(tb, "test", "b", hb, tweak)
	a.tr.SetPeer("b", b.addr)
	b.tr.SetPeer("a", a.addr)
	return a, b, hb
}

func TestGRPCRoundTrip(t *testing.T) {
	a, _, _ := grpcPair(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := strings.Repeat("p", i*100)
			r := wait(t, call(a.tr, "b", want, time.Time{}))
			if r.err != nil || string(r.env.Payload) != want {
				errs <- r.err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a call over gRPC failed: %v", err)
	}
}

func TestGRPCLargeMessagesAndLimit(t *testing.T) {
	a, _, _ := grpcPair(t, func(c *Config) { c.MaxMessageSize, c.MaxBatchBytes = 1<<20, 64<<10 })
	big := strings.Repeat("z", 1<<20-64)
	r := wait(t, call(a.tr, "b", big, time.Time{}))
	if r.err != nil || len(r.env.Payload) != len(big) {
		t.Fatalf("a message just under the limit: %v", r.err)
	}
	r = wait(t, call(a.tr, "b", big+strings.Repeat("z", 128), time.Time{}))
	wantCode(t, r.err, codes.ResourceExhausted, "MaxMessageSize")
}

func TestGRPCOtherClusterRefused(t *testing.T) {
	a := startGRPCSilo(t, "one", "a", newEcho(), nil)
	b := startGRPCSilo(t, "two", "b", newEcho(), nil)
	a.tr.SetPeer("b", b.addr)
	r := wait(t, call(a.tr, "b", "x", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "silo b")
}

func TestGRPCPeerGoneFailsAtOnce(t *testing.T) {
	a, b, _ := grpcPair(t, func(c *Config) { c.RedialBackoff = 0 })
	if r := wait(t, call(a.tr, "b", "warm", time.Time{})); r.err != nil {
		t.Fatal(r.err)
	}
	b.stop()
	r := wait(t, call(a.tr, "b", "after", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "silo b")
}

// The baseline: a plain gRPC bidirectional stream that echoes proto
// messages, one in flight at a time.

var baselineStream = grpc.StreamDesc{StreamName: "Bidi", ServerStreams: true, ClientStreams: true}

func registerBaseline(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "granary.test.Echo",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Bidi", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				for {
					var env granaryv1.Envelope
					if err := ss.RecvMsg(&env); err != nil {
						return nil
					}
					if err := ss.SendMsg(&env); err != nil {
						return err
					}
				}
			},
		}},
	}, struct{}{})
}

func openBaseline(tb testing.TB, s *grpcSilo) grpc.ClientStream {
	cc, err := s.net.channel(s.addr)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	st, err := cc.NewStream(ctx, &baselineStream, "/granary.test.Echo/Bidi")
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
