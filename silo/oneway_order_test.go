package silo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// sequenceProbe checks that each sender's one-way requests run in the
// order sent: a Tell carries its sender in Tag and its number in N, from
// 1. A Call answers how many Tells of its sender ran.
type sequenceProbe struct {
	probe.UnimplementedProbeGrain
	last      map[string]int64
	outOfLine []string // the first few requests that ran out of order
}

func (g *sequenceProbe) Tell(_ grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	if want := g.last[req.Tag] + 1; req.N != want && len(g.outOfLine) < 10 {
		g.outOfLine = append(g.outOfLine, fmt.Sprintf("%s: %d ran after %d", req.Tag, req.N, want-1))
	}
	g.last[req.Tag] = req.N
	return empty, nil
}

func (g *sequenceProbe) Call(_ grain.Context, req *probe.Request) (*probe.Reply, error) {
	if len(g.outOfLine) > 0 {
		return &probe.Reply{N: -1, Text: fmt.Sprint(g.outOfLine)}, nil
	}
	return &probe.Reply{N: g.last[req.Tag]}, nil
}

// TestOneWayRequestsRunInTheOrderSent: a million one-way requests from
// four senders to one grain run in each sender's order, none lost, and a
// call a sender makes between them runs after all it sent before.
func TestOneWayRequestsRunInTheOrderSent(t *testing.T) {
	if testing.Short() {
		t.Skip("a million requests")
	}
	t.Parallel()
	const senders, each = 4, 250_000
	cfg := DefaultConfig()
	// The senders outrun the grain: the queue may hold every request, so
	// none is refused at a limit (which would show as a gap, not as a
	// request out of order).
	cfg.QueueLimits = QueueLimits{}
	s := startProbeSilo(t, cfg, func() probe.ProbeGrain { return &sequenceProbe{last: map[string]int64{}} })
	sendInOrder(t, probe.NewProbeRef(s, "ordered"), senders, each, 25_000)
}

// sendInOrder has senders goroutines each send each one-way requests to
// ref, numbered from 1, and after every every-th a call that checks that
// the grain, a sequenceProbe, ran them all in order.
func sendInOrder(t *testing.T, ref probe.ProbeRef, senders int, each, every int64) {
	t.Helper()
	ctx := testwait.Context(t, 5*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for i := range senders {
		tag := "sender" + strconv.Itoa(i)
		wg.Go(func() {
			for n := int64(1); n <= each; n++ {
				if _, err := ref.Tell(context.Background(), &probe.Request{Tag: tag, N: n}); err != nil {
					errs <- fmt.Errorf("%s's one-way request %d: %w", tag, n, err)
					return
				}
				if n%every != 0 {
					continue
				}
				r, err := ref.Call(ctx, &probe.Request{Tag: tag})
				switch {
				case err != nil:
					errs <- fmt.Errorf("%s's call after its one-way request %d: %w", tag, n, err)
					return
				case r.N == -1:
					errs <- fmt.Errorf("one-way requests ran out of order: %s", r.Text)
					return
				case r.N != n:
					errs <- fmt.Errorf("%s's call after its one-way request %d ran after %d of them, want all", tag, n, r.N)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// countingProbe counts the one-way requests it runs in a count its
// activations share, and deactivates itself when a Call asks.
type countingProbe struct {
	probe.UnimplementedProbeGrain
	ran         *atomic.Int64
	activations *atomic.Int64
}

func (g *countingProbe) OnActivate(grain.Context) error {
	g.activations.Add(1)
	return nil
}

func (g *countingProbe) Tell(grain.Context, *probe.Request) (*emptypb.Empty, error) {
	g.ran.Add(1)
	return empty, nil
}

func (g *countingProbe) Call(ctx grain.Context, _ *probe.Request) (*probe.Reply, error) {
	ctx.DeactivateOnIdle()
	return &probe.Reply{}, nil
}

// TestOneWayRequestsOutliveDeactivations: one-way requests sent while
// their grain deactivates over and over all run, on whichever activation
// follows, and none is lost.
func TestOneWayRequestsOutliveDeactivations(t *testing.T) {
	t.Parallel()
	const tells = 100_000
	var ran, activations atomic.Int64
	cfg := DefaultConfig()
	cfg.QueueLimits = QueueLimits{} // the sender outruns the grain: none may be refused
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	s := startProbeSilo(t, cfg, func() probe.ProbeGrain { return &countingProbe{ran: &ran, activations: &activations} })
	tellThroughChurn(t, s, tells, &ran, &activations)
}

// tellThroughChurn sends tells one-way requests to a countingProbe
// through via while calls make it deactivate over and over, and checks
// that every request ran, on whichever activation followed, and that the
// grain did deactivate meanwhile. silos are those whose failed one-way
// requests count.
func tellThroughChurn(t *testing.T, via *Silo, tells int64, ran, activations *atomic.Int64, silos ...*Silo) {
	t.Helper()
	silos = append(silos, via)
	failures := func() (n uint64) {
		for _, s := range silos {
			n += s.Stats().OneWayFailures
		}
		return n
	}
	ctx := testwait.Context(t, time.Minute)
	ref := probe.NewProbeRef(via, "churn")
	done := make(chan error, 1)
	go func() {
		for range tells {
			if _, err := ref.Tell(context.Background(), &probe.Request{}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	deactivations := 0
	for sending := true; sending; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("a one-way call: %v", err)
			}
			sending = false
		default:
			// A call may find the grain deactivating under it every time
			// it is routed, and give up with Unavailable: the next goes on.
			if _, err := ref.Call(ctx, &probe.Request{}); err != nil && grain.Code(err) != codes.Unavailable {
				t.Fatalf("a call that deactivates the grain: %v", err)
			}
			deactivations++
		}
	}
	testwait.For(t, 30*time.Second, "every one-way request to run or fail", func() bool { return ran.Load()+int64(failures()) >= tells })
	if failed := failures(); failed != 0 {
		t.Fatalf("%d of %d one-way requests failed, %d ran", failed, tells, ran.Load())
	}
	if n := activations.Load(); n < 2 {
		t.Errorf("%d activations over %d deactivations asked for: the test needs the grain to deactivate while requests arrive", n, deactivations)
	}
}

// TestFailedOneWayRequestIsLogged: a one-way request whose handler fails
// cannot tell its sender, so the failure is counted, and logged at most
// once a minute per silo with a count of those held back since the last
// log. A refusal at the hard queue limit, logged where it happens, is
// counted but not logged again.
func TestFailedOneWayRequestIsLogged(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, true, nil, nil)
	q.script("fail", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		return nil, status.Error(codes.FailedPrecondition, "the grain refuses")
	})
	ref := q.probe("f")
	failures := func() []observer.LoggedEntry {
		return q.logs.FilterMessageSnippet("one-way request failed").AllUntimed()
	}
	// tellFailing sends a failing one-way request and waits until the
	// silo has counted it, which it does once it logged it or held the
	// log back.
	tellFailing := func(n uint64) {
		t.Helper()
		if _, err := ref.Tell(q.ctx, &probe.Request{Tag: "fail"}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, defaultTestTimeout, fmt.Sprintf("%d one-way failures counted", n), func() bool { return q.s.Stats().OneWayFailures == n })
	}
	tellFailing(1)
	logged := failures()
	if len(logged) != 1 {
		t.Fatalf("%d logs of a failed one-way request, want 1", len(logged))
	}
	f := logged[0].ContextMap()
	if f["grain"] != "probe.Probe/f" || f["method"] != "Tell" || f["code"] != "FailedPrecondition" || !strings.Contains(fmt.Sprint(f["error"]), "the grain refuses") {
		t.Errorf("the log says %v, want grain probe.Probe/f, method Tell, code FailedPrecondition and the handler's error", f)
	}
	tellFailing(2)
	if n := len(failures()); n != 1 {
		t.Fatalf("%d logs of failed one-way requests within a minute, want 1", n)
	}
	q.clock.Advance(time.Minute)
	tellFailing(3)
	logged = failures()
	if len(logged) != 2 || logged[1].ContextMap()["unlogged_since_last"] != uint64(1) {
		t.Fatalf("after a minute: logs %v, want a second one counting 1 unlogged", logged)
	}
}

// TestOneWayRefusedAtHardLimitIsCountedAndLoggedOnce: a one-way request
// refused at its activation's hard queue limit has the queue limit's own
// log, and is counted as a failed one-way request without a second log.
func TestOneWayRefusedAtHardLimitIsCountedAndLoggedOnce(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, true, nil, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(0, 1)},
	})
	g, first := q.tellWhileBlocked(t, 2) // the first queues; the second is refused
	testwait.For(t, defaultTestTimeout, "the refusal counted", func() bool { return q.s.Stats().OneWayFailures == 1 })
	if n := len(q.logs.FilterMessageSnippet("one-way request was refused").AllUntimed()); n != 1 {
		t.Errorf("%d logs of the refusal, want 1", n)
	}
	if n := len(q.logs.FilterMessageSnippet("one-way request failed").AllUntimed()); n != 0 {
		t.Errorf("the refusal was logged again as a failure (%d logs)", n)
	}
	g.open()
	q.await(first)
}

// TestEveryFailedOneWayRequestOfABurstIsCounted: one-way requests that
// queued behind a running request run in one turn once it ends, and each
// that fails is counted, not only the last.
func TestEveryFailedOneWayRequestOfABurstIsCounted(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, true, nil, nil)
	q.script("fail", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		q.event("ran fail")
		return nil, status.Error(codes.FailedPrecondition, "the grain refuses")
	})
	g := q.hold("block")
	ref := q.probe("k")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	const burst = 5
	for range burst {
		if _, err := ref.Tell(q.ctx, &probe.Request{Tag: "fail"}, grain.WithTimeout(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	g.open()
	q.await(first)
	testwait.For(t, defaultTestTimeout, fmt.Sprintf("%d one-way failures counted", burst), func() bool { return q.s.Stats().OneWayFailures == burst })
	if n := q.runs("fail"); n != burst {
		t.Errorf("%d of the %d one-way requests ran", n, burst)
	}
}
