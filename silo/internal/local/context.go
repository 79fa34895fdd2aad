package local

import (
	"context"
	"sync"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// turnCtx is the grain.Context of a request, tick or hook: it lives in the
// call record, so passing it costs nothing. Its Done channel is made only
// when grain code asks for it.
type turnCtx struct {
	C *Call

	once    sync.Once
	derived context.Context
	stop    context.CancelFunc
	// caller is what Caller returned, made on its first call in this use
	// of the record: one allocation a turn, however often it is asked.
	caller grain.Caller
}

var (
	grainCtxKey  = grainrt.ContextKey()
	headerCtxKey = grainrt.HeaderKey()
)

// stopDerived releases the context behind Done, if one was made; the
// record's release zeroes the rest.
func (t *turnCtx) stopDerived() {
	if t.stop != nil {
		t.stop()
	}
}

// lazy makes the context behind Done, Err and AfterFunc. With a fake
// clock it carries only cancellation: a real-time timer cannot fire at a
// fake-clock deadline (Deadline still reports it).
func (t *turnCtx) lazy() context.Context {
	t.once.Do(func() {
		parent := t.C.Cancel
		if parent == nil {
			parent = context.Background()
		}
		if t.C.s.realClock {
			t.derived, t.stop = context.WithDeadline(parent, t.C.Deadline())
		} else {
			t.derived, t.stop = context.WithCancel(parent)
		}
	})
	return t.derived
}

// AfterFunc arranges for f to run when the context is done. The context
// package uses it for contexts derived from a grain's, instead of a
// goroutine that would watch this one after its method returned: derived
// contexts end when the method does.
func (t *turnCtx) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(t.lazy(), f)
}

// Deadline is the call's deadline: the earliest of the caller's, the
// method's timeout and the silo's response timeout.
func (t *turnCtx) Deadline() (time.Time, bool) { return t.C.Deadline(), true }

// Done closes when the deadline passes or the caller cancels.
func (t *turnCtx) Done() <-chan struct{} { return t.lazy().Done() }

func (t *turnCtx) Err() error { return t.lazy().Err() }

// Value answers grain.FromContext and grain.Header; a caller's other
// context values do not travel with a call, locally or across silos.
func (t *turnCtx) Value(key any) any {
	switch key {
	case grainCtxKey:
		return t
	case headerCtxKey:
		return t.C.Headers
	}
	return nil
}

func (t *turnCtx) ID() grain.ID { return t.C.act.ID }

func (t *turnCtx) ActivationID() uint64 { return t.C.act.ActID }

func (t *turnCtx) CallChain() []grain.ID {
	ids := make([]grain.ID, t.C.Depth)
	i := len(ids)
	for l := t.C.Chain; l != nil; l = l.Next {
		i--
		ids[i] = l.grainID()
	}
	return ids
}

func (t *turnCtx) Caller() grain.Caller {
	if t.caller == nil {
		t.caller = turnCaller{s: t.C.s, t: t, gen: t.C.gen.Load()}
	}
	return t.caller
}

func (t *turnCtx) Logger() *zap.Logger { return t.C.act.logger() }

func (t *turnCtx) DeactivateOnIdle() { t.C.act.RequestDeactivation(grain.DeactivateRequested) }

// DelayDeactivation keeps the activation from being collected for
// idleness before d from now (lifecycle.Machine.DelayDeactivation).
func (t *turnCtx) DelayDeactivation(d time.Duration) {
	a := t.C.act
	a.Mu.Lock()
	a.life.DelayDeactivation(a.s.Since(), d)
	a.Mu.Unlock()
}

func (t *turnCtx) RegisterTimer(name string, fn grain.TimerFunc, due, period time.Duration, opts ...grain.TimerOption) (grain.Timer, error) {
	return t.C.act.registerTimer(name, fn, due, period, opts)
}

// Sleep waits without holding a processor, for d or until the call's
// deadline or the caller's cancellation, whichever comes first; those end
// it with DeadlineExceeded or Canceled.
func (t *turnCtx) Sleep(d time.Duration) error {
	c := t.C
	e := t.exec()
	if e == nil && !c.blocking {
		return errOffTurn
	}
	short := false
	if left := c.Due - c.s.Since(); left < d {
		d, short = max(left, 0), true
	}
	switch {
	case d <= 0:
	case e == nil:
		t.sleepBlocking(d)
	default:
		w := &sleeper{}
		timer := c.s.Clock.AfterFunc(d, w.ev.Signal)
		defer timer.Stop()
		if c.Cancel != nil {
			stop := context.AfterFunc(c.Cancel, w.ev.Signal)
			defer stop()
		}
		stop := context.AfterFunc(c.s.Closed, w.ev.Signal)
		defer stop()
		e.Wait(&w.ev)
	}
	switch {
	case c.s.Closed.Err() != nil:
		return Unavailable(c.s, "it closed")
	case c.Cancel != nil && c.Cancel.Err() != nil:
		return contextError(c.Cancel)
	case short:
		return status.Errorf(codes.DeadlineExceeded, "granary: Sleep in %s outlasts the call's deadline", c.act.ID)
	}
	return nil
}

// sleepBlocking sleeps on the goroutine of a turn inside Blocking, which
// holds no processor.
func (t *turnCtx) sleepBlocking(d time.Duration) {
	var done <-chan struct{}
	if t.C.Cancel != nil {
		done = t.C.Cancel.Done()
	}
	select {
	case <-t.C.s.Clock.After(d):
	case <-done:
	}
}

// Blocking runs fn without holding a processor. Calls fn makes through
// this grain's Caller wait as an outside goroutine's do, keeping the call
// chain.
func (t *turnCtx) Blocking(fn func()) {
	c := t.C
	e := c.exec
	if e == nil {
		fn()
		return
	}
	c.exec, c.blocking = nil, true
	defer func() { c.exec, c.blocking = e, false }()
	e.Blocking(fn)
}

func (t *turnCtx) exec() *activation.Exec { return t.C.exec }

type sleeper struct{ ev activation.Event }

var errOffTurn = status.Error(codes.FailedPrecondition, "granary: a grain Context was used after its method returned")

// turnCaller is the Caller a grain's Context hands out: calls through it
// are made on behalf of the turn whose Context the call's context is or
// derives from, so a reference a grain keeps serves its later calls too;
// with any other context, on behalf of the turn that made the Caller,
// while that call lasts.
type turnCaller struct {
	s   *Runtime
	t   *turnCtx
	gen uint64 // t's record's use when the Caller was made
}

var errStaleCaller = status.Error(codes.FailedPrecondition,
	"granary: a reference made during an earlier call of a grain was used with a context that is not the grain's current one: pass the Context of the running method")

// turn returns the turn a call through tc is made on behalf of.
func (tc turnCaller) turn(ctx context.Context) (*turnCtx, error) {
	if cur := turnOf(ctx); cur != nil {
		return cur, nil
	}
	if tc.t.C.gen.Load() != tc.gen {
		return nil, errStaleCaller
	}
	return tc.t, nil
}
