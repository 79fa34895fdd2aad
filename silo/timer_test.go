package silo

import (
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
)

// TestTimerSerialisedWithCalls: a timer tick does not run while a request
// of a non-reentrant grain waits; it runs after the request ends.
func TestTimerSerialisedWithCalls(t *testing.T) {
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
