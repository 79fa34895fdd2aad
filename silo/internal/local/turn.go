package local

import (
	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Run is the turn of a request, a timer tick or a lifecycle hook. The pool
// runs it holding the activation's group token. Once the runtime is
// aborted (Close) a hook runs no grain code: the activate turn fails with
// Unavailable and the deactivate turn just ends, as if the pool had
// dropped them, which it would a moment later.
func (c *Call) Run(e *activation.Exec) {
	c.exec = e
	defer func() { c.exec = nil }()
	switch {
	case c.hook != hookNone && c.s.aborted.Load():
		if c.hook == hookActivate {
			c.resErr = Unavailable(c.s, "its silo is shutting down")
		}
	case c.hook == hookActivate:
		a := c.act
		a.impl = a.typ.Factory(a.ID)
		if c.resErr = a.readStates(&c.Ctx); c.resErr != nil {
			return
		}
		if h, ok := a.impl.(grain.Activator); ok {
			c.resErr = h.OnActivate(&c.Ctx)
		}
	case c.hook == hookDeactivate:
		if h, ok := c.act.impl.(grain.Deactivator); ok {
			if err := h.OnDeactivate(&c.Ctx, c.reason); err != nil {
				c.act.logger().Warn("OnDeactivate failed", zap.Stringer("reason", c.reason), zap.Error(err))
			}
		}
	case c.tick != nil:
		c.tick.run(c)
	case c.expired():
		c.resErr = DeadlineError(c)
	case c.Arrived != 0 && c.waitRefused():
	case c.Req == nil && c.Raw != nil && !c.decode():
		// refused: its error is set
	default:
		c.result, c.resErr = c.s.dispatch(&c.Ctx, c)
		if c.posted {
			c.runPosted(e)
		}
	}
}

// decode makes c's request from Raw, the encoded request of a call from
// another process. It reports false, with c's error set, when the
// request does not decode.
func (c *Call) decode() bool {
	req := c.Method.NewRequest()
	if err := proto.Unmarshal(c.Raw, req); err != nil {
		c.resErr = status.Errorf(codes.InvalidArgument, "granary: %s.%s: the request does not decode as %s: %v",
			c.ID, c.Method.Name, req.ProtoReflect().Descriptor().FullName(), err)
		return false
	}
	c.Req, c.Raw = req, nil
	return true
}

// Done ends the turn: it settles the caller, releases the gate and starts
// what may start now.
func (c *Call) Done(e *activation.Exec, err error) {
	a := c.act
	pe, panicked := err.(*activation.PanicError)
	if panicked {
		a.logger().Error("grain code panicked; deactivating",
			zap.String("turn", pe.Turn), zap.Any("panic", pe.Value), zap.ByteString("stack", pe.Stack))
		c.quiet = true
	}
	switch {
	case c.hook == hookActivate:
		switch {
		case panicked:
			c.resErr = status.Errorf(codes.Internal, "granary: OnActivate of %s panicked: %v", a.ID, pe.Value)
		case err != nil:
			c.resErr = Unavailable(c.s, "its silo is shutting down")
		}
		a.activated(e, c.resErr)
		c.Release()
		return
	case c.hook == hookDeactivate:
		a.deactivated(e)
		c.Release()
		return
	case c.tick != nil:
		c.tick.done(e, c, panicked)
		return
	}
	if c.Arrived != 0 && c.s.Cfg.MeasureLatency {
		c.noteLatency()
	}
	c.leaveLimit() // before the reply: its caller may call again at once
	resp, rerr := c.result, c.resErr
	switch {
	case panicked: // the lifecycle deactivates the activation: see finish
		resp, rerr = nil, errorFromPanic(c, pe)
	case err != nil:
		resp, rerr = nil, Unavailable(c.s, "its silo is shutting down")
	}
	c.result, c.resErr = nil, nil
	a.finish(e, c, panicked)
	c.Settle(e, resp, rerr)
	c.Release()
}

// dispatch runs the method through the incoming filters.
func (s *Runtime) dispatch(ctx *turnCtx, c *Call) (proto.Message, error) {
	if s.filterChain == nil {
		return c.Method.Handler(c.act.impl, ctx, c.Req)
	}
	return s.filterChain(ctx, c.Req)
}

// ChainIncoming builds the incoming filters' chain once, so a call
// through it allocates nothing: each link finds the call it runs for from
// the Context it is handed, the turn's own or a filter's wrapper of it.
func ChainIncoming(filters []grain.IncomingFilter) grain.Invocation {
	if len(filters) == 0 {
		return nil
	}
	chain := func(ctx grain.Context, req proto.Message) (proto.Message, error) {
		t := turnOf(ctx)
		if t == nil {
			return nil, errForeignContext
		}
		return t.C.Method.Handler(t.C.act.impl, ctx, req)
	}
	for i := len(filters) - 1; i >= 0; i-- {
		f, next := filters[i], chain
		chain = func(ctx grain.Context, req proto.Message) (proto.Message, error) {
			t := turnOf(ctx)
			if t == nil {
				return nil, errForeignContext
			}
			return f(ctx, t.C.Method, req, next)
		}
	}
	return chain
}

// errForeignContext fails a request whose incoming filter handed on a
// Context that is neither the grain's nor derived from it.
var errForeignContext = status.Error(codes.Internal, "granary: an incoming filter handed on a Context that does not hold the grain's: pass the Context it was given, or one that wraps it")

// turnName names the turn in the scheduler's warnings and stats.
func (c *Call) turnName() string {
	switch {
	case c.tick != nil:
		return c.tick.name
	case c.Method != nil:
		return c.Method.Name
	}
	return "hook"
}
