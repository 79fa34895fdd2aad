package silo

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// stuckGrains scripts two kinds of grain code that never end on their
// own: "spin" loops on its processor and "block" waits on a channel
// without releasing it, both ignoring their contexts. It starts one of
// each and returns the function that finally lets them end, which the
// test calls once it has checked what it needs (and a cleanup calls in
// any case, so the package's goroutine check sees them gone).
func stuckGrains(t *testing.T, h *harness) (release func()) {
	var stop atomic.Bool
	block := make(chan struct{})
	h.script("spin", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		h.event("spin start")
		for !stop.Load() {
		}
		return &probe.Reply{}, nil
	})
	h.script("block", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		h.event("block start")
		<-block
		return &probe.Reply{}, nil
	})
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			stop.Store(true)
			close(block)
		}
	}
	t.Cleanup(release)
	for _, tag := range []string{"spin", "block"} {
		h.probe(tag).SlowAsync(context.Background(), &probe.Request{Tag: tag}, grain.WithTimeout(time.Hour))
		h.waitEvent(tag + " start")
	}
	return release
}

func stuckHarness(t *testing.T) (*harness, *observer.ObservedLogs) {
	core, logs := observer.New(zap.ErrorLevel)
	h := newHarness(t, harnessOpt{cfg: func(c *Config) {
		c.CloseTimeout = 300 * time.Millisecond
		c.Logger = zap.New(core)
	}})
	return h, logs
}

// checkAbandoned checks that the spinning and the blocked turn were
// reported abandoned, by grain, method and stack.
func checkAbandoned(t *testing.T, h *harness, logs *observer.ObservedLogs) {
	t.Helper()
	if n := h.s.Stats().Overload.AbandonedTurns; n != 2 {
		t.Errorf("Stats().Overload.AbandonedTurns = %d, want 2", n)
	}
	entries := logs.FilterMessageSnippet("abandoned").All()
	for _, key := range []string{"spin", "block"} {
		found := false
		for _, e := range entries {
			f := e.ContextMap()
			if f["group"] == probe.ProbeGrainType+"/"+key && f["turn"] == "Slow" && strings.Contains(f["stack"].(string), "silo.stuckGrains") {
				found = true
			}
		}
		if !found {
			t.Errorf("no abandoned-turn report for %s/%s with its stack; got %d reports: %v", probe.ProbeGrainType, key, len(entries), entries)
		}
	}
}

// TestStopReturnsWhenItsContextEnds: Stop returns its context's error as
// soon as the context ends, though one grain spins and one blocks
// forever; the silo closes in the background, and a Close after it
// waits for that close, which abandons the two turns within CloseTimeout.
func TestStopReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	h, logs := stuckHarness(t)
	release := stuckGrains(t, h)

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- h.s.Stop(ctx) }()
	testwait.For(t, defaultTestTimeout, "Stop to begin", h.s.rt.Stopping.Load)
	cancel()
	if err := testwait.Recv(t, stopped, defaultTestTimeout, "Stop to return once its context ended"); err != context.Canceled {
		t.Fatalf("Stop = %v, want context.Canceled", err)
	}
	closed := make(chan struct{})
	go func() { _ = h.s.Close(); close(closed) }()
	testwait.Recv(t, closed, defaultTestTimeout, "Close after the interrupted Stop")
	checkAbandoned(t, h, logs)
	release()
}

// TestCloseReturnsDespiteTurnsThatNeverEnd: Close returns within about
// CloseTimeout though one grain spins and one blocks forever, reports
// both, and a second Close waits for the first rather than returning
// early.
func TestCloseReturnsDespiteTurnsThatNeverEnd(t *testing.T) {
	t.Parallel()
	h, logs := stuckHarness(t)
	release := stuckGrains(t, h)

	first := make(chan struct{})
	go func() { _ = h.s.Close(); close(first) }()
	testwait.For(t, defaultTestTimeout, "Close to begin", h.s.rt.Stopping.Load)
	second := make(chan struct{})
	go func() { _ = h.s.Close(); close(second) }()
	testwait.Recv(t, first, defaultTestTimeout, "the first Close")
	testwait.Recv(t, second, defaultTestTimeout, "the second Close")
	checkAbandoned(t, h, logs)
	release()
}

// TestSecondStopWaitsForTheFirst: a Stop called while another drains
// returns only once the first has finished, not at once.
func TestSecondStopWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	g := h.hold("held")
	h.probe("held").SlowAsync(context.Background(), &probe.Request{Tag: "held"})
	h.waitEvent("held start")

	first := make(chan error, 1)
	go func() { first <- h.s.Stop(testCtx(t)) }()
	testwait.For(t, defaultTestTimeout, "the first Stop to begin", h.s.rt.Stopping.Load)
	second := make(chan error, 1)
	go func() { second <- h.s.Stop(testCtx(t)) }()
	// The held request keeps the first Stop draining, and the second
	// waits for it.
	testwait.For(t, defaultTestTimeout, "the second Stop to wait", func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "silo.(*Silo).waitHalted")
	})
	select {
	case err := <-second:
		t.Fatalf("the second Stop returned %v while the first was draining", err)
	default:
	}
	g.open()
	if err := testwait.Recv(t, first, defaultTestTimeout, "the first Stop"); err != nil {
		t.Fatalf("the first Stop: %v", err)
	}
	if err := testwait.Recv(t, second, defaultTestTimeout, "the second Stop"); err != nil {
		t.Fatalf("the second Stop: %v", err)
	}
}

// TestCloseEndsAStuckReminderTick: Close returns within about
// CloseTimeout though a reminder tick is stuck in grain code that ignores
// its context, and the call's own timeout is an hour away.
func TestCloseEndsAStuckReminderTick(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	w.tickHold = make(chan struct{})
	s := newStateSilo(t, w, func(c *Config) {
		withReminders(storage.NewMemory(0))(c)
		c.CloseTimeout = 300 * time.Millisecond
		c.ResponseTimeout = time.Hour
	})
	release := sync.OnceFunc(func() { close(w.tickHold) })
	t.Cleanup(release)
	remind(t, s, "a", "r", testReminderPeriod, testReminderPeriod)
	w.waitTicks(t, "a", "r", 1)
	closed := make(chan struct{})
	go func() { _ = s.Close(); close(closed) }()
	testwait.Recv(t, closed, defaultTestTimeout, "Close with a reminder tick stuck in grain code")
	if n := s.Stats().Overload.AbandonedTurns; n != 1 {
		t.Errorf("abandoned %d turns, want the stuck tick", n)
	}
	release()
}
