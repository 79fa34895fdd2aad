package local

import (
	"context"
	"sync/atomic"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxReroutes bounds how often a request chases activations that ended
// under it before it fails: each was a whole activation, made and ended
// between the request's lookup and its offer.
const maxReroutes = 8

// Invoke calls a grain from code that is not a grain (a grain passing its
// own Context is recognised and calls as itself). It implements
// grain.Caller.
func (s *Runtime) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	return s.invoke(turnOf(ctx), ctx, id, m, req, opts)
}

// InvokeAsync is Invoke without the wait.
func (s *Runtime) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	return s.invokeAsync(turnOf(ctx), ctx, id, m, req, opts)
}

// Invoke calls as the grain's running method: the one whose Context ctx
// is or derives from, else the one whose Context made this Caller, if it
// has not returned.
func (tc turnCaller) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	t, err := tc.turn(ctx)
	if err != nil {
		return nil, err
	}
	return tc.s.invoke(t, ctx, id, m, req, opts)
}

// InvokeAsync is Invoke without the wait.
func (tc turnCaller) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	t, err := tc.turn(ctx)
	if err != nil {
		return grain.Failed(err)
	}
	return tc.s.invokeAsync(t, ctx, id, m, req, opts)
}

// turnOf returns the turn whose Context ctx is or derives from, or nil.
func turnOf(ctx context.Context) *turnCtx {
	if t, ok := ctx.(*turnCtx); ok {
		return t
	}
	t, _ := ctx.Value(grainCtxKey).(*turnCtx)
	return t
}

func (s *Runtime) invoke(from *turnCtx, ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts []grain.CallOption) (proto.Message, error) {
	if len(s.Cfg.OutgoingFilters) > 0 {
		return s.filtered(from, ctx, id, m, req, opts).Await(ctx)
	}
	o := grainrt.ResolveCallOptions(m.Timeout, m.OneWay, opts)
	if o.OneWay && from == nil && s.postOneWay(ctx, id, m, req, o) {
		return nil, nil
	}
	c, err := s.prepare(from, ctx, id, m, req, o)
	if err != nil {
		return nil, err
	}
	c.inline = c.inPool && !o.OneWay // a synchronous call may run its callee inline
	e := s.send(c)
	if o.OneWay {
		return nil, nil
	}
	return c.wait(ctx, e)
}

func (s *Runtime) invokeAsync(from *turnCtx, ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts []grain.CallOption) grain.Pending {
	if len(s.Cfg.OutgoingFilters) > 0 {
		return s.filtered(from, ctx, id, m, req, opts)
	}
	return s.sendAsync(from, ctx, id, m, req, opts)
}

func (s *Runtime) sendAsync(from *turnCtx, ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts []grain.CallOption) grain.Pending {
	o := grainrt.ResolveCallOptions(m.Timeout, m.OneWay, opts)
	c, err := s.prepare(from, ctx, id, m, req, o)
	if err != nil {
		return grain.Failed(err)
	}
	s.send(c)
	if o.OneWay {
		return grain.Failed(nil)
	}
	c.armTimeout()
	return newFuture(c, from)
}

// filtered runs the outgoing filters around an asynchronous send.
func (s *Runtime) filtered(from *turnCtx, ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts []grain.CallOption) grain.Pending {
	return grainrt.SendThrough(s.Cfg.OutgoingFilters, ctx, id, m, req, func(ctx context.Context, req proto.Message) grain.Pending {
		return s.sendAsync(from, ctx, id, m, req, opts)
	})
}

// prepare makes the call record: deadline, call chain, cancellation.
func (s *Runtime) prepare(from *turnCtx, ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, o grainrt.CallOptions) (*Call, error) {
	if m == nil {
		return nil, status.Errorf(codes.InvalidArgument, "granary: call to %s without a method", id)
	}
	// A call from a grain waits as a turn, unless the grain is inside
	// Context.Blocking, where it holds no processor and waits like an
	// outside goroutine (keeping its call chain).
	inTurn := from != nil && from.C.exec != nil
	if from != nil && !inTurn && !from.C.blocking {
		return nil, errOffTurn
	}
	if from == nil && s.Stopping.Load() {
		return nil, Unavailable(s, "it is stopping")
	}
	if !s.Started.Load() || from == nil && !s.ready.Load() {
		return nil, status.Errorf(codes.Unavailable, "granary: silo %s is not started", s.Cfg.Name)
	}
	if from != nil && from.C.Depth >= s.Cfg.MaxCallChain {
		return nil, status.Errorf(codes.ResourceExhausted, "granary: call chain deeper than %d grains (MaxCallChain) calling %s", s.Cfg.MaxCallChain, id)
	}
	refs := int32(2)
	if o.OneWay {
		refs = 1
	}
	c := s.NewCall(refs)
	c.ID, c.Method, c.Req, c.OneWay = id, m, req, o.OneWay
	if !o.OneWay {
		c.Waiter = OutsideWaiter
		if inTurn {
			c.Waiter = turnWaiter
		}
	}
	now := s.CallNow()
	c.Due = now + s.CallTimeout(o.Timeout)
	if o.Outside && from == nil {
		c.Arrived = max(now, 1)
	}
	if d, ok := ctx.Deadline(); ok {
		if due := d.Sub(s.Epoch); due < c.Due {
			c.Due, c.exact = due, d
		}
	}
	switch {
	case from == nil:
		if ctx.Done() != nil {
			c.Cancel = ctx
		}
		c.Headers = ctx.Value(headerCtxKey)
	default:
		p := from.C
		c.Chain = p.chainLink(o.ChainReentry)
		c.Depth = p.Depth + 1
		if inTurn {
			c.inPool, c.caller = true, p
		}
		if ctx == context.Context(from) {
			c.Cancel, c.Headers = p.Cancel, p.Headers
		} else {
			// A context derived by WithValue or WithHeader ends when the
			// turn does: watch the turn's cancellation then. Watching the
			// derived context would start a goroutine (the context package
			// cannot hook a value context over a turn) that reads the
			// turn's context after the turn has ended.
			switch d := ctx.Done(); {
			case d == nil:
			case d == from.Done():
				c.Cancel = p.Cancel
			default:
				c.Cancel = ctx
			}
			c.Headers = ctx.Value(headerCtxKey)
		}
	}
	return c, nil
}

// send routes a prepared call and starts its turn, inline when the caller
// is a turn and the callee is idle. It returns the caller's Exec, or nil.
func (s *Runtime) send(c *Call) *activation.Exec {
	var e *activation.Exec
	if c.caller != nil {
		e = c.caller.exec
	}
	s.Route(e, c)
	return e
}

// Route delivers c to its activation and queues its turn if admitted.
// Failures settle it. e is the running turn's worker, or nil. It
// classifies c (kindOf, and the type's MayInterleave predicate, which
// runs here, on the caller's or the stream reader's goroutine) once it
// knows the activation is local: a call that goes on to another silo is
// classified there, so this silo neither decodes it nor asks the
// predicate for nothing.
func (s *Runtime) Route(e *activation.Exec, c *Call) {
	c.kind = kindOf(c.Method)
	t := s.ByMethod[c.Method] // a registered method: checked by RegisterGrain
	if t == nil || t.Desc.Type != c.ID.Type {
		if c.Method.Observe != nil {
			s.RouteObserver(c) // an observer, even of a type's name a silo hosts
			return
		}
		t = s.Types[c.ID.Type]
		if t == nil {
			if s.Cl != nil {
				s.Cl.Resolve(c, nil) // hosted elsewhere, if anywhere
				return
			}
			s.Fail(e, c, UnknownType(c.ID))
			return
		}
		if m := c.Method; !isRuntimeMethod(m) && (m.Index < 0 || m.Index >= len(t.Desc.Methods) || t.Desc.Methods[m.Index].Name != m.Name) {
			s.Fail(e, c, status.Errorf(codes.NotFound, "granary: grain type %s has no method %q", c.ID.Type, m.Name))
			return
		}
	}
	if c.Arrived != 0 && s.Cfg.Limiter != nil && !c.limited && s.runsHere(t, c) && !s.limitAdmitted(e, c) {
		return
	}
	// A stateless worker's activations are local: classify at once.
	classified := t.Opts.StatelessWorker
	if classified {
		s.maybeInterleave(t, c)
	}
	for tries := 0; tries < maxReroutes; {
		a, remote, queued, err := s.activationFor(c.ID, t, c)
		switch {
		case err != nil:
			s.Fail(e, c, err)
			return
		case queued:
			return // in the activation it made, before it was published
		case remote:
			c.leaveLimit() // its latency is the other silo's
			s.Cl.Resolve(c, t)
			return
		case a == nil:
			s.Fail(e, c, Unavailable(s, "it is stopping and activates no new grains"))
			return
		}
		if !classified {
			s.maybeInterleave(t, c)
			classified = true
		}
		start, retry := a.submit(e, c)
		if retry {
			// It ended, and whoever ended it is about to take it out of
			// the catalog. Taking it out here, as that would, lets the
			// request make the next activation now rather than wait for
			// a goroutine the Go scheduler may not run for a while.
			s.removeActivation(a)
			tries++
			continue
		}
		if start {
			s.startTurn(e, a, c)
		}
		return
	}
	s.Fail(e, c, status.Errorf(codes.Unavailable, "granary: %s kept deactivating under a call (%d tries)", c.ID, maxReroutes))
}

// startTurn queues an admitted request's turn, or runs it inline when the
// caller is a turn and the callee's group is idle.
func (s *Runtime) startTurn(e *activation.Exec, a *Activation, c *Call) {
	if e != nil && c.inline {
		if e.TryRun(a.group, activation.Turn{Name: c.Method.Name, Task: c}) {
			return
		}
	}
	a.enqueue(e, c)
}

// Fail settles a call with err on the callee's behalf and drops the
// callee's ownership: for a call that reached no activation, or that its
// activation refused or dropped. e is the worker running the settling
// turn, or nil.
func (s *Runtime) Fail(e *activation.Exec, c *Call, err error) {
	c.leaveLimit()
	c.Settle(e, nil, err)
	c.Release()
}

// wait waits for the reply of a call sent synchronously.
func (c *Call) wait(ctx context.Context, e *activation.Exec) (proto.Message, error) {
	if !c.isSettled() {
		c.armTimeout()
		var resp proto.Message
		var err error
		if c.inPool {
			resp, err = c.awaitInTurn(e)
		} else {
			resp, err, _ = c.awaitOutside(ctx, true)
		}
		c.disarmTimeout()
		c.Release()
		return resp, err
	}
	if c.inPool {
		e.Wait(&c.ev) // returns at once; consumes the signal
	} else {
		<-c.Donec
	}
	resp, err := c.Resp, c.Err
	c.Release()
	return resp, err
}

// future is the Pending of an asynchronous call.
type future struct {
	c    *Call
	from *turnCtx // the turn that made the call, or nil
	// lock, made only for a future made outside a turn, has capacity 1:
	// it is held by the Await waiting on the call, so that goroutines
	// take turns. A future made by a turn is awaited by that turn alone:
	// awaiting is its lock-free guard against an Await from elsewhere.
	lock     chan struct{}
	awaiting atomic.Bool
	done     atomic.Bool
	resp     proto.Message
	err      error
}

func newFuture(c *Call, from *turnCtx) *future {
	f := &future{c: c, from: from}
	if c.Waiter != turnWaiter {
		f.lock = make(chan struct{}, 1)
	}
	return f
}

// errAwaitedTwice is what an Await of a grain's future gets while another
// Await of it waits: only the turn that made it may await it.
var errAwaitedTwice = status.Error(codes.FailedPrecondition, "granary: a future made by a grain is being awaited already: await it from the method that made it, one Await at a time")

// Await waits for the reply. Any number of goroutines may await a future
// made outside a turn: they take turns waiting, and once the reply is in,
// every Await returns it at once. An Await whose context ends returns the
// context's error and leaves the call running (its own context and
// deadline still bound it). A future made by a turn is awaited by that
// turn, during the method that made it, since its reply wakes the turn.
func (f *future) Await(ctx context.Context) (proto.Message, error) {
	if f.done.Load() {
		return f.resp, f.err
	}
	if f.lock == nil {
		if !f.awaiting.CompareAndSwap(false, true) {
			return nil, errAwaitedTwice
		}
		defer f.awaiting.Store(false)
	} else {
		select {
		case f.lock <- struct{}{}:
		case <-ctx.Done():
			return nil, contextError(ctx)
		}
		defer func() { <-f.lock }()
	}
	if f.done.Load() {
		return f.resp, f.err
	}
	c := f.c
	var resp proto.Message
	var err error
	ok := true
	switch t := turnOf(ctx); {
	case c.Waiter == turnWaiter && (f.from == nil || f.from.C.exec == nil):
		return nil, status.Error(codes.FailedPrecondition, "granary: a future made by a grain must be awaited during the method that made it")
	case c.Waiter == turnWaiter:
		resp, err = c.awaitInTurn(f.from.C.exec)
	case t != nil && t.C.exec != nil:
		t.C.exec.Blocking(func() { resp, err, ok = c.awaitOutside(ctx, false) })
	default:
		resp, err, ok = c.awaitOutside(ctx, false)
	}
	if !ok {
		return nil, contextError(ctx)
	}
	c.disarmTimeout()
	c.Release()
	f.c, f.resp, f.err = nil, resp, err
	f.done.Store(true)
	return resp, err
}
