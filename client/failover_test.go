package client_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
)

// outcome is one call of a load run.
type outcome struct {
	tag string
	err error
}

// load runs callers goroutines that call probe grains through cl with
// unique tags until stop is called, and returns it: it stops them and
// returns every outcome. A test that fails first stops them as it ends.
func load(t *testing.T, cl *client.Client, callers int, acked *atomic.Int64) (stop func() []outcome) {
	var mu sync.Mutex
	var out []outcome
	var wg sync.WaitGroup
	quit := make(chan struct{})
	for w := range callers {
		wg.Go(func() {
			ctx := testCtx(t)
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				tag := fmt.Sprintf("w%d-%d", w, i)
				_, err := probe.NewProbeRef(cl, fmt.Sprintf("k%d", i%64)).Call(ctx, &probe.Request{Tag: tag})
				if err == nil {
					acked.Add(1)
				}
				mu.Lock()
				out = append(out, outcome{tag, err})
				mu.Unlock()
			}
		})
	}
	var once sync.Once
	stop = func() []outcome {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
		return out
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestFailoverWhenAGatewayIsKilled: calls keep flowing while one of two
// gateway silos is killed. Every call the client was told succeeded ran;
// the only failures are Unavailable, for calls on their way through the
// killed silo while it went down (through its gateway, or forwarded to
// its grains; how many depends on how long the kill takes, so the test
// does not bound it); and afterwards calls for every grain succeed, those
// the client would have sent to the dead gateway included.
func TestFailoverWhenAGatewayIsKilled(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a", "b")
	cl := c.dial()
	if len(cl.Gateways()) != 2 {
		t.Fatalf("the client knows %v, want two gateways", cl.Gateways())
	}
	const callers = 8
	var acked atomic.Int64
	stop := load(t, cl, callers, &acked)
	testwait.For(t, testTimeout, "calls before the kill", func() bool { return acked.Load() >= 300 })
	c.kill("b")
	before := acked.Load()
	testwait.For(t, testTimeout, "calls after the kill", func() bool { return acked.Load() >= before+300 })
	failed := 0
	for _, o := range stop() {
		if o.err != nil {
			failed++
			if grain.Code(o.err) != codes.Unavailable {
				t.Errorf("call %s: %v, want Unavailable", o.tag, o.err)
			}
			continue
		}
		if _, ran := c.l.ranOn(o.tag); !ran {
			t.Errorf("call %s succeeded but no grain ran it", o.tag)
		}
	}
	t.Logf("%d calls failed at the kill", failed)
	for i := range 128 {
		if _, err := probe.NewProbeRef(cl, fmt.Sprintf("after%d", i)).Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatalf("a call after the kill: %v", err)
		}
	}
	testwait.For(t, testTimeout, "the client to drop the dead gateway", func() bool { return len(cl.Gateways()) == 1 })
}

// TestNoCallFailsWhenAGatewayStops: a gateway silo that stops gracefully
// tells its clients first, who send their calls elsewhere, and answers
// what it was sent: no call fails.
func TestNoCallFailsWhenAGatewayStops(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a", "b")
	cl := c.dial()
	var acked atomic.Int64
	stop := load(t, cl, 8, &acked)
	testwait.For(t, testTimeout, "calls before the stop", func() bool { return acked.Load() >= 300 })
	c.stop("b")
	before := acked.Load()
	testwait.For(t, testTimeout, "calls after the stop", func() bool { return acked.Load() >= before+300 })
	for _, o := range stop() {
		if o.err != nil {
			t.Errorf("call %s: %v", o.tag, o.err)
		} else if _, ran := c.l.ranOn(o.tag); !ran {
			t.Errorf("call %s succeeded but no grain ran it", o.tag)
		}
	}
	testwait.For(t, testTimeout, "the client to drop the stopped gateway", func() bool { return len(cl.Gateways()) == 1 })
}

// TestClientReturnsToRestartedSiloAlone: a silo alone that stopped and
// started again at the same address is a new gateway to its clients (its
// gateway ID is new at each start, as a member ID is), so the client's
// memory of gateways that went away does not keep it off the list. The
// client's clock stands still: asking for the list when no gateway is
// left, not the refresh interval, brings the silo back.
//
// Not parallel: the silo starts again on the port it was given, which a
// test running alongside could take meanwhile.
func TestClientReturnsToRestartedSiloAlone(t *testing.T) {
	s := startAlone(t, "solo", "127.0.0.1:0")
	addr := s.GatewayAddr()
	cl, err := client.Dial(testCtx(t), client.WithGateways(addr), client.WithClock(clockwork.NewFakeClock()))
	if err != nil {
		s.Stop(testCtx(t))
		t.Fatal(err)
	}
	defer cl.Close()
	ref := probe.NewProbeRef(cl, "k")
	if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ref.Call(testCtx(t), &probe.Request{}) // finds the gateway gone
	s = startAlone(t, "solo", addr)
	defer s.Stop(testCtx(t))
	testwait.For(t, testTimeout, "calls to succeed after the silo came back at "+addr, func() bool {
		_, err := ref.Call(testCtx(t), &probe.Request{})
		return err == nil
	})
}
