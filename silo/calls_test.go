package silo

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// TestTimeout: a one-second method timeout on a method that runs long
// returns DeadlineExceeded between 0.9 s and 3.5 s, on the real clock; a
// call queued behind it that expired is never executed; and once the long
// method ends, no call is left pending.
func TestTimeout(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	calls0 := local.LiveCalls.Load()
	release := h.hold("long")
	h.script("late", func(grain.Context, *probeGrain, *probe.Request) (*probe.Reply, error) {
		h.event("late executed")
		return &probe.Reply{}, nil
	})
	ref := h.probe("slow")
	start := time.Now()
	long := ref.SlowAsync(context.Background(), &probe.Request{Tag: "long"})
	h.waitEvent("long start")
	_, lateErr := ref.Call(context.Background(), &probe.Request{Tag: "late"}, grain.WithTimeout(50*time.Millisecond))
	if grain.Code(lateErr) != codes.DeadlineExceeded {
		t.Fatalf("queued call: %v, want DeadlineExceeded", lateErr)
	}
	_, err := long.Await(context.Background())
	took := time.Since(start)
	if grain.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("long call: %v, want DeadlineExceeded", err)
	}
	if took < 900*time.Millisecond || took > 3500*time.Millisecond {
		t.Fatalf("timed out after %v, want 0.9–3.5 s", took)
	}
	release.open()
	// The grain serves again, and the expired call never ran.
	if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range h.eventLog() {
		if e == "late executed" {
			t.Fatal("an expired call was executed")
		}
	}
	waitFor(t, "no calls pending", func() bool { return local.LiveCalls.Load() == calls0 })
}

// TestCancelPropagates: cancelling the caller's context cancels the
// callee's, and the caller gets Canceled at once.
func TestCancelPropagates(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	after := h.gate()
	h.script("watch", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("watching")
		g.pause(func() { ctx.Blocking(func() { <-ctx.Done() }) })
		h.event("callee saw %v", ctx.Err())
		after.wait(ctx, g) // reply only once the caller has its outcome
		return &probe.Reply{}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	f := h.probe("c").CallAsync(ctx, &probe.Request{Tag: "watch"})
	h.waitEvent("watching")
	cancel()
	if _, err := f.Await(testCtx(t)); grain.Code(err) != codes.Canceled {
		t.Fatalf("caller got %v, want Canceled", err)
	}
	h.waitEvent("callee saw context canceled")
	after.open()
	// The grain serves the next call: the cancelled one left nothing held.
	if _, err := h.probe("c").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
}

// TestDeadlinePropagates: the callee's context carries the caller's
// deadline, through a grain-to-grain hop.
func TestDeadlinePropagates(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	var seen atomic.Int64
	h.script("deadline", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		if len(req.Path) > 0 {
			return g.forward(ctx, req)
		}
		d, _ := ctx.Deadline()
		seen.Store(d.UnixNano())
		return &probe.Reply{}, nil
	})
	deadline := time.Now().Add(7 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := h.probe("x").Call(ctx, &probe.Request{Tag: "deadline", Path: []string{probeID("y")}}); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(0, seen.Load()); !got.Equal(deadline) {
		t.Fatalf("callee deadline %v, want the caller's %v", got, deadline)
	}
}

// TestStatelessWorkersParallel: a stateless worker with at most two local
// activations runs two requests at once, never three.
func TestStatelessWorkersParallel(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	var running, most atomic.Int32
	release := h.gate()
	h.script("work", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		h.event("working")
		release.wait(ctx, g)
		running.Add(-1)
		return &probe.Reply{Activation: ctx.ActivationID()}, nil
	})
	ref := probe.NewWorkerProbeRef(h.s, "w")
	var fs []grain.Future[*probe.Reply]
	for range 4 {
		fs = append(fs, ref.CallAsync(testCtx(t), &probe.Request{Tag: "work"}))
	}
	h.waitEvent("working")
	h.waitEvent("working")
	// A third grain's call goes through, so the pool had its chance to
	// start a third worker request.
	if _, err := h.probe("other").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	if got := running.Load(); got != 2 {
		t.Fatalf("%d requests running, want 2", got)
	}
	release.open()
	acts := map[uint64]bool{}
	for _, f := range fs {
		r, err := f.Await(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		acts[r.Activation] = true
	}
	if most.Load() != 2 || len(acts) != 2 {
		t.Fatalf("at most %d at once over %d activations, want 2 and 2", most.Load(), len(acts))
	}
}

// TestFilters: incoming and outgoing filters run in order around calls,
// and a header set by an outgoing filter reaches the callee.
func TestFilters(t *testing.T) {
	var (
		log   []string
		logMu sync.Mutex
	)
	note := func(s string) { logMu.Lock(); defer logMu.Unlock(); log = append(log, s) }
	in := func(name string) grain.IncomingFilter {
		return func(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
			note(name + " in " + m.Name + " auth=" + grain.Header(ctx, "auth"))
			if grain.Header(ctx, "auth") == "" {
				return nil, grain.Errorf(codes.Unauthenticated, "no auth header")
			}
			r, err := next(ctx, req)
			note(name + " out")
			return r, err
		}
	}
	out := func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
		note("send " + target.String())
		return next(grain.WithHeader(ctx, "auth", "token"), req)
	}
	h := newHarness(t, harnessOpt{cfg: func(c *Config) {
		c.IncomingFilters = []grain.IncomingFilter{in("f1"), in("f2")}
		c.OutgoingFilters = []grain.OutgoingFilter{out}
	}})
	if _, err := h.probe("f").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	want := "send probe.Probe/f,f1 in Call auth=token,f2 in Call auth=token,f2 out,f1 out"
	if got := strings.Join(log, ","); got != want {
		t.Fatalf("filters ran %s\nwant         %s", got, want)
	}
}

// TestOneWay: a one-way call returns before the grain runs it, and it
// runs.
func TestOneWay(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	release := h.gate()
	h.script("tell", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		release.wait(ctx, g)
		h.event("told")
		return nil, nil
	})
	if r, err := h.probe("o").Tell(testCtx(t), &probe.Request{Tag: "tell"}); r != nil || err != nil {
		t.Fatalf("one-way returned %v %v", r, err)
	}
	release.open()
	h.waitEvent("told")
}

// waitFor polls cond until it holds, failing after defaultTestTimeout.
// For conditions no event announces, such as counters settling.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(defaultTestTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCloseWakesSleepers: Close does not wait out a grain's Sleep, nor a
// call queued behind it; both callers get Unavailable.
func TestCloseWakesSleepers(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	h.script("nap", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("napping")
		var err error
		g.pause(func() { err = ctx.Sleep(time.Hour) })
		return &probe.Reply{}, err
	})
	ref := h.probe("z")
	nap := ref.CallAsync(context.Background(), &probe.Request{Tag: "nap"}, grain.WithTimeout(2*time.Hour))
	h.waitEvent("napping")
	queued := ref.CallAsync(context.Background(), &probe.Request{}, grain.WithTimeout(2*time.Hour))
	closed := make(chan struct{})
	go func() { _ = h.s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(defaultTestTimeout):
		t.Fatal("Close waited for a sleeping grain")
	}
	for _, f := range []grain.Future[*probe.Reply]{nap, queued} {
		if _, err := f.Await(testCtx(t)); grain.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, want Unavailable", err)
		}
	}
}

// TestKeptReferenceServesLaterCalls: a reference a grain made from its
// Context in one call and kept serves its later calls when they pass
// their own Context, and is refused with FailedPrecondition, not
// misattributed to whatever call reuses the first one's record, when
// used with an unrelated context.
func TestKeptReferenceServesLaterCalls(t *testing.T) {
	h := newHarness(t, harnessOpt{})
	var kept probe.ProbeRef
	h.script("keep", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		kept = probe.NewProbeRef(ctx.Caller(), "target")
		return &probe.Reply{}, nil
	})
	h.script("use", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		return kept.Call(ctx, &probe.Request{})
	})
	h.script("use-background", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		return kept.Call(context.Background(), &probe.Request{})
	})
	if _, err := h.probe("holder").Call(testCtx(t), &probe.Request{Tag: "keep"}); err != nil {
		t.Fatal(err)
	}
	// Other calls reuse the first call's record meanwhile.
	for range 50 {
		if _, err := h.probe("other").Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := h.probe("holder").Call(testCtx(t), &probe.Request{Tag: "use"}); err != nil {
			t.Fatalf("a kept reference with the current Context: %v", err)
		}
	}
	if _, err := h.probe("holder").Call(testCtx(t), &probe.Request{Tag: "use-background"}); grain.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a kept reference with an unrelated context: %v, want FailedPrecondition", err)
	}
}
