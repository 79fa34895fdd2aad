package silo

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
)

// TestRegressQueuedTickLeavesWakeToken: a non-interleaving timer tick that
// is queued behind a running request when the activation deactivates is
// taken by deactivated() with the requests and routed as if it were a
// request. route fails it (no method, zero ID) and settle sends a wake-up
// token into its donec, since a tick is neither one-way nor inPool; then the
// record goes back to callPool with the token in its channel. The next
// outside caller that gets this record returns from awaitOutside at once
// with a stale (nil, nil) outcome while its callee still runs.
func TestRegressQueuedTickLeavesWakeToken(t *testing.T) {
	h := newHarness(t, harnessOpt{fake: true})
	hold := h.gate()
	h.script("setup", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		_, err := ctx.RegisterTimer("t", func(ctx grain.Context) error {
			h.event("tick")
			return nil
		}, time.Minute, 0)
		return &probe.Reply{}, err
	})
	h.script("hold", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("hold start")
		hold.wait(ctx, g)
		return &probe.Reply{}, nil
	})
	h.script("bye", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		ctx.DeactivateOnIdle()
		return &probe.Reply{}, nil
	})
	ref := h.probe("tq")
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "setup"}); err != nil {
		t.Fatal(err)
	}
	f := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	h.waitEvent("hold start")
	a := actOf(h, probe.ProbeGrainType, "tq")
	h.clock.Advance(time.Minute) // the tick queues behind "hold"
	var tick *call
	var donec chan struct{}
	waitFor(t, "tick queued", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.queuedLocked() == 1 && a.queue[a.qhead].tick != nil {
			tick, donec = a.queue[a.qhead], a.queue[a.qhead].donec
			return true
		}
		return false
	})
	// An always-interleave request asks for deactivation while "hold" runs.
	if _, err := ref.Interleave(testCtx(t), &probe.Request{Tag: "bye"}); err != nil {
		t.Fatal(err)
	}
	hold.open()
	if err := f.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("deactivate probe.Probe/tq requested")
	waitFor(t, "tick record released", func() bool { return tick.refs.Load() == 0 })
	if n := len(donec); n != 0 {
		t.Fatalf("the queued tick's record went back to callPool with %d wake-up token(s) in donec: "+
			"deactivated() routed the tick as a request and fail() settled it", n)
	}
}

// TestRegressCancelAfterFuncUsesReleasedRecord: awaitInTurn registers
// context.AfterFunc(c.cancel, settle) and defers stop(). When the caller's
// context is cancelled while the reply is on its way, AfterFunc has
// already started its goroutine, stop() returns false without waiting,
// and the caller releases the record; the goroutine then reads c.cancel
// and CASes c.state on a record that is back in the pool (or reused by
// another call, which it then settles with Canceled). Run with -race.
//
// Runs in a subprocess: when the goroutine runs after the reset,
// contextError(nil) dereferences nil and kills the process.
func TestRegressCancelAfterFuncUsesReleasedRecord(t *testing.T) {
	if os.Getenv("GRANARY_TEST_CHILD") != "1" {
		runInChild(t, "TestRegressCancelAfterFuncUsesReleasedRecord", 60*time.Second)
		return
	}
	h := newHarness(t, harnessOpt{})
	var mu sync.Mutex
	var cancelB context.CancelFunc
	h.script("caller", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		// A cancellable context that does not derive from the grain's (to
		// keep the derived-context race out of this test).
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
		waitFor(t, "A's call queued on B", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.queuedLocked() == 1
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

// TestRegressDerivedContextRace: a grain that derives a cancellable context
// from its grain.Context (context.WithCancel(ctx), the usual idiom) makes
// the context package start a goroutine that calls ctx.Done() and
// ctx.Err(), because *turnCtx is neither a *cancelCtx (Value hides it) nor
// an afterFuncer. That goroutine reads the pooled turnCtx (once, derived)
// after the method returned, concurrently with release()'s
// `*t = turnCtx{}` / `*c = call{}`, and if it runs late it calls lazy() on
// a record reused by another call. Run with -race.
//
// Runs in a subprocess: when that goroutine runs after the reset, lazy()
// calls c.deadline() with c.s == nil and kills the process.
func TestRegressDerivedContextRace(t *testing.T) {
	if os.Getenv("GRANARY_TEST_CHILD") != "1" {
		runInChild(t, "TestRegressDerivedContextRace", 60*time.Second)
		return
	}
	h := newHarness(t, harnessOpt{})
	h.script("derive", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_ = cctx
		return &probe.Reply{}, nil
	})
	for range 50 {
		if _, err := h.probe("dc").Call(testCtx(t), &probe.Request{Tag: "derive"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRegressConcurrentAwait: grain.Pending says Await "may be called more
// than once and from any goroutine". Two goroutines awaiting the same
// outside future race on future.done/resp/err, and only one of them gets
// the single wake-up token in donec: the other waits until its context
// ends, then giveUp() settles (state pending -> settled) a record that the
// first awaiter and the callee have already returned to callPool, and
// blocks on, or steals, a token of whatever call reuses it.
// Runs in a subprocess: without -race the second awaiter usually dies of
// a nil dereference in disarmTimeout on the recycled record.
func TestRegressConcurrentAwait(t *testing.T) {
	if os.Getenv("GRANARY_TEST_CHILD") != "1" {
		runInChild(t, "TestRegressConcurrentAwait", 30*time.Second)
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
	timeout := time.After(5 * time.Second)
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("concurrent Await: %v", err)
			}
		case <-timeout:
			t.Fatal("a concurrent Await never returned")
		}
	}
}
