package granarytest

import (
	"context"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/silo"
	"google.golang.org/protobuf/proto"
)

// Caller returns a grain.Caller that calls grains through the first silo
// that runs at the time of each call (the lowest-indexed one), so that
// refs made from it outlive the silos the test stops:
//
//	hellopb.NewGreeterRef(c.Caller(), "en")
//
// During a partition it calls through that silo too, so it reaches one
// side only: the side of the lowest-indexed running silo. Call through
// Silo(i) to reach the other.
//
// On the fake clock, a deadline of the call's context is taken as a
// timeout on the cluster's clock (see the package doc): the call gets
// grain.WithTimeout of the time left until the deadline, in real time,
// when it starts (or the call's own timeout, if shorter), and runs with a
// context that has no deadline but is cancelled when the caller's ends.
func (c *Cluster) Caller() grain.Caller { return clusterCaller{c} }

type clusterCaller struct{ c *Cluster }

func (cc clusterCaller) via() *silo.Silo {
	if ms := cc.c.running(); len(ms) > 0 {
		return ms[0].s
	}
	return cc.c.all()[0].s // stopped: its calls fail, saying so
}

// Invoke implements grain.Caller. Any goroutine but grain code's.
func (cc clusterCaller) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	ctx, opts, release := cc.onClusterClock(ctx, m, opts)
	if release != nil {
		defer release()
	}
	return cc.via().Invoke(ctx, id, m, req, opts...)
}

// InvokeAsync implements grain.Caller. On the fake clock, with a context
// that has a deadline, the link from the caller's context to the call's
// is released when Await returns the call's outcome, or else when the
// caller's context ends: the call may run on after an Await whose own
// context ended, and must stay cancellable until then. Any goroutine but
// grain code's.
func (cc clusterCaller) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	ctx, opts, release := cc.onClusterClock(ctx, m, opts)
	p := cc.via().InvokeAsync(ctx, id, m, req, opts...)
	if release == nil {
		return p
	}
	return &releasingPending{p: p, release: release}
}

// onClusterClock turns the real-time deadline of ctx, on the fake clock,
// into a timeout on the cluster's clock: it returns a context without the
// deadline that is cancelled (with ctx's cause) when ctx ends, the
// options with the timeout, and the function that releases the link
// between the two contexts, which the caller must call once the call is
// over. On the real clock, or for a context without a deadline, or one
// past it, it returns ctx and opts as they are and no release.
func (cc clusterCaller) onClusterClock(ctx context.Context, m *grain.MethodDesc, opts []grain.CallOption) (context.Context, []grain.CallOption, func()) {
	deadline, ok := ctx.Deadline()
	if cc.c.clock == nil || !ok {
		return ctx, opts, nil
	}
	left := time.Until(deadline)
	if left <= 0 || ctx.Err() != nil {
		return ctx, opts, nil // the silo fails it as late
	}
	if t := grainrt.ResolveCallOptions(m.Timeout, m.OneWay, opts).Timeout; t > 0 && t < left {
		left = t
	}
	opts = append(opts[:len(opts):len(opts)], grain.WithTimeout(left))
	callCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return callCtx, opts, func() {
		stop()
		cancel(nil)
	}
}

// releasingPending is a call's grain.Pending that releases the call's
// link to its caller's context once Await returns the call's outcome.
type releasingPending struct {
	p       grain.Pending
	release func() // idempotent
}

// Await implements grain.Pending. Any goroutine.
func (r *releasingPending) Await(ctx context.Context) (proto.Message, error) {
	resp, err := r.p.Await(ctx)
	if ctx.Err() == nil {
		// Await returned the call's outcome, not its own context's end.
		r.release()
	}
	return resp, err
}
