package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
)

// recorder is a ProbeObserver that records the numbers it is notified of
// and answers Ask with its name and the question.
type recorder struct {
	name string
	mu   sync.Mutex
	got  []int64
	n    chan struct{} // a token per Notify
}

func newRecorder(name string) *recorder { return &recorder{name: name, n: make(chan struct{}, 1024)} }

func (r *recorder) Notify(_ context.Context, req *probe.Request) (*emptypb.Empty, error) {
	r.mu.Lock()
	r.got = append(r.got, req.N)
	r.mu.Unlock()
	r.n <- struct{}{}
	return &emptypb.Empty{}, nil
}

func (r *recorder) Ask(_ context.Context, req *probe.Request) (*probe.Reply, error) {
	return &probe.Reply{Text: r.name + ": " + req.Text}, nil
}

// waitNotified waits for n more notifications.
func (r *recorder) waitNotified(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		testwait.Recv(t, r.n, testTimeout, fmt.Sprintf("%s's notification %d of %d", r.name, i+1, n))
	}
}

// ask has the grain key, through caller, ask the observer obs.
func ask(ctx context.Context, caller grain.Caller, key string, obs grain.ID, q string) (*probe.Reply, error) {
	return probe.NewProbeRef(caller, key).Call(ctx, &probe.Request{Tag: "ask", Path: []string{obs.String()}, Text: q})
}

// TestObserverCalls: grains on every silo reach a client's observer, its
// replies come back, and the one-way calls of each grain arrive in the
// order the grain made them.
func TestObserverCalls(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a", "b")
	cl := c.dial()
	rec := newRecorder("rec")
	obs, err := probe.CreateProbeObserver(cl, rec)
	if err != nil {
		t.Fatal(err)
	}
	if cl.HomeGateway() == "" {
		t.Fatal("the client has an observer but no home gateway")
	}
	silos := map[string]bool{}
	for i := range 16 {
		key := fmt.Sprintf("g%d", i)
		r, err := ask(testCtx(t), cl, key, obs.ID(), "hi")
		if err != nil {
			t.Fatalf("grain %s asking the observer: %v", key, err)
		}
		if r.Text != "rec: hi" {
			t.Fatalf("the observer answered %q", r.Text)
		}
		who, err := probe.NewProbeRef(cl, key).Call(testCtx(t), &probe.Request{})
		if err != nil {
			t.Fatal(err)
		}
		silos[who.Text] = true
	}
	if len(silos) != 2 {
		t.Fatalf("the grains ran on %v; want both silos, to call from each", silos)
	}
	const n = 200
	if _, err := probe.NewProbeRef(cl, "notifier").Call(testCtx(t), &probe.Request{Tag: "notify", N: n, Path: []string{obs.ID().String()}}); err != nil {
		t.Fatal(err)
	}
	rec.waitNotified(t, n)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, got := range rec.got {
		if got != int64(i+1) {
			t.Fatalf("notification %d carried %d: out of order (%v...)", i+1, got, rec.got[:min(len(rec.got), i+3)])
		}
	}
}

// TestObserverGoneWhenClientCloses: once its client closes, calls to an
// observer fail fast with NotFound, and one deleted fails the same way.
func TestObserverGoneWhenClientCloses(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a", "b")
	other := c.dial()
	cl, err := client.Dial(testCtx(t), client.WithGateways(c.addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	obs, err := probe.CreateProbeObserver(cl, newRecorder("rec"))
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := probe.CreateProbeObserver(cl, newRecorder("deleted"))
	if err != nil {
		t.Fatal(err)
	}
	cl.DeleteObserver(deleted.ID())
	if _, err := ask(testCtx(t), other, "x", deleted.ID(), "?"); grain.Code(err) != codes.NotFound {
		t.Fatalf("asking a deleted observer: %v, want NotFound", err)
	}
	if _, err := ask(testCtx(t), other, "x", obs.ID(), "?"); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	testwait.For(t, testTimeout, "calls to the closed client's observer to fail with NotFound", func() bool {
		start := time.Now()
		_, err := ask(testCtx(t), other, "x", obs.ID(), "?")
		if grain.Code(err) != codes.NotFound {
			return false
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("the call to a gone observer took %v", d)
		}
		return true
	})
}

// TestObserverMovesHome: when the client's home gateway stops, or is
// killed, the client moves home and its observer stays reachable by the
// same reference.
func TestObserverMovesHome(t *testing.T) {
	t.Parallel()
	t.Run("stop", func(t *testing.T) { t.Parallel(); testObserverMovesHome(t, false) })
	t.Run("kill", func(t *testing.T) { t.Parallel(); testObserverMovesHome(t, true) })
}

func testObserverMovesHome(t *testing.T, kill bool) {
	c := newCluster(t, "a", "b", "c")
	cl := c.dial()
	obs, err := probe.CreateProbeObserver(cl, newRecorder("rec"))
	if err != nil {
		t.Fatal(err)
	}
	home := cl.HomeGateway()
	var homeName string
	for _, n := range []string{"a", "b", "c"} {
		if c.silo(n).Member() == home {
			homeName = n
		}
	}
	if homeName == "" {
		t.Fatalf("the home %q is no silo of the cluster", home)
	}
	if kill {
		c.kill(homeName)
	} else {
		c.stop(homeName)
	}
	testwait.For(t, testTimeout, "the client to move home", func() bool { h := cl.HomeGateway(); return h != "" && h != home })
	for i := range 8 {
		r, err := ask(testCtx(t), cl, fmt.Sprintf("m%d", i), obs.ID(), "still there?")
		if err != nil {
			t.Fatalf("after the home stopped: %v", err)
		}
		if r.Text != "rec: still there?" {
			t.Fatalf("the observer answered %q", r.Text)
		}
	}
}

// TestRefresherSurvivesHomeAddressChange: when the gateway list gives
// the client's home gateway a new address (a silo alone answers with the
// address each client reached it at), the old stream ends and the
// transport tells StreamsEnded on the refresher's goroutine, in the
// middle of applying the list. apply holds no lock of the client across
// SetPeer, so StreamsEnded takes the client's lock, the client moves
// home, the refresher goes on refreshing at each interval, and Close
// returns.
func TestRefresherSurvivesHomeAddressChange(t *testing.T) {
	t.Parallel()
	f := startFakeGateway(t)
	clock := clockwork.NewFakeClock()
	const refresh = time.Second // of the fake clock, under the 5 s bound of a request for the list
	cl, err := client.Dial(testCtx(t), client.WithGateways(f.lis.Addr()), client.WithGatewayRefresh(refresh), client.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := probe.CreateProbeObserver(cl, newRecorder("rec")); err != nil {
		t.Fatal(err)
	}
	if cl.HomeGateway() != "fake" {
		t.Fatalf("home %q", cl.HomeGateway())
	}
	moved := "127.0.0.1:1"
	f.addr.Store(&moved)
	// The first refresh applies the list that moves the home gateway; a
	// refresher stuck applying it would ask for no list after it.
	n := f.lists.Load()
	for want := n + 1; want <= n+2; want++ {
		clock.Advance(refresh)
		testwait.For(t, testTimeout, fmt.Sprintf("refresh %d after the home gateway moved", want-n), func() bool { return f.lists.Load() >= want })
	}
	closed := make(chan struct{})
	go func() { cl.Close(); close(closed) }()
	testwait.Recv(t, closed, testTimeout, "Close")
}
