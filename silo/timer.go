package silo

import (
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grainTimer is a grain timer: its ticks are turns of the activation. A
// tick is queued only when the previous one finished, so ticks never
// overlap; the next is due a period after the previous ended.
//
// A non-interleaving tick goes through the admission gate like an
// exclusive request: it waits for running requests, and requests wait for
// it, across its awaits too. An interleaving tick bypasses the gate: it
// runs between other turns and lets requests start while it awaits.
type grainTimer struct {
	a    *activationRec
	name string
	fn   grain.TimerFunc
	opts grainrt.TimerOptions

	// Guarded by a.mu.
	period   time.Duration
	stopped  bool
	inFlight bool // a tick is queued or running
	refire   bool // the tick came due, or Change was called, during a tick
	// dueWhileActivating: the first tick came due before OnActivate ended.
	dueWhileActivating bool

	// Links in the silo's timer wheel. due (when the timer is due, as a
	// time since the silo's epoch) and wsoon (linked in the wheel's soon
	// list) are written under a.mu and the slot's lock; wslot (the slot
	// while linked) and the list links under the slot's lock. wsweep is
	// the sweeper's.
	due          time.Duration
	wsoon        bool
	wslot        *timerSlot
	wnext, wprev *grainTimer
	wsweep       uint64
	// changes counts Change calls: a tick the wheel collected before
	// one is not fired. Written under a.mu.
	changes atomic.Uint32
}

func (a *activationRec) registerTimer(name string, fn grain.TimerFunc, due, period time.Duration, opts []grain.TimerOption) (grain.Timer, error) {
	switch {
	case fn == nil:
		return nil, status.Error(codes.InvalidArgument, "granary: RegisterTimer: nil TimerFunc")
	case due < 0 || period < 0:
		return nil, status.Errorf(codes.InvalidArgument, "granary: RegisterTimer %q: negative due time %v or period %v", name, due, period)
	}
	t := &grainTimer{a: a, name: "timer " + name, fn: fn, period: period}
	for _, o := range opts {
		o(&t.opts)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != valid && a.state != activating || a.deactPending {
		return nil, status.Errorf(codes.FailedPrecondition, "granary: RegisterTimer %q: activation of %s is ending", name, a.id)
	}
	a.s.timerWheel.link(t, a.s.since()+due)
	a.timers = append(a.timers, t)
	return t, nil
}

// fireFromWheel is fire for a timer the wheel's sweep at now collected as
// due, when its Change count was changes: a Change since supersedes the
// tick. e is the worker running the wheel's batch, or nil.
func (t *grainTimer) fireFromWheel(e *activation.Exec, changes uint32, now time.Duration) {
	t.a.mu.Lock()
	if t.changes.Load() != changes {
		t.a.mu.Unlock()
		return
	}
	t.fireLocked(e, now)
}

// fire queues the tick's turn unless one is in flight: for a tick that
// came due while the activation was activating.
func (t *grainTimer) fire() {
	t.a.mu.Lock()
	t.fireLocked(nil, t.a.s.since())
}

// fireLocked is fire with a.mu held, which it releases; now is the
// silo's time, and e the worker queuing the tick, or nil.
func (t *grainTimer) fireLocked(e *activation.Exec, now time.Duration) {
	a := t.a
	if a.state == activating && !t.stopped {
		t.dueWhileActivating = true // fired by activated
		a.mu.Unlock()
		return
	}
	if t.stopped || a.state != valid || a.deactPending {
		a.mu.Unlock()
		return
	}
	if t.inFlight {
		t.refire = true
		a.mu.Unlock()
		return
	}
	t.inFlight = true
	c := a.s.newCall(1)
	c.act, c.tick = a, t
	c.due = now + a.s.cfg.ResponseTimeout
	start := true
	if t.opts.Interleave {
		c.kind = admission.Interleave
		a.ticksRunning++
	} else {
		a.seq++
		c.seq = a.seq
		if a.gate.Admit(c.seq, admission.Exclusive, false) == admission.Queue {
			a.pushLocked(c)
			start = false
		}
	}
	a.mu.Unlock()
	if start {
		a.enqueue(e, c)
	}
}

// run is the tick's turn.
func (t *grainTimer) run(c *call) {
	t.a.mu.Lock()
	stopped := t.stopped
	t.a.mu.Unlock()
	if stopped {
		return
	}
	if err := t.fn(&c.ctx); err != nil {
		t.a.logger().Warn("timer tick failed", zap.String("timer", t.name), zap.Error(err))
	}
}

// done ends a tick's turn and arms the next.
func (t *grainTimer) done(e *activation.Exec, c *call, panicked bool) {
	a := t.a
	a.mu.Lock()
	t.inFlight = false
	if !t.stopped {
		switch {
		case t.refire:
			t.refire = false
			a.s.timerWheel.relink(t, a.s.since())
		case t.period > 0:
			a.s.timerWheel.relink(t, a.s.since()+t.period)
		}
	}
	if t.opts.KeepAlive {
		a.touched = true
	}
	if t.opts.Interleave {
		a.ticksRunning--
		a.unlockMaybeDeactivate(e)
	} else {
		a.mu.Unlock()
		if panicked { // before the gate admits the queue onto this activation
			a.requestDeactivation(grain.DeactivatePanic)
		}
		a.finishGate(e, c.seq, t.opts.KeepAlive)
	}
	if panicked && t.opts.Interleave {
		a.requestDeactivation(grain.DeactivatePanic)
	}
	c.release()
}

// Change sets a new due time and period.
func (t *grainTimer) Change(due, period time.Duration) error {
	if due < 0 || period < 0 {
		return status.Errorf(codes.InvalidArgument, "granary: Timer.Change %q: negative due time %v or period %v", t.name, due, period)
	}
	t.a.mu.Lock()
	defer t.a.mu.Unlock()
	if t.stopped {
		return status.Errorf(codes.FailedPrecondition, "granary: Timer.Change %q: the timer is stopped", t.name)
	}
	t.period = period
	t.changes.Add(1)
	w := &t.a.s.timerWheel
	if t.inFlight {
		w.unlink(t)
		t.refire = false
		if due == 0 {
			t.refire = true
		} else {
			w.relink(t, t.a.s.since()+due)
		}
		return nil
	}
	w.relink(t, t.a.s.since()+due)
	return nil
}

// Stop stops the timer. Idempotent.
func (t *grainTimer) Stop() {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopLocked()
	for i, x := range a.timers {
		if x == t {
			a.timers = append(a.timers[:i], a.timers[i+1:]...)
			break
		}
	}
}

func (t *grainTimer) stopLocked() {
	t.stopped = true
	t.a.s.timerWheel.unlink(t)
}
