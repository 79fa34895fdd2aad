package silo

import (
	"context"
	"sync"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// turnCtx is the grain.Context of a request, tick or hook: it lives in the
// call record, so passing it costs nothing. Its Done channel is made only
// when grain code asks for it.
type turnCtx struct {
	c *call

	once    sync.Once
	derived context.Context
	stop    context.CancelFunc
}

var (
	grainCtxKey  = grain.ContextKey()
	headerCtxKey = grain.HeaderKey()
)

func (t *turnCtx) reset() {
	if t.stop != nil {
		t.stop()
	}
	*t = turnCtx{}
}

func (t *turnCtx) lazy() context.Context {
	t.once.Do(func() {
		parent := t.c.cancel
		if parent == nil {
			parent = context.Background()
		}
		t.derived, t.stop = context.WithDeadline(parent, t.c.deadline())
	})
	return t.derived
}

// Deadline is the call's deadline: the earliest of the caller's, the
// method's timeout and the silo's response timeout.
func (t *turnCtx) Deadline() (time.Time, bool) { return t.c.deadline(), true }

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
		return t.c.headers
	}
	return nil
}

func (t *turnCtx) ID() grain.ID { return t.c.act.id }

func (t *turnCtx) ActivationID() uint64 { return t.c.act.actID }

func (t *turnCtx) CallChain() []grain.ID {
	ids := make([]grain.ID, t.c.depth)
	i := len(ids)
	for l := t.c.chain; l != nil; l = l.next {
		i--
		ids[i] = l.act.id
	}
	return ids
}

func (t *turnCtx) Caller() grain.Caller { return turnCaller{t} }

func (t *turnCtx) Logger() *zap.Logger { return t.c.act.logger() }

func (t *turnCtx) DeactivateOnIdle() { t.c.act.requestDeactivation(grain.DeactivateRequested) }

func (t *turnCtx) RegisterTimer(name string, fn grain.TimerFunc, due, period time.Duration, opts ...grain.TimerOption) (grain.Timer, error) {
	return t.c.act.registerTimer(name, fn, due, period, opts)
}

// Sleep waits without holding a processor.
func (t *turnCtx) Sleep(d time.Duration) error {
	e := t.exec()
	if e == nil {
		return errOffTurn
	}
	if d <= 0 {
		return nil
	}
	w := &sleeper{}
	timer := t.c.s.clock.AfterFunc(d, w.ev.Signal)
	defer timer.Stop()
	if t.c.cancel != nil {
		stop := context.AfterFunc(t.c.cancel, w.ev.Signal)
		defer stop()
		e.Wait(&w.ev)
		return t.c.cancel.Err()
	}
	e.Wait(&w.ev)
	return nil
}

// Blocking runs fn without holding a processor.
func (t *turnCtx) Blocking(fn func()) {
	if e := t.exec(); e != nil {
		e.Blocking(fn)
		return
	}
	fn()
}

func (t *turnCtx) exec() *activation.Exec { return t.c.exec }

type sleeper struct{ ev activation.Event }

var errOffTurn = status.Error(codes.FailedPrecondition, "granary: a grain Context was used after its method returned or off its goroutine")

// turnCaller is the Caller a grain's Context hands out: calls through it
// are made on behalf of the turn, whatever context the grain passes.
type turnCaller struct{ t *turnCtx }
