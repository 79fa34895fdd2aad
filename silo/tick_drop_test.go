package silo

import (
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
)

// TestQueuedTickDroppedOnDeactivation: a timer tick queued behind a
// request when the activation deactivates is dropped with it, not routed
// as a call; and the record it used wakes nobody later: no stray wake-up
// left in a pooled record makes a later call return at once with no
// reply.
func TestQueuedTickDroppedOnDeactivation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{fake: true})
	hold := h.hold("hold")
	h.script("setup", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("t", func(grain.Context) error {
			h.event("tick")
			return nil
		}, time.Second, 0)
		return &probe.Reply{}, err
	})
	h.script("bye", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		ctx.DeactivateOnIdle()
		h.event("bye")
		return &probe.Reply{}, nil
	})
	ref := h.probe("q")
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "setup"}); err != nil {
		t.Fatal(err)
	}
	held := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	h.waitEvent("hold start")
	// The tick comes due and queues behind the held request; then the
	// grain is asked to deactivate.
	h.clock.Advance(time.Second)
	if _, err := ref.Interleave(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	bye := ref.InterleaveAsync(testCtx(t), &probe.Request{Tag: "bye"})
	h.waitEvent("bye")
	hold.open()
	if err := grain.AwaitAll(testCtx(t), held, bye); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("deactivate probe.Probe/q requested")
	// Many calls after: none may return without its reply.
	for i := range 200 {
		r, err := h.probe("after").Call(testCtx(t), &probe.Request{Text: "x"})
		if err != nil || r == nil || r.Text != "Call:x" {
			t.Fatalf("call %d after the drop: %v, %v", i, r, err)
		}
	}
	for _, e := range h.eventLog() {
		if e == "tick" {
			t.Fatal("a tick ran on an activation that was deactivating")
		}
	}
}
