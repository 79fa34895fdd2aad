package silo

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
)

// TestTimerSerialisedWithCalls: a timer tick does not run while a request
// of a non-reentrant grain waits; it runs after the request ends.
func TestTimerSerialisedWithCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true})
	hold := h.gate()
	h.script("setup", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("t", func(ctx grain.Context) error {
			h.event("tick")
			return nil
		}, time.Second, 0)
		return &probe.Reply{}, err
	})
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("hold start")
		hold.wait(ctx, g)
		h.event("hold end")
		return &probe.Reply{}, nil
	})
	ref := h.probe("t")
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "setup"}); err != nil {
		t.Fatal(err)
	}
	f := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	h.waitEvent("hold start")
	h.clock.Advance(time.Second)
	// The tick is due now; a third grain's call goes through so the pool
	// had its chance to run it.
	if _, err := h.probe("other").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	hold.open()
	h.waitEvent("tick")
	if err := f.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(h.eventLog(), ",")
	if !strings.Contains(got, "hold start,activate probe.Probe/other,hold end,tick") {
		t.Fatalf("events %s: the tick ran inside the request", got)
	}
}

// TestTimerInterleaves: an interleaving timer's tick runs while a request
// waits, and a periodic timer ticks again after each tick, until stopped.
func TestTimerInterleaves(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true})
	hold := h.gate()
	var timer grain.Timer
	h.script("setup", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		var err error
		timer, err = ctx.RegisterTimer("t", func(ctx grain.Context) error {
			h.event("tick")
			return nil
		}, time.Second, time.Second, grain.Interleave())
		return &probe.Reply{}, err
	})
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("hold start")
		hold.wait(ctx, g)
		return &probe.Reply{}, nil
	})
	ref := h.probe("ti")
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "setup"}); err != nil {
		t.Fatal(err)
	}
	f := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	h.waitEvent("hold start")
	h.clock.Advance(time.Second)
	h.waitEvent("tick")
	// The next tick is armed a period after this one ended.
	h.advanceUntil(time.Second, "tick")
	timer.Stop()
	timer.Stop()
	if err := timer.Change(time.Second, 0); err == nil {
		t.Fatal("Change of a stopped timer succeeded")
	}
	hold.open()
	if err := f.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestTimerRegisteredInOnActivateTicks: a periodic timer registered in
// OnActivate ticks once the activation serves, even when its first tick
// came due while OnActivate still ran: that tick is put off, not lost, and
// the timer stays armed.
func TestTimerRegisteredInOnActivateTicks(t *testing.T) {
	// Not parallel: waitNoGoroutineIn looks at every goroutine of the
	// process, and other tests' timers fire too.
	h := newHarness(t, harnessOpt{fake: true})
	hold := h.gate()
	h.script("activate:ta", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("t", func(ctx grain.Context) error {
			h.event("tick ta")
			return nil
		}, time.Minute, time.Minute)
		if err != nil {
			return nil, err
		}
		h.event("registered")
		ctx.Blocking(func() { <-hold.c })
		return nil, nil
	})
	f := h.probe("ta").CallAsync(testCtx(t), &probe.Request{}, grain.WithTimeout(time.Hour))
	h.waitEvent("registered")
	h.clock.Advance(time.Minute) // due while OnActivate still runs
	waitNoGoroutineIn(t, "grainTimer).fire")
	hold.open()
	if err := f.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.advanceUntil(time.Minute, "tick ta")
}

// noopTask is a scheduler task that does nothing.
type noopTask struct{}

func (noopTask) Run(*activation.Exec)         {}
func (noopTask) Done(*activation.Exec, error) {}

// TestInterleavedTickDroppedDuringClose: an interleaving timer's tick that
// fires after Close has closed the scheduler's pool, and before Close
// stops the timers, is dropped: it does not panic the clock's goroutine
// (and the process). Runs in a subprocess, for that panic.
func TestInterleavedTickDroppedDuringClose(t *testing.T) {
	t.Parallel()
	if !inChild() {
		runInChild(t, "TestInterleavedTickDroppedDuringClose", 30*time.Second)
		return
	}
	h := newHarness(t, harnessOpt{fake: true})
	hold := h.gate()
	h.script("setup", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("t", func(grain.Context) error { return nil }, time.Minute, 0, grain.Interleave())
		return &probe.Reply{}, err
	})
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("hold start")
		hold.wait(ctx, g)
		return &probe.Reply{}, nil
	})
	ref := h.probe("tc")
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "setup"}); err != nil {
		t.Fatal(err)
	}
	f := h.probe("blk").CallAsync(context.Background(), &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	h.waitEvent("hold start")
	closed := make(chan struct{})
	go func() { h.s.Close(); close(closed) }()
	probeGroup := h.s.rt.Pool.NewGroup("probe-group")
	testwait.For(t, defaultTestTimeout, "the pool to close", func() bool {
		return probeGroup.Enqueue(activation.Turn{Task: noopTask{}}) == activation.ErrClosed
	})
	h.clock.Advance(time.Minute) // the tick fires; the timer is not stopped yet
	waitNoGoroutineIn(t, "grainTimer).fire")
	hold.open()
	<-closed
	_ = f.Wait(context.Background())
}

// TestWaitingTickDoesNotHoldBackOtherTimers: a timer whose tick waited is
// not run inline by the wheel's next batch, so the ticks collected after
// it in that batch run while it waits again.
func TestWaitingTickDoesNotHoldBackOtherTimers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true})
	h.s.rt.TimerWheel.InlineMax = time.Millisecond // fast's ticks inline even under -race
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.script("setup slow", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("slow", func(ctx grain.Context) error {
			h.event("slow tick")
			waitLong(ctx, release)
			return nil
		}, time.Second, time.Second)
		return &probe.Reply{}, err
	})
	h.script("setup fast", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("fast", func(ctx grain.Context) error {
			h.event("fast tick")
			return nil
		}, time.Second+10*time.Millisecond, time.Second)
		return &probe.Reply{}, err
	})
	slow, fast := h.probe("slow"), h.probe("fast")
	callTagged(t, map[probe.ProbeRef]string{slow: "setup slow", fast: "setup fast"})
	// First ticks, apart. A call after each tick returns once the tick's
	// turn ended, and with it the timer was armed again: slow's next tick
	// is due 10 ms before fast's, so the sweep that collects both takes
	// slow first.
	h.clock.Advance(time.Second)
	h.waitEvent("slow tick")
	release <- struct{}{}
	if _, err := slow.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(10 * time.Millisecond)
	h.waitEvent("fast tick")
	if _, err := fast.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	// Both due in one sweep: fast ticks while slow waits.
	h.clock.Advance(time.Second)
	h.waitEvent("fast tick")
	release <- struct{}{}
}

// TestTickThatWaitedInlineIsQueuedFromThen: a timer whose ticks were
// short, and so ran inline in the wheel's batch, and then one tick
// waited, holding back the ticks after it in its batch, has its ticks
// queued from then on: the next time it waits, the ticks after it run.
func TestTickThatWaitedInlineIsQueuedFromThen(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true})
	// A short tick is well under a millisecond even under -race; the
	// waiting ones take longer.
	h.s.rt.TimerWheel.InlineMax = time.Millisecond
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.script("setup w", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		n := 0
		_, err := ctx.RegisterTimer("w", func(ctx grain.Context) error {
			n++
			h.event("w tick")
			if n == 1 {
				return nil // short: the next tick may run inline
			}
			waitLong(ctx, release)
			return nil
		}, time.Second, time.Second)
		return &probe.Reply{}, err
	})
	// f's ticks fall due just after w's, so that a sweep takes w first.
	fPeriod := time.Second + 10*time.Millisecond
	var fTicks atomic.Int32
	h.script("setup f", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("f", func(ctx grain.Context) error {
			fTicks.Add(1)
			return nil
		}, fPeriod, fPeriod)
		return &probe.Reply{}, err
	})
	w, f := h.probe("w"), h.probe("f")
	// drain returns once the ref's running tick has ended, and with it
	// its timer was armed again.
	drain := func(ref probe.ProbeRef) {
		t.Helper()
		if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	waitF := func(n int32) {
		t.Helper()
		testwait.For(t, defaultTestTimeout, fmt.Sprintf("f's tick %d", n), func() bool { return fTicks.Load() == n })
	}
	callTagged(t, map[probe.ProbeRef]string{w: "setup w", f: "setup f"})
	h.clock.Advance(time.Second) // w's first tick, short
	h.waitEvent("w tick")
	drain(w)
	h.clock.Advance(10 * time.Millisecond) // f's first tick
	waitF(1)
	drain(f)
	// Both due in one sweep, w first: w's tick may run inline and wait,
	// holding f's back until it is released.
	h.clock.Advance(fPeriod)
	h.waitEvent("w tick")
	release <- struct{}{}
	waitF(2)
	drain(w)
	drain(f)
	// Again: w's tick is queued now, so f ticks while it waits.
	h.clock.Advance(fPeriod)
	waitF(3)
	release <- struct{}{}
}

// TestInlineTicksAreExclusiveTurns: ticks the wheel's batch runs inline
// are turns like queued ones: none runs while a request of its grain is
// in grain code, with requests arriving all along. The tick and the
// requests write the same field, so under -race an overlap also fails.
func TestInlineTicksAreExclusiveTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true})
	h.s.rt.TimerWheel.InlineMax = time.Hour // every tick after the first may run inline
	var ticks atomic.Int32
	h.script("setup", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("t", func(grain.Context) error {
			if g.inMethod != 0 {
				t.Errorf("a tick ran while %d requests of its grain were in grain code", g.inMethod)
			}
			g.calls++
			ticks.Add(1)
			return nil
		}, time.Second, time.Second)
		return &probe.Reply{}, err
	})
	ref := h.probe("x")
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "setup"}); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
				done <- err
				return
			}
		}
	}()
	for want := int32(1); want <= 50; want++ {
		testwait.For(t, defaultTestTimeout, fmt.Sprintf("tick %d", want), func() bool {
			if ticks.Load() < want {
				h.clock.Advance(time.Second)
			}
			return ticks.Load() >= want
		})
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// waitLong is a tick's wait: it blocks until the test sends on release,
// and returns no sooner than 2 ms after it began, so that the tick counts
// as long however soon the test released it.
func waitLong(ctx grain.Context, release <-chan struct{}) {
	start := time.Now()
	ctx.Blocking(func() { <-release })
	for time.Since(start) < 2*time.Millisecond {
		runtime.Gosched()
	}
}

// callTagged calls each ref with a request tagged with its tag.
func callTagged(t *testing.T, tags map[probe.ProbeRef]string) {
	t.Helper()
	for ref, tag := range tags {
		if _, err := ref.Call(testCtx(t), &probe.Request{Tag: tag}); err != nil {
			t.Fatal(err)
		}
	}
}
