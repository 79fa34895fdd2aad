package silo

import (
	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Run is the turn of a request, a timer tick or a lifecycle hook. The pool
// runs it holding the activation's group token.
func (c *call) Run(e *activation.Exec) {
	c.exec = e
	defer func() { c.exec = nil }()
	switch {
	case c.hook == hookActivate:
		a := c.act
		a.impl = a.typ.factory(a.id)
		if c.resErr = a.readStates(&c.ctx); c.resErr != nil {
			return
		}
		if h, ok := a.impl.(grain.Activator); ok {
			c.resErr = h.OnActivate(&c.ctx)
		}
	case c.hook == hookDeactivate:
		if h, ok := c.act.impl.(grain.Deactivator); ok {
			if err := h.OnDeactivate(&c.ctx, c.reason); err != nil {
				c.act.logger().Warn("OnDeactivate failed", zap.Stringer("reason", c.reason), zap.Error(err))
			}
		}
	case c.tick != nil:
		c.tick.run(c)
	case c.expired():
		c.resErr = deadlineError(c)
	case c.req == nil && c.raw != nil:
		req := c.method.NewRequest()
		if err := proto.Unmarshal(c.raw, req); err != nil {
			c.resErr = status.Errorf(codes.InvalidArgument, "granary: %s.%s: the request does not decode as %s: %v",
				c.id, c.method.Name, req.ProtoReflect().Descriptor().FullName(), err)
			return
		}
		c.req, c.raw = req, nil
		fallthrough
	default:
		c.result, c.resErr = c.s.dispatch(&c.ctx, c)
	}
}

// Done ends the turn: it settles the caller, releases the gate and starts
// what may start now.
func (c *call) Done(e *activation.Exec, err error) {
	a := c.act
	pe, panicked := err.(*activation.PanicError)
	if panicked {
		a.logger().Error("grain code panicked; deactivating",
			zap.String("turn", pe.Turn), zap.Any("panic", pe.Value), zap.ByteString("stack", pe.Stack))
	}
	switch {
	case c.hook == hookActivate:
		switch {
		case panicked:
			c.resErr = status.Errorf(codes.Internal, "granary: OnActivate of %s panicked: %v", a.id, pe.Value)
		case err != nil:
			c.resErr = unavailable(c.s, "its silo is shutting down")
		}
		a.activated(e, c.resErr)
		c.release()
		return
	case c.hook == hookDeactivate:
		a.deactivated(e)
		c.release()
		return
	case c.tick != nil:
		c.tick.done(e, c, panicked)
		return
	}
	resp, rerr := c.result, c.resErr
	switch {
	case panicked:
		resp, rerr = nil, errorFromPanic(c, pe)
		a.requestDeactivation(grain.DeactivatePanic)
	case err != nil:
		resp, rerr = nil, unavailable(c.s, "its silo is shutting down")
	}
	c.result, c.resErr = nil, nil
	a.finish(e, c)
	c.settle(e, resp, rerr)
	c.release()
}

// dispatch runs the method through the incoming filters.
func (s *Silo) dispatch(ctx *turnCtx, c *call) (proto.Message, error) {
	impl := c.act.impl
	if len(s.cfg.IncomingFilters) == 0 {
		return c.method.Handler(impl, ctx, c.req)
	}
	var next func(i int) grain.Invocation
	next = func(i int) grain.Invocation {
		if i == len(s.cfg.IncomingFilters) {
			return func(ctx grain.Context, req proto.Message) (proto.Message, error) {
				return c.method.Handler(impl, ctx, req)
			}
		}
		return func(ctx grain.Context, req proto.Message) (proto.Message, error) {
			return s.cfg.IncomingFilters[i](ctx, c.method, req, next(i+1))
		}
	}
	return next(0)(ctx, c.req)
}

// turnName names the turn in the scheduler's warnings and stats.
func (c *call) turnName() string {
	switch {
	case c.tick != nil:
		return c.tick.name
	case c.method != nil:
		return c.method.Name
	}
	return "hook"
}
