package silo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
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
	// Not parallel: it counts the process's live call records
	// (local.LiveCalls), and bounds the timeout in real time.
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
	testwait.For(t, defaultTestTimeout, "no calls pending", func() bool { return local.LiveCalls.Load() == calls0 })
}

// TestCancelPropagates: cancelling the caller's context cancels the
// callee's, and the caller gets Canceled at once.
func TestCancelPropagates(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// TestCloseWakesSleepers: Close does not wait out a grain's Sleep, nor a
// call queued behind it; both callers get Unavailable.
func TestCloseWakesSleepers(t *testing.T) {
	t.Parallel()
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
	testwait.Recv(t, closed, defaultTestTimeout, "Close, which must not wait for a sleeping grain")
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
	t.Parallel()
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

// TestGrainFutureRefusesASecondConcurrentAwait: a future a grain made
// may be awaited by one goroutine at a time; a second Await while the
// first waits is refused with FailedPrecondition, and the first still
// gets the reply.
func TestGrainFutureRefusesASecondConcurrentAwait(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	release := make(chan struct{})
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &probe.Reply{N: 7}, nil
	})
	h.script("await-twice", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		f := probe.NewProbeRef(ctx.Caller(), "callee").CallAsync(ctx, &probe.Request{Tag: "hold"})
		type outcome struct {
			r   *probe.Reply
			err error
		}
		outcomes := make(chan outcome, 2)
		for range 2 {
			go func() {
				r, err := f.Await(ctx)
				outcomes <- outcome{r, err}
			}()
		}
		// The callee answers only once released, so the Await that returns
		// first is the one refused while the other waits.
		if o := <-outcomes; grain.Code(o.err) != codes.FailedPrecondition {
			return nil, fmt.Errorf("the first Await to return, before the reply: %v, %v; want FailedPrecondition", o.r, o.err)
		}
		close(release)
		if o := <-outcomes; o.err != nil || o.r.GetN() != 7 {
			return nil, fmt.Errorf("the Await that waited: %v, %v; want the reply", o.r, o.err)
		}
		if r, err := f.Await(ctx); err != nil || r.GetN() != 7 {
			return nil, fmt.Errorf("an Await after the reply: %v, %v; want the reply", r, err)
		}
		return &probe.Reply{}, nil
	})
	if _, err := h.probe("caller").Call(testCtx(t), &probe.Request{Tag: "await-twice"}); err != nil {
		t.Fatal(err)
	}
}

// TestAsyncCallReturnsWhileCalleeWaits: InvokeAsync returns without
// waiting for the callee's turn, even when the caller is a turn and the
// callee is idle: a fan-out of async calls to grains whose turns wait
// starts them all, and the caller goes on while they wait.
func TestAsyncCallReturnsWhileCalleeWaits(t *testing.T) {
	t.Parallel()
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
	testwait.Until(t, h.eventc, 3*time.Second, "InvokeAsync to return while its callees wait",
		func(e string) bool { return e == "fanned" })
	hold.open()
	_ = f.Wait(testCtx(t))
}

// TestTurnCallerAcceptsAnyContextWithFilters: a grain's Caller calls on
// behalf of the turn whatever context the grain passes, context.Background
// included, with outgoing filters as without.
func TestTurnCallerAcceptsAnyContextWithFilters(t *testing.T) {
	t.Parallel()
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
		t.Fatalf("call through the turn's Caller with context.Background and a filter: %v", err)
	}
}

// TestSleepEndsAtCallDeadline: grain.Context.Sleep waits for d or until
// the context ends, and the context carries the call's deadline: a
// request sleeps (and holds its non-reentrant grain) no longer than its
// deadline.
func TestSleepEndsAtCallDeadline(t *testing.T) {
	// Not parallel: it bounds, in real time, how late Sleep ends.
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
	testwait.Until(t, h.eventc, time.Second, "Sleep to end within a second of the call's deadline",
		func(e string) bool { return e == "woke" })
}

// TestCallInsideBlockingCompletes: a call (or Sleep) that grain code
// makes inside ctx.Blocking, on a goroutine that holds neither the
// activation's turn nor a processor, gets its reply there; when the
// blocking function returns the turn goes on, and Stop and Close, which
// wait for every turn, return. Runs in a subprocess: a turn that never
// resumes would hang the test binary's Stop for good.
func TestCallInsideBlockingCompletes(t *testing.T) {
	t.Parallel()
	if !inChild() {
		runInChild(t, "TestCallInsideBlockingCompletes", 16*time.Second) // killed: hung in Stop
		return
	}
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

// TestCancelRacingReplyLeavesReleasedCallAlone: when a caller's context
// is cancelled while the reply is on its way, nothing that the
// cancellation started (context.AfterFunc's goroutine) touches the call's
// record after the caller released it: it neither reads it back from the
// pool nor settles, with Canceled, another call that reuses it. Run with
// -race. Runs in a subprocess: a late touch of a reset record can
// dereference nil and kill the process.
func TestCancelRacingReplyLeavesReleasedCallAlone(t *testing.T) {
	t.Parallel()
	if !inChild() {
		runInChild(t, "TestCancelRacingReplyLeavesReleasedCallAlone", 60*time.Second)
		return
	}
	h := newHarness(t, harnessOpt{})
	var mu sync.Mutex
	var cancelB context.CancelFunc
	h.script("caller", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		// A cancellable context that does not derive from the grain's (to
		// keep derived contexts out of this test).
		cctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mu.Lock()
		cancelB = cancel
		mu.Unlock()
		id, _ := grain.ParseID(probeID("ub"))
		var err error
		g.pause(func() {
			_, err = ctx.Caller().Invoke(cctx, id, &probe.Probe_ServiceDesc.Methods[0], &probe.Request{Tag: "cancelme"})
		})
		if err != nil && grain.Code(err) != codes.Canceled {
			return nil, err
		}
		return &probe.Reply{}, nil
	})
	h.script("cancelme", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		mu.Lock()
		cancelB()
		mu.Unlock()
		return &probe.Reply{}, nil
	})
	for i := range 30 {
		hold := h.gate()
		h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
			h.event("hold start %d", i)
			hold.wait(ctx, g)
			return &probe.Reply{}, nil
		})
		fb := h.probe("ub").CallAsync(testCtx(t), &probe.Request{Tag: "hold"})
		h.waitEvent(fmt.Sprintf("hold start %d", i))
		fa := h.probe("ua").CallAsync(testCtx(t), &probe.Request{Tag: "caller"})
		b := actOf(h, probe.ProbeGrainType, "ub")
		testwait.For(t, defaultTestTimeout, "A's call queued on B", func() bool {
			b.Mu.Lock()
			defer b.Mu.Unlock()
			return b.QueuedLocked() == 1
		})
		hold.open()
		if err := fb.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if err := fa.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAwaitFromTwoGoroutines: grain.Pending's Await may be called more
// than once and from any goroutine: two goroutines awaiting one outside
// future both get its reply, and neither disturbs the call records of
// later calls. Runs in a subprocess: a second awaiter that touched a
// recycled record could dereference nil and kill the process.
func TestAwaitFromTwoGoroutines(t *testing.T) {
	t.Parallel()
	if !inChild() {
		runInChild(t, "TestAwaitFromTwoGoroutines", 30*time.Second)
		return
	}
	h := newHarness(t, harnessOpt{})
	hold := h.gate()
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("hold start")
		hold.wait(ctx, g)
		return &probe.Reply{Text: "ok"}, nil
	})
	f := h.probe("ca").CallAsync(context.Background(), &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	h.waitEvent("hold start")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r, err := f.Await(ctx)
			if err == nil && r.GetText() != "ok" {
				err = fmt.Errorf("reply %v", r)
			}
			errs <- err
		}()
	}
	hold.open()
	for range 2 {
		if err := testwait.Recv(t, errs, 5*time.Second, "both Awaits to return"); err != nil {
			t.Errorf("concurrent Await: %v", err)
		}
	}
}

// seenContext is the header "k" and the deadline a request saw.
type seenContext struct {
	header   string
	deadline time.Time
}

// checkOneWayContexts sends one-way requests tagged tag to ref's grain,
// once it is active, alternately with and without headers and a deadline
// (tellAlternatingContexts); the grain notes what each saw in got, under
// mu. The even ones must see their number as the header "k" and a
// deadline near the one sent (how says how near), the odd ones no header
// and not that deadline.
func checkOneWayContexts(t *testing.T, ref probe.ProbeRef, tag string, mu *sync.Mutex, got map[int64]seenContext, how string, near func(d, deadline time.Time) bool) {
	t.Helper()
	if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	const n = 400
	deadline := tellAlternatingContexts(t, ref, n, tag)
	testwait.For(t, defaultTestTimeout, "every request ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range int64(n) {
		s := got[i]
		if i%2 == 0 && (s.header != fmt.Sprint(i) || !near(s.deadline, deadline)) {
			t.Fatalf("request %d saw header %q and deadline %v, want %q and %s %v", i, s.header, s.deadline, fmt.Sprint(i), how, deadline)
		}
		if i%2 == 1 && (s.header != "" || near(s.deadline, deadline)) {
			t.Fatalf("request %d, sent without headers or a deadline, saw header %q and deadline %v", i, s.header, s.deadline)
		}
	}
}

// tellAlternatingContexts sends n one-way requests tagged tag to ref,
// numbered by N from 0: the even ones with the header "k" set to their
// number and a deadline 7 s away, which it returns, well before the 30 s
// response timeout; the odd ones with neither.
func tellAlternatingContexts(t *testing.T, ref probe.ProbeRef, n int64, tag string) time.Time {
	t.Helper()
	deadline := time.Now().Add(7 * time.Second)
	withAll, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for i := range n {
		ctx := context.Background()
		if i%2 == 0 {
			ctx = grain.WithHeader(withAll, "k", fmt.Sprint(i))
		}
		if _, err := ref.Tell(ctx, &probe.Request{Tag: tag, N: i}); err != nil {
			t.Fatal(err)
		}
	}
	return deadline
}

// TestPostedOneWayRequestsCarryTheirSendersContext: one-way requests from
// outside the silo to an active grain carry their own sender's headers
// and deadline, and a request whose context has neither carries none of
// those of the request before it.
func TestPostedOneWayRequestsCarryTheirSendersContext(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	var mu sync.Mutex
	got := map[int64]seenContext{}
	h.script("note", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		d, _ := ctx.Deadline()
		mu.Lock()
		got[req.N] = seenContext{grain.Header(ctx, "k"), d}
		mu.Unlock()
		return nil, nil
	})
	checkOneWayContexts(t, h.probe("p"), "note", &mu, got, "exactly", func(d, deadline time.Time) bool { return d.Equal(deadline) })
}
