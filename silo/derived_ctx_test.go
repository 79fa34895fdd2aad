package silo

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/protobuf/proto"
)

// A grain may call with a context derived from its own by WithValue or
// WithHeader, which add no cancellation of their own. Such a context's
// Done is the turn's; the call must watch the turn's cancellation, not
// the derived context: watching that one starts a goroutine (the context
// package finds no way to hook a value context over a turn) that reads
// the turn's context after the turn ended and its record was reused.
func TestCallWithValueDerivedContext(t *testing.T) {
	t.Parallel()
	pass := func(ctx context.Context, target grain.ID, m *grain.MethodDesc, req proto.Message, next grain.Send) grain.Pending {
		return next(ctx, req)
	}
	type key struct{}
	h := newHarness(t, harnessOpt{cfg: func(c *Config) { c.OutgoingFilters = []grain.OutgoingFilter{pass} }})
	h.script("derived", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		for i := range 20 {
			var dctx context.Context = context.WithValue(ctx, key{}, i)
			if i%2 == 1 {
				dctx = grain.WithHeader(ctx, "k", "v")
			}
			if _, err := probe.NewProbeRef(ctx.Caller(), "callee").Call(dctx, &probe.Request{}); err != nil {
				return nil, err
			}
		}
		return &probe.Reply{}, nil
	})
	for range 50 {
		if _, err := h.probe("caller").Call(testCtx(t), &probe.Request{Tag: "derived"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCancelDerivedContextOutlivesTurn: a grain may derive a cancellable
// context from its grain.Context (context.WithCancel(ctx), the usual
// idiom). The goroutine the context package starts to watch it never
// reads the turn's context after the method returned and the runtime
// reset its record for another call. Run with -race. Runs in a
// subprocess: a late read of a reset record can dereference nil and kill
// the process.
func TestCancelDerivedContextOutlivesTurn(t *testing.T) {
	t.Parallel()
	if !inChild() {
		runInChild(t, "TestCancelDerivedContextOutlivesTurn", 60*time.Second)
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

// TestDerivedContextLeftOpenOutlivesTurn: a context derived from a
// grain.Context and still open when the method returns (as a driver may
// keep one) is cancelled when the turn ends, and the context package's
// callback that cancels it, which runs on a goroutine of its own, reads
// the turn's context after the record was released. The runtime keeps
// such a record out of the pool, so that read sees the ended turn's
// context, never a reset or reused record. Run with -race; runs in a
// subprocess, since a read of a reset record can kill the process.
func TestDerivedContextLeftOpenOutlivesTurn(t *testing.T) {
	t.Parallel()
	if !inChild() {
		runInChild(t, "TestDerivedContextLeftOpenOutlivesTurn", 60*time.Second)
		return
	}
	h := newHarness(t, harnessOpt{})
	var mu sync.Mutex
	var open []context.Context
	h.script("derive-open", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		cctx, cancel := context.WithCancel(ctx)
		_ = cancel // left open: the end of the turn cancels it
		mu.Lock()
		open = append(open, cctx)
		mu.Unlock()
		return &probe.Reply{}, nil
	})
	for range 200 {
		if _, err := h.probe("dc-open").Call(testCtx(t), &probe.Request{Tag: "derive-open"}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, c := range open {
		select {
		case <-c.Done():
		case <-time.After(defaultTestTimeout):
			t.Fatalf("derived context %d still open after its turn ended", i)
		}
		if c.Err() == nil {
			t.Fatalf("derived context %d done without an error", i)
		}
	}
}
