package silo

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/protobuf/proto"
)

// TestRegressStopMissesActivationCreatedDuringStop: activationFor checks
// s.stopping, then (after placement) stores and counts a new activation.
// If Stop runs in between, its forEachActivation does not see the new
// activation, so nobody asks it to deactivate: live never returns to 0 and
// Stop waits on emptyc until its context ends (with live == 0 at that
// moment it instead returns without the activation's OnDeactivate).
func TestRegressStopMissesActivationCreatedDuringStop(t *testing.T) {
	placing, proceed := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(proceed) })
	h := newHarness(t, harnessOpt{})
	t.Cleanup(release) // before the harness's Stop, which would wait on the held call
	h.s.rt.Placing = func(id grain.ID) {
		if id.Key == "late" { // held after the stopping check
			close(placing)
			<-proceed
		}
	}
	hold := h.gate()
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("hold start")
		hold.wait(ctx, g)
		return &probe.Reply{}, nil
	})
	fx := h.probe("x").CallAsync(context.Background(), &probe.Request{Tag: "hold"})
	h.waitEvent("hold start")

	lateErr := make(chan error, 1)
	go func() {
		_, err := h.probe("late").Call(context.Background(), &probe.Request{})
		lateErr <- err
	}()
	select { // the call to "late" passes the stopping check
	case <-placing:
	case err := <-lateErr:
		t.Fatalf("the call to late ended before placement: %v", err)
	case <-time.After(defaultTestTimeout):
		t.Fatal("the call to late never reached placement")
	}

	stopErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		stopErr <- h.s.Stop(ctx)
	}()
	x := actOf(h, probe.ProbeGrainType, "x")
	waitFor(t, "Stop asked x to deactivate", func() bool {
		x.Mu.Lock()
		defer x.Mu.Unlock()
		return x.DeactPending
	})
	release()
	<-lateErr
	hold.open()
	_ = fx.Wait(context.Background())
	if err := <-stopErr; err != nil {
		t.Fatalf("Stop: %v (activations left: %d; events %q)", err, h.s.Stats().Activations, h.eventLog())
	}
}

// TestRegressAsyncCallRunsInline: sendAsync goes through startTurn, which
// runs the callee with Exec.TryRun when the caller is a turn and the
// callee is idle. InvokeAsync therefore does not return until the callee's
// whole turn has run, waits included: a fan-out of async calls to idle
// grains runs one after the other, and a callee that waits for something
// its caller does after InvokeAsync deadlocks.
func TestRegressAsyncCallRunsInline(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	hold := h.gate()
	keys := []string{"fb1", "fb2", "fb3"}
	for _, k := range keys { // activate them: a fresh grain is not run inline
		if _, err := h.probe(k).Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	h.script("fanhold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("fan start %s", ctx.ID().Key)
		hold.wait(ctx, g)
		return &probe.Reply{}, nil
	})
	h.script("fan", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		var fs []grain.Waiter
		for _, k := range keys {
			fs = append(fs, probe.NewProbeRef(ctx.Caller(), k).CallAsync(ctx, &probe.Request{Tag: "fanhold"}))
		}
		h.event("fanned")
		var err error
		g.pause(func() { err = grain.AwaitAll(ctx, fs...) })
		return &probe.Reply{}, err
	})
	f := h.probe("fa").CallAsync(context.Background(), &probe.Request{Tag: "fan"})
	if !h.waitEventWithin(3*time.Second, "fanned") {
		t.Errorf("InvokeAsync did not return while its callee waits: events %q", h.eventLog())
	}
	hold.open()
	_ = f.Wait(testCtx(t))
}

// TestRegressChainReentryHeldByPendingDeactivation: submit() queues every
// request to a valid activation with deactPending, before the admission
// gate can see that the request's call chain holds a running request
// there. A reentrant (or call-chain-reentrant) grain that asked to
// deactivate, or any such grain during Stop, deadlocks on A -> B -> A
// until the call times out, where it would otherwise admit the call.
func TestRegressChainReentryHeldByPendingDeactivation(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	h.script("loop", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		if len(req.Path) == 0 {
			return &probe.Reply{}, nil
		}
		if ctx.ID().Type == probe.ReentrantProbeGrainType {
			ctx.DeactivateOnIdle()
		}
		return g.forward(ctx, req)
	})
	// Control: without DeactivateOnIdle the same chain works on a
	// reentrant grain (see TestDeadlockFailsFast for chain reentrancy).
	ref := probe.NewReentrantProbeRef(h.s, "rr")
	_, err := ref.Call(testCtx(t), &probe.Request{Tag: "loop", Path: []string{probeID("rb"), reentrantID("rr")}},
		grain.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatalf("A -> B -> A on a reentrant grain that asked to deactivate: %v", err)
	}
}

// TestRegressTimerFromOnActivateLost: grain timers may be registered in
// OnActivate (registerTimer accepts state activating), but fire() drops a
// tick whose clock fires while the activation is still activating and
// does not re-arm the clock: the timer never ticks again, whatever its
// period.
func TestRegressTimerFromOnActivateLost(t *testing.T) {
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
	for range 20 {
		h.clock.Advance(time.Minute)
		if h.waitEventWithin(50*time.Millisecond, "tick ta") {
			return
		}
	}
	t.Fatal("a periodic timer registered in OnActivate never ticked")
}

// TestRegressFilteredTurnCallerNeedsTurnCtx: turnCaller promises to call
// "on behalf of the turn, whatever context the grain passes". Without
// outgoing filters that holds; with any outgoing filter, invoke() goes
// through future.Await(ctx), which looks for the turn in ctx and fails
// the call with FailedPrecondition (leaving it running, never awaited).
func TestRegressFilteredTurnCallerNeedsTurnCtx(t *testing.T) {
	pass := func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
		return next(ctx, req)
	}
	h := newHarness(t, harnessOpt{cfg: func(c *Config) { c.OutgoingFilters = []grain.OutgoingFilter{pass} }})
	h.script("bg", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		id, _ := grain.ParseID(probeID("bgt"))
		var err error
		g.pause(func() {
			_, err = ctx.Caller().Invoke(context.Background(), id, &probe.Probe_ServiceDesc.Methods[0], &probe.Request{})
		})
		return &probe.Reply{}, err
	})
	if _, err := h.probe("bgc").Call(testCtx(t), &probe.Request{Tag: "bg"}); err != nil {
		t.Fatalf("call through turnCaller with context.Background and a filter: %v", err)
	}
}

// TestRegressSleepIgnoresDeadline: grain.Context.Sleep "waits for d, or
// until the context ends", and the Context carries the call's deadline;
// turnCtx.Sleep only watches the caller's cancellation, so a request
// sleeps (and holds a non-reentrant grain) long after its deadline.
func TestRegressSleepIgnoresDeadline(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	h.script("sleepy", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		var err error
		g.pause(func() { err = ctx.Sleep(3 * time.Second) })
		h.event("woke")
		return &probe.Reply{}, err
	})
	_, err := h.probe("sl").Call(context.Background(), &probe.Request{Tag: "sleepy"}, grain.WithTimeout(200*time.Millisecond))
	if err == nil {
		t.Fatal("no timeout")
	}
	if !h.waitEventWithin(time.Second, "woke") {
		t.Error("Sleep went on for more than a second past the call's deadline")
	}
}

type noopTask struct{}

func (noopTask) Run(*activation.Exec)         {}
func (noopTask) Done(*activation.Exec, error) {}

// TestRegressInterleavedTickAfterPoolClosePanics: fire() of an interleaving
// timer calls enqueue(nil, c) for a tick that never entered the gate
// (c.seq == 0). Between closeAll's pool.Close() (which waits for running
// turns) and its loop that stops timers, Enqueue returns ErrClosed and
// enqueue() calls gate.Finish(0), which panics on the clock goroutine and
// kills the process. Run in a subprocess.
func TestRegressInterleavedTickAfterPoolClosePanics(t *testing.T) {
	if os.Getenv("GRANARY_TEST_CHILD") == "1" {
		interleavedTickChild(t)
		return
	}
	runInChild(t, "TestRegressInterleavedTickAfterPoolClosePanics", 30*time.Second)
}

func interleavedTickChild(t *testing.T) {
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
	waitFor(t, "pool closed", func() bool {
		return probeGroup.Enqueue(activation.Turn{Task: noopTask{}}) == activation.ErrClosed
	})
	h.clock.Advance(time.Minute) // the tick fires; the timer is not stopped yet
	waitNoGoroutineIn(t, "grainTimer).fire")
	hold.open()
	<-closed
	_ = f.Wait(context.Background())
}
