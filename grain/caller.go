package grain

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/internal/grainrt"
)

// A Caller sends calls to grains. A silo, a grain's Context (through
// Context.Caller) and the external client each provide one, so generated
// references work the same from grain code, from a program hosting a silo,
// and from outside the cluster.
type Caller interface {
	// Invoke calls method m of grain id with req and waits for the reply.
	// The message req belongs to the callee from then on: the caller must
	// not change it. For a one-way call Invoke returns (nil, nil) once the
	// call is queued.
	Invoke(ctx context.Context, id ID, m *MethodDesc, req proto.Message, opts ...CallOption) (proto.Message, error)
	// InvokeAsync is Invoke without the wait: the reply arrives through
	// the Pending it returns.
	InvokeAsync(ctx context.Context, id ID, m *MethodDesc, req proto.Message, opts ...CallOption) Pending
}

// A Pending is a call in flight. Await waits for its reply; a grain that
// awaits lets its processor go, and (if it allows interleaving) other
// requests run meanwhile. Await may be called more than once, and, for a
// call made outside any grain, from several goroutines at once; every
// Await gets the same outcome. An Await whose context ends stops waiting
// but leaves the call running: only the context the call was made with
// cancels it. A call made by a grain must be awaited during the method
// that made it, by one goroutine at a time: an Await while another waits
// is refused with FailedPrecondition.
type Pending interface {
	Await(ctx context.Context) (proto.Message, error)
}

// Future is the typed result of an ...Async method of a generated reference.
type Future[T proto.Message] struct{ p Pending }

// NewFuture wraps a Pending whose reply is a T. Generated code only.
func NewFuture[T proto.Message](p Pending) Future[T] { return Future[T]{p: p} }

// Await waits for the reply. A one-way call's reply is the zero T.
func (f Future[T]) Await(ctx context.Context) (T, error) {
	var zero T
	if f.p == nil {
		return zero, errNoCall
	}
	m, err := f.p.Await(ctx)
	if err != nil || m == nil {
		return zero, err
	}
	return m.(T), nil
}

// Wait waits for the call to finish and returns its error.
func (f Future[T]) Wait(ctx context.Context) error {
	_, err := f.Await(ctx)
	return err
}

// A Waiter is anything AwaitAll can wait for: every Future is one.
type Waiter interface {
	Wait(ctx context.Context) error
}

// AwaitAll waits for every call and returns the first error among them (in
// argument order), or nil. It always waits for all of them, so no reply
// arrives after it returned.
func AwaitAll(ctx context.Context, calls ...Waiter) error {
	var first error
	for _, c := range calls {
		if err := c.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// AwaitFutures is AwaitAll for a slice of futures of one reply type: it
// waits for every call and returns the first error among them (in slice
// order), or nil. A fan-out collects its futures in a []Future[T], which
// boxes none of them, and reads each reply after with Await, which then
// returns at once.
func AwaitFutures[T proto.Message](ctx context.Context, futures []Future[T]) error {
	var first error
	for _, f := range futures {
		if err := f.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Failed returns a Pending that has already failed with err: an
// OutgoingFilter returns one to refuse a call, and a Caller when it could
// not send the call at all.
func Failed(err error) Pending { return failed{err} }

type failed struct{ err error }

func (f failed) Await(context.Context) (proto.Message, error) { return nil, f.err }

// CallOption changes one call. Pass them to a reference's methods.
type CallOption = grainrt.CallOption

// WithTimeout bounds the call: the caller gets DeadlineExceeded after d,
// and the callee's context carries the deadline. The earlier of this and
// the caller's context deadline wins.
func WithTimeout(d time.Duration) CallOption { return grainrt.WithTimeout(d) }

// OneWay sends the call without waiting for, or getting, a reply.
func OneWay() CallOption { return grainrt.OneWay() }

// AllowCallChainReentrancy scopes call-chain reentrancy to this call, as
// Orleans' RequestContext.AllowCallChainReentrancy does: while it runs, a
// call that comes back to the calling grain's activation along the call's
// chain (A→B→A, on any silo, however deep) is admitted, interleaved at
// the calling request's await, instead of failing as a deadlock, even if
// the type does not have WithCallChainReentrancy. It concerns the calling
// activation only: the grains the call reaches keep their own rules, and
// calls they make set their own scopes. It covers everything the call
// causes, the calls of the requests it lets back in included, unless one
// of those sets its own scope. It does nothing for a call made outside
// any grain, which has no chain.
func AllowCallChainReentrancy() CallOption { return grainrt.AllowCallChainReentrancy() }

// SuppressCallChainReentrancy is the opposite scope: a call that comes
// back to the calling grain's activation along this call's chain is
// refused as a deadlock (Aborted) when it cannot start at once, even if
// the type has WithCallChainReentrancy. It does not make a reentrant type
// (WithReentrant) wait, nor an always_interleave method or one
// WithMayInterleave admits. The last of the two options given wins.
func SuppressCallChainReentrancy() CallOption {
	return grainrt.SuppressCallChainReentrancy()
}
