package silo

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"google.golang.org/grpc/codes"
)

// TestCloseRunsNoHookForActivationStartedWhileClosing: an activation
// that starts after Close marked the silo stopping, but before Close
// aborts the runtime, runs neither OnActivate nor OnDeactivate: its
// request fails with Unavailable, as Close fails queued requests. Close
// is held between the two by the idle collector, which it waits for and
// which the test keeps inside its tick.
func TestCloseRunsNoHookForActivationStartedWhileClosing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true})
	// Keep the collector inside a tick, its report to the harness blocked
	// on a full channel until the test drains it. First: the clock's jump
	// would time out a call already made.
	for len(h.collected) < cap(h.collected) {
		h.collected <- time.Time{}
	}
	unblock := sync.OnceFunc(func() {
		for len(h.collected) > 0 {
			<-h.collected
		}
	})
	t.Cleanup(unblock) // before the harness's Stop, which waits for the collector
	// The collector's first look.
	h.clock.Advance(h.s.rt.Cfg.CollectionInterval)
	testwait.For(t, defaultTestTimeout, "the collector to block in its tick", collectorBlocked())

	lateErr, release := callHeldAtPlacement(t, h, "late")

	closed := make(chan struct{})
	go func() { _ = h.s.Close(); close(closed) }()
	testwait.For(t, defaultTestTimeout, "Close to mark the silo stopping", h.s.rt.Stopping.Load)
	release()
	if err := testwait.Recv(t, lateErr, defaultTestTimeout, "the call to late"); grain.Code(err) != codes.Unavailable {
		t.Fatalf("the call to late: %v, want Unavailable", err)
	}
	// Close has not aborted the runtime yet: the collector still holds it.
	select {
	case <-closed:
		t.Fatal("Close returned while the collector was held")
	default:
	}
	unblock()
	testwait.Recv(t, closed, defaultTestTimeout, "Close")
	for _, e := range h.eventLog() {
		if strings.HasPrefix(e, "activate ") || strings.HasPrefix(e, "deactivate ") {
			t.Errorf("Close ran a hook: %q", e)
		}
	}
}

// TestCloseRunsNoHookOnceAborting: once Close aborts the runtime, no
// hook starts, though the pool has not closed yet: an activation made
// meanwhile fails its request with Unavailable without running
// OnActivate, and one whose deactivation begins meanwhile (its last
// request ends) and which the abort has not closed yet runs no
// OnDeactivate. Close is held inside the abort by the lock of an idle
// activation, which the test holds: the first the abort visits, and the
// one that deactivates is the last.
func TestCloseRunsNoHookOnceAborting(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	for i := range 32 {
		if _, err := h.probe(fmt.Sprintf("k%02d", i)).Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	var order []*local.Activation // as the abort visits them: shard by shard
	h.s.rt.ForEachActivation(func(a *local.Activation) { order = append(order, a) })
	lock, x := order[0], order[len(order)-1]

	hold := h.hold("hold")
	fx := h.probe(x.ID.Key).CallAsync(context.Background(), &probe.Request{Tag: "hold"})
	h.waitEvent("hold start")
	x.RequestDeactivation(grain.DeactivateOperator) // begins when hold ends

	lateErr, release := callHeldAtPlacement(t, h, "late")

	lock.Mu.Lock()
	unlock := sync.OnceFunc(lock.Mu.Unlock)
	t.Cleanup(unlock)
	closed := make(chan struct{})
	go func() { _ = h.s.Close(); close(closed) }()
	testwait.For(t, defaultTestTimeout, "Close to wait for lock inside the abort", abortWaitsForActivation())

	release()
	if err := testwait.Recv(t, lateErr, defaultTestTimeout, "the call to late"); grain.Code(err) != codes.Unavailable {
		t.Errorf("the call to late: got %v, want Unavailable", err)
	}
	hold.open()
	testwait.For(t, defaultTestTimeout, "x to end", func() bool { return actOf(h, probe.ProbeGrainType, x.ID.Key) == nil })
	if err := fx.Wait(testCtx(t)); err != nil {
		t.Errorf("the call to x: %v", err)
	}
	unlock()
	testwait.Recv(t, closed, defaultTestTimeout, "Close")
	for _, e := range h.eventLog() {
		if e == "activate probe.Probe/late" || strings.HasPrefix(e, "deactivate ") {
			t.Errorf("a hook ran once Close aborted the runtime: %q", e)
		}
	}
}

// abortWaitsForActivation reports whether the runtime's Abort, in a
// goroutine the calling goroutine started, waits for an activation's
// lock, to close it.
func abortWaitsForActivation() func() bool {
	started := " in " + goroutineID() + "\n"
	return func() bool {
		for _, g := range goroutineStacks() {
			if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, "local.(*Runtime).Abort(") && strings.Contains(g, started) {
				return true
			}
		}
		return false
	}
}

// collectorBlocked reports whether the idle collector of the silo the
// calling goroutine started waits to send on a channel: the harness's
// report of its tick.
func collectorBlocked() func() bool {
	opened := "local.(*Runtime).Open in " + goroutineID()
	return func() bool {
		for _, g := range goroutineStacks() {
			if strings.Contains(g, "[chan send") && strings.Contains(g, "local.(*Runtime).collect(") && strings.Contains(g, opened+"\n") {
				return true
			}
		}
		return false
	}
}

// goroutineStacks returns the stack of every goroutine.
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineID is "goroutine <n>" for the calling goroutine, as stacks
// name the goroutine that created another.
func goroutineID() string {
	buf := make([]byte, 64)
	f := strings.Fields(string(buf[:runtime.Stack(buf, false)]))
	return f[0] + " " + f[1]
}

// callHeldAtPlacement calls the probe grain key from a goroutine and holds
// the call where it is about to make the activation, after the stopping
// check, until release; it returns once the call is held, with the
// channel its error arrives on.
func callHeldAtPlacement(t *testing.T, h *harness, key string) (<-chan error, func()) {
	t.Helper()
	placing, proceed := make(chan struct{}), make(chan struct{})
	placed, release := sync.OnceFunc(func() { close(placing) }), sync.OnceFunc(func() { close(proceed) })
	t.Cleanup(release) // before the harness's Stop, which would wait on the held call
	h.s.rt.Placing = func(id grain.ID) {
		if id.Key == key {
			placed()
			<-proceed
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := h.probe(key).Call(context.Background(), &probe.Request{})
		errc <- err
	}()
	testwait.Recv(t, placing, defaultTestTimeout, "the call to "+key+" to reach placement")
	return errc, release
}
