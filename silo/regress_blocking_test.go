package silo

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
)

// TestRegressCallInsideBlocking: grain code inside ctx.Blocking still sees
// c.exec set, so a call (or Sleep) made there runs Exec.Wait on a
// goroutine that holds neither its token nor a processor. Exec.Wait takes
// that for "the pool closed" and parks; the reply's Signal pushes a
// continuation that hands the group's token to the parked goroutine; when
// fn returns, Blocking's retake finds the group taken (by itself), queues
// a second continuation and parks for good. The activation never runs
// again, and Stop/Close (pool.Close waits for it) hang forever. Runs in a
// subprocess, since the hang cannot be cleaned up.
func TestRegressCallInsideBlocking(t *testing.T) {
	if os.Getenv("GRANARY_TEST_CHILD") == "1" {
		callInsideBlockingChild(t)
		return
	}
	runInChild(t, "TestRegressCallInsideBlocking", 16*time.Second) // killed = hung in Stop
}

func callInsideBlockingChild(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	h.script("nested", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		var err error
		g.pause(func() {
			ctx.Blocking(func() {
				id, _ := grain.ParseID(probeID("nb"))
				_, err = ctx.Caller().Invoke(ctx, id, &probe.Probe_ServiceDesc.Methods[0], &probe.Request{})
			})
		})
		return &probe.Reply{}, err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := h.probe("na").Call(ctx, &probe.Request{Tag: "nested"}); err != nil {
		t.Error(err)
	}
}
