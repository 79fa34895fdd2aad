package local

import (
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grainTimer is a grain timer: its ticks are turns of the activation. A
// tick is fired only when the previous one finished, so ticks never
// overlap; the next is due a period after the previous ended.
//
// A non-interleaving tick goes through the admission gate like an
// exclusive request: it waits for running requests, and requests wait for
// it, across its awaits too. An interleaving tick bypasses the gate: it
// runs between other turns and lets requests start while it awaits.
type grainTimer struct {
	a    *Activation
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
	// anext links the activation's timers, newest first. Guarded by a.mu.
	anext *grainTimer

	// mode says whether the wheel's batch may run the next tick inline
	// (tickInline, tickTimed, tickQueued). Ticks are timed by the real
	// clock, whatever clock the silo runs on: a timed tick from ranAt,
	// written and read by the tick's goroutine; an inline one by the
	// wheel's batch.
	mode  atomic.Uint32
	ranAt time.Duration
}

// Timer tick modes.
const (
	// tickTimed: the timer's ticks are queued and timed, and once one
	// runs within tickInlineMax the next may run inline. A new timer's.
	tickTimed uint32 = iota
	// tickInline: the last tick timed ran within tickInlineMax.
	tickInline
	// tickQueued: an inline tick ran longer, holding back its batch; the
	// timer's ticks are queued from then on.
	tickQueued
)

// monoEpoch is the origin of monoNow.
var monoEpoch = time.Now()

// monoNow reads the monotonic clock, for timing ticks.
func monoNow() time.Duration { return time.Since(monoEpoch) }

// tickInlineMax is the longest a timer's last tick may have run for the
// wheel's batch turn to run its next tick inline, on the batch's own
// goroutine, when the activation's group is idle (Exec.TryRun). An inline
// tick costs no run-queue round trip, and touches the timer, the
// activation and the group while they are in cache. A tick that waits (a
// grain call, storage) takes longer than this: a queued one is queued
// again next time, and an inline one, which held back the ticks after it
// in its batch once, makes its timer's ticks queued for good.
const tickInlineMax = 50 * time.Microsecond

// tickInlineBudget bounds how long a batch turn runs ticks inline; the
// ticks after it are queued, for other processors to take.
const tickInlineBudget = 250 * time.Microsecond

func (a *Activation) registerTimer(name string, fn grain.TimerFunc, due, period time.Duration, opts []grain.TimerOption) (grain.Timer, error) {
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
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if !a.life.Usable() {
		return nil, status.Errorf(codes.FailedPrecondition, "granary: RegisterTimer %q: activation of %s is ending", name, a.ID)
	}
	a.s.TimerWheel.link(t, a.s.Since()+due)
	t.anext, a.timers = a.timers, t
	return t, nil
}

// fireFromWheel is fire for a timer the wheel's sweep at now collected as
// due, when its Change count was changes: a Change since supersedes the
// tick. e is the worker running the wheel's batch, or nil; inline lets
// the tick run on it when the timer's ticks are short. It reports whether
// the tick ran inline.
func (t *grainTimer) fireFromWheel(e *activation.Exec, changes uint32, now time.Duration, inline bool) bool {
	t.a.Mu.Lock()
	if t.changes.Load() != changes {
		t.a.Mu.Unlock()
		return false
	}
	return t.fireLocked(e, now, inline)
}

// fire queues the tick's turn unless one is in flight: for a tick that
// came due while the activation was activating.
func (t *grainTimer) fire() {
	t.a.Mu.Lock()
	t.fireLocked(nil, t.a.s.Since(), false)
}

// fireLocked is fire with a.mu held, which it releases; now is the
// silo's time, and e the worker queuing the tick, or nil. With inline
// set, a short tick runs on e if the activation's group is idle; it
// reports whether it did.
func (t *grainTimer) fireLocked(e *activation.Exec, now time.Duration, inline bool) bool {
	a := t.a
	if a.life.State() < lifecycle.Active && !t.stopped {
		t.dueWhileActivating = true // fired by activated (FireDueTimers)
		a.Mu.Unlock()
		return false
	}
	if t.stopped || !a.life.Usable() {
		a.Mu.Unlock()
		return false
	}
	if t.inFlight {
		t.refire = true
		a.Mu.Unlock()
		return false
	}
	t.inFlight = true
	c := a.s.NewCall(1)
	c.act, c.tick = a, t
	c.Due = now + a.s.Cfg.ResponseTimeout
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
	a.Mu.Unlock()
	if !start {
		return false
	}
	if inline && t.mode.Load() == tickInline && e.TryRun(a.group, activation.Turn{Name: c.turnName(), Task: c}) {
		return true
	}
	a.enqueue(e, c)
	return false
}

// run is the tick's turn.
func (t *grainTimer) run(c *Call) {
	if t.mode.Load() == tickTimed {
		t.ranAt = monoNow()
	}
	t.a.Mu.Lock()
	stopped := t.stopped
	t.a.Mu.Unlock()
	if stopped {
		return
	}
	if err := t.fn(&c.Ctx); err != nil {
		t.a.logger().Warn("timer tick failed", zap.String("timer", t.name), zap.Error(err))
	}
}

// done ends a tick's turn and arms the next.
func (t *grainTimer) done(e *activation.Exec, c *Call, panicked bool) {
	a := t.a
	a.Mu.Lock()
	t.inFlight = false
	if t.mode.Load() == tickTimed && monoNow()-t.ranAt <= a.s.TimerWheel.InlineMax {
		t.mode.Store(tickInline)
	}
	if !t.stopped {
		switch {
		case t.refire:
			t.refire = false
			a.s.TimerWheel.relink(t, a.s.Since())
		case t.period > 0:
			a.s.TimerWheel.relink(t, a.s.Since()+t.period)
		}
	}
	if t.opts.Interleave {
		a.ticksRunning--
	} else {
		a.gate.Finish(c.seq)
	}
	// A keep-alive timer's tick counts against idle collection.
	a.unlockTurnDone(e, t.opts.KeepAlive, panicked)
	c.Release()
}

// Change sets a new due time and period.
func (t *grainTimer) Change(due, period time.Duration) error {
	if due < 0 || period < 0 {
		return status.Errorf(codes.InvalidArgument, "granary: Timer.Change %q: negative due time %v or period %v", t.name, due, period)
	}
	t.a.Mu.Lock()
	defer t.a.Mu.Unlock()
	if t.stopped {
		return status.Errorf(codes.FailedPrecondition, "granary: Timer.Change %q: the timer is stopped", t.name)
	}
	t.period = period
	t.changes.Add(1)
	w := &t.a.s.TimerWheel
	if t.inFlight {
		w.unlink(t)
		t.refire = false
		if due == 0 {
			t.refire = true
		} else {
			w.relink(t, t.a.s.Since()+due)
		}
		return nil
	}
	w.relink(t, t.a.s.Since()+due)
	return nil
}

// Stop stops the timer. Idempotent.
func (t *grainTimer) Stop() {
	a := t.a
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if t.stopped {
		return
	}
	t.stopLocked()
	for p := &a.timers; *p != nil; p = &(*p).anext {
		if *p == t {
			*p, t.anext = t.anext, nil
			break
		}
	}
}

func (t *grainTimer) stopLocked() {
	t.stopped = true
	t.a.s.TimerWheel.unlink(t)
}
