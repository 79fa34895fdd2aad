package transport

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
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
	t.Parallel()
	a, _, _ := grpcPair(t, nil)
	chs := make([]chan result, 100)
	var wg sync.WaitGroup
	for i := range chs {
		wg.Add(1)
		go func() { // concurrent callers; only the test goroutine fails the test
			defer wg.Done()
			chs[i] = call(a.tr, "b", strings.Repeat("p", i*100), time.Time{})
		}()
	}
	wg.Wait()
	for i, ch := range chs {
		if r := wait(t, ch); r.err != nil || len(r.env.Payload) != i*100 {
			t.Fatalf("call %d over gRPC = %v, %v", i, r.env, r.err)
		}
	}
}

func TestGRPCLargeMessagesAndLimit(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	a := startGRPCSilo(t, "one", "a", newEcho(), nil)
	b := startGRPCSilo(t, "two", "b", newEcho(), nil)
	a.tr.SetPeer("b", b.addr)
	r := wait(t, call(a.tr, "b", "x", time.Time{}))
	wantCode(t, r.err, codes.Unavailable, "silo b")
}

func TestGRPCPeerGoneFailsAtOnce(t *testing.T) {
	t.Parallel()
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
	cc, err := s.net.ClientConn(s.addr)
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

// countingHandler echoes requests and counts them.
type countingHandler struct{ n chan struct{} }

func (h countingHandler) Deliver(from string, env *granaryv1.Envelope, r Responder) {
	r.Reply(&granaryv1.Envelope{Payload: env.Payload})
	h.n <- struct{}{}
}

func TestGRPCFailedPeerStreamEndsWithWriterBlocked(t *testing.T) {
	t.Parallel()
	hb := countingHandler{n: make(chan struct{}, 64)}
	a := startGRPCSilo(t, "test", "a", newEcho(), nil)
	b := startGRPCSilo(t, "test", "b", hb, nil)
	a.tr.SetPeer("b", b.addr)
	// a's reader is held in the first response's callback, so b's answers
	// fill the stream's flow-control window and b's writer blocks in Send.
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	const n = 16 // 8 MiB of answers, twice the stream window
	outcomes := make(chan error, n)
	payload := strings.Repeat("w", 512<<10)
	for range n {
		a.tr.Call("b", &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, Payload: []byte(payload)}, time.Time{},
			func(_ *granaryv1.Envelope, err error) {
				<-hold
				outcomes <- err
			})
	}
	for i := range n {
		select {
		case <-hb.n:
		case <-time.After(defaultTestTimeout):
			t.Fatalf("b answered %d of %d requests", i, n)
		}
	}
	// b declares a failed: its end of the stream ends though its writer
	// is blocked, and b closes without waiting for a to read.
	b.tr.RemovePeer("a", "failed", false)
	closed := make(chan struct{})
	go func() {
		b.tr.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(defaultTestTimeout):
		t.Fatal("b's Close waited for a writer blocked on a stream of a failed peer")
	}
	release()
	for range n {
		select {
		case <-outcomes:
		case <-time.After(defaultTestTimeout):
			t.Fatal("a call got no outcome after b ended the stream")
		}
	}
}

// TestGRPCRemovedPeerStreamEnds: on gRPC, failing an accepted endpoint
// ends its stream, so a peer this silo declared failed learns it at once:
// its next call gets an outcome rather than being run here with the
// answer dropped.
//
// The situation: b's membership declares a failed (a false suspicion,
// or a partition that heals) and b calls RemovePeer(a, failed, false),
// which fails b's accepted endpoint of a's stream. a's next call must
// not go out on a stream that looks healthy to a but whose answers b
// drops. The in-memory network ends the stream when it is closed, so
// only the gRPC transport shows this.
func TestGRPCRemovedPeerStreamEnds(t *testing.T) {
	t.Parallel()
	a, b, _ := grpcPair(t, nil)
	if r := wait(t, call(a.tr, "b", "warm", time.Time{})); r.err != nil {
		t.Fatal(r.err)
	}
	b.tr.RemovePeer("a", "failed", false)
	r := testwait.Recv(t, call(a.tr, "b", "after", time.Time{}), defaultTestTimeout, "the outcome of a call to b after b failed its end of a's stream")
	t.Logf("outcome: %v %v", r.env, r.err)
}

// TestGRPCRemovingOldIncarnationKeepsNewOnesChannel: removing a failed
// peer forgets its address only when no remaining peer uses it, so the
// gRPC channel of a new incarnation at the same address stays open and
// its calls in flight are answered.
//
// The situation: silo b restarts at the same address (a container
// restart keeps its pod IP) with a new member ID, b2. Membership reports
// b2 joined before it declares the old b failed (failure detection takes
// seconds; the restart less): SetPeer(b2, addr), then RemovePeer(b,
// failed).
func TestGRPCRemovingOldIncarnationKeepsNewOnesChannel(t *testing.T) {
	t.Parallel()
	a, b, hb := grpcPair(t, nil)
	if r := wait(t, call(a.tr, "b", "warm", time.Time{})); r.err != nil {
		t.Fatal(r.err)
	}
	a.tr.SetPeer("b2", b.addr) // the new incarnation at the old address
	if r := wait(t, call(a.tr, "b2", "warm", time.Time{})); r.err != nil {
		t.Fatal(r.err)
	}
	block := make(chan struct{})
	hb.mu.Lock()
	hb.block = block
	hb.mu.Unlock()
	var once sync.Once
	release := func() {
		once.Do(func() {
			hb.mu.Lock()
			hb.block = nil
			hb.mu.Unlock()
			close(block)
		})
	}
	t.Cleanup(release)
	inFlight := call(a.tr, "b2", "in flight", time.Time{})
	a.tr.RemovePeer("b", "failed", false) // the old incarnation is declared dead
	release()
	r := wait(t, inFlight)
	if r.err != nil || string(r.env.Payload) != "in flight" {
		t.Fatalf("a call to b2 in flight when the old incarnation b was removed = %v, %v; want its answer", r.env, r.err)
	}
}

// blockingHandler blocks each Deliver until released, telling entered.
type blockingHandler struct {
	entered chan struct{}
	release chan struct{}
}

func (h *blockingHandler) Deliver(from string, env *granaryv1.Envelope, r Responder) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.release
	r.Reply(&granaryv1.Envelope{Payload: env.Payload})
}

// TestGRPCListenerStopWaitsForServe: GRPCListener.Stop, as Listener.Stop
// promises, returns only once the Serve calls of the accepted streams
// have: after a silo's Stop or Close no reader is still inside Deliver,
// routing envelopes into a closed silo, and none of its goroutines
// outlives the silo. (grpc.Server.Stop alone waits for method handlers
// only on a server made with grpc.WaitForHandlers(true).)
func TestGRPCListenerStopWaitsForServe(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.ClusterID, cfg.Self = "test", "b"
	lis, err := ListenGRPC("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &blockingHandler{entered: make(chan struct{}, 1), release: make(chan struct{})}
	gn := NewGRPCNetwork(cfg)
	tb, err := New(cfg, gn, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := lis.Serve(tb); err != nil {
		t.Fatal(err)
	}
	a := startGRPCSilo(t, "test", "a", newEcho(), nil)
	a.tr.SetPeer("b", lis.Addr())
	var released sync.Once
	release := func() { released.Do(func() { close(h.release) }) }
	t.Cleanup(func() {
		release()
		lis.Stop()
		tb.Close()
		gn.Close()
	})

	ch := call(a.tr, "b", "x", time.Time{})
	testwait.Recv(t, h.entered, defaultTestTimeout, "the request to reach b's handler")
	stopped := make(chan struct{})
	go func() {
		lis.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Errorf("GRPCListener.Stop returned while a Serve call was still inside Deliver")
	case <-time.After(500 * time.Millisecond): // a window to see Stop return in, not a wait for an event
	}
	release()
	<-stopped
	<-ch
}
