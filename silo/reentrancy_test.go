package silo

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
)

// probeID and reentrantID are the grain IDs, as strings, of probe key
// and reentrant probe key.
func probeID(key string) string     { return probe.ProbeGrainType + "/" + key }
func reentrantID(key string) string { return probe.ReentrantProbeGrainType + "/" + key }

// TestDeadlockFailsFast: on non-reentrant grains a call chain that comes
// back to a grain it holds fails at once with Aborted naming the chain; with
// call-chain reentrancy the same chains succeed.
func TestDeadlockFailsFast(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		start string
		path  []string
		chain string
	}{
		{"A→A", "a", []string{probeID("a")}, "probe.Probe/a → probe.Probe/a"},
		{"A→B→A", "a", []string{probeID("b"), probeID("a")}, "probe.Probe/a → probe.Probe/b → probe.Probe/a"},
		{"A→B→C→A", "a", []string{probeID("b"), probeID("c"), probeID("a")}, "probe.Probe/a → probe.Probe/b → probe.Probe/c → probe.Probe/a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOpt{})
			_, err := h.probe(tc.start).Call(testCtx(t), &probe.Request{Path: tc.path})
			if grain.Code(err) != codes.Aborted || !strings.Contains(err.Error(), tc.chain) {
				t.Fatalf("got %v, want Aborted naming %q", err, tc.chain)
			}
			// The grains are usable afterwards: nothing was left held.
			if _, err := h.probe(tc.start).Call(testCtx(t), &probe.Request{}); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(tc.name+"/chain-reentrant", func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOpt{register: map[string][]grain.RegisterOption{
				probe.ProbeGrainType: {grain.WithCallChainReentrancy()},
			}})
			r, err := h.probe(tc.start).Call(testCtx(t), &probe.Request{Path: tc.path, Text: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Trace) != len(tc.path) {
				t.Fatalf("trace %q, want %d hops", r.Trace, len(tc.path))
			}
		})
	}
}

// TestNonReentrantAcrossAwaits: a non-reentrant grain whose request waits
// (without its processor) starts no other request until it ends.
func TestNonReentrantAcrossAwaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	hold := h.hold("hold")
	h.script("second", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("second")
		return &probe.Reply{}, nil
	})
	ref := h.probe("a")
	first := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"})
	h.waitEvent("hold start")
	second := ref.CallAsync(testCtx(t), &probe.Request{Tag: "second"})
	// The second request is admitted only after the first: give the pool
	// every chance to run it by making a third grain's call go through.
	if _, err := h.probe("other").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	hold.open()
	if err := grain.AwaitAll(testCtx(t), first, second); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(h.eventLog(), ",")
	if want := "activate probe.Probe/a,hold start,activate probe.Probe/other,hold end,second"; got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
}

// TestReentrantInterleavesAtAwaits: a reentrant grain starts a second
// request while the first waits, and never runs two turns at once (the
// probe fails the test if it does).
func TestReentrantInterleavesAtAwaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	hold := h.hold("hold")
	h.script("second", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("second")
		return &probe.Reply{}, nil
	})
	ref := probe.NewReentrantProbeRef(h.s, "r")
	first := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"})
	h.waitEvent("hold start")
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "second"}); err != nil {
		t.Fatal(err)
	}
	hold.open()
	if err := first.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(h.eventLog(), ",")
	if want := "activate probe.ReentrantProbe/r,hold start,second,hold end"; got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
}

// TestReadOnlyTogether: read-only requests run together (each waits for
// the other to start), and a writer waits until they are done.
func TestReadOnlyTogether(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	var started atomic.Int32
	both := h.gate()
	h.script("reader", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		if started.Add(1) == 2 {
			both.open()
		}
		both.wait(ctx, g)
		h.event("reader done")
		return &probe.Reply{}, nil
	})
	h.script("writer", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("writer")
		return &probe.Reply{}, nil
	})
	ref := h.probe("rw")
	r1 := ref.ReadAsync(testCtx(t), &probe.Request{Tag: "reader"})
	r2 := ref.ReadAsync(testCtx(t), &probe.Request{Tag: "reader"})
	w := ref.CallAsync(testCtx(t), &probe.Request{Tag: "writer"})
	if err := grain.AwaitAll(testCtx(t), r1, r2, w); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(h.eventLog(), ",")
	if want := "activate probe.Probe/rw,reader done,reader done,writer"; got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
}

// TestAlwaysInterleave: an always-interleave method runs while a
// non-reentrant grain's request waits.
func TestAlwaysInterleave(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	hold := h.hold("hold")
	ref := h.probe("ai")
	first := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"})
	h.waitEvent("hold start")
	r, err := ref.Interleave(testCtx(t), &probe.Request{Text: "x"})
	if err != nil || r.Text != "Interleave:x" {
		t.Fatalf("interleave: %v %v", r, err)
	}
	hold.open()
	if err := first.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestChainReentryAdmittedDuringPendingDeactivation: a reentrant grain
// that asked to deactivate (as every grain is asked during Stop) still
// admits a request whose call chain holds a running request there:
// A -> B -> A completes rather than waiting, queued behind the
// deactivation, until the call times out.
func TestChainReentryAdmittedDuringPendingDeactivation(t *testing.T) {
	t.Parallel()
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
	// Without DeactivateOnIdle the same chain works on a reentrant grain
	// (see TestDeadlockFailsFast for chain reentrancy).
	ref := probe.NewReentrantProbeRef(h.s, "rr")
	_, err := ref.Call(testCtx(t), &probe.Request{Tag: "loop", Path: []string{probeID("rb"), reentrantID("rr")}},
		grain.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatalf("A -> B -> A on a reentrant grain that asked to deactivate: %v", err)
	}
}
