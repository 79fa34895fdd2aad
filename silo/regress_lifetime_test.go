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
