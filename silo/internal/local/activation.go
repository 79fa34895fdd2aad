package local

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// actState is an activation's lifecycle state. Transitions, each under mu:
//
//	activating -> valid         the activate turn, when OnActivate succeeded
//	activating -> dead          the activate turn, when it failed
//	valid      -> deactivating beginDeactivationLocked, once nothing runs
//	deactivating -> dead        the deactivate turn, after OnDeactivate
//	any        -> dead          Close
type actState uint8

const (
	activating actState = iota
	Valid
	deactivating
	dead
)

// activationRec is one activation of a grain: its group (the turns), its
// implementation, its admission gate and its queue of requests that may not
// start yet.
type ActivationRec struct {
	s     *Runtime
	typ   *GrainType
	Id    grain.ID
	ActID uint64
	group *activation.Group
	impl  any // set by the activate turn; used by turns only
	// states are the activation's persistent states, in the order of its
	// type's declarations: set by the activate turn; used by turns only.
	states []grainrt.BoundState
	set    *WorkerSet // the stateless-worker set it belongs to, or nil
	// registered: in a cluster, the directory holds this activation's
	// entry, which it unregisters when it ends.
	Registered atomic.Bool
	Retries    uint8 // failed registrations retried; the registration's callbacks only

	Mu    sync.Mutex
	State actState
	gate  admission.Gate
	queue []*Call // requests not started: gate-queued, or held while activating or deactivating
	// qfirst is queue's first backing array: the request that makes an
	// activation waits in it, and most queues never hold two.
	qfirst [1]*Call
	qhead  int
	seq    uint64
	// deactivate is the reason for a deactivation asked for while
	// requests run; set means no new request starts here.
	deactivate   grain.DeactivationReason
	DeactPending bool
	touched      bool      // a request ran since the collector last looked
	idleSince    time.Time // when the collector last saw it touched
	timers       []*grainTimer
	ticksRunning int // interleaving timer ticks, which bypass the gate
	// calls counts the requests offered to the activation; sampled is
	// calls as HotGrains last saw it (hotMu held too).
	Calls, Sampled uint64
	log            *zap.Logger
}

func (s *Runtime) newActivation(id grain.ID, typ *GrainType) *ActivationRec {
	a := &ActivationRec{
		s:     s,
		typ:   typ,
		Id:    id,
		ActID: s.NextActID.Add(1),
	}
	a.group = s.Pool.NewGroupOf(a)
	a.Calls = 1 // the request that makes it, queued without submit
	a.gate.Reentrant = typ.Opts.Reentrant
	a.gate.ChainReentrant = typ.Opts.CallChainReentrant
	return a
}

// String is the grain's ID: the label of the activation's group, made
// only when read.
func (a *ActivationRec) String() string { return a.Id.String() }

func (a *ActivationRec) logger() *zap.Logger {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if a.log == nil {
		a.log = a.s.Log.With(zap.Stringer("grain", a.Id), zap.Uint64("activation", a.ActID))
	}
	return a.log
}

// start queues the activate turn. Called once, by whoever created it.
func (a *ActivationRec) start() error {
	h := a.s.NewCall(1)
	h.act, h.hook, h.Due = a, hookActivate, a.s.Since()+a.s.Cfg.ResponseTimeout
	err := a.group.EnqueueSystem(activation.Turn{Name: "OnActivate", Task: h})
	if err != nil {
		h.Release()
	}
	return err
}

// submit offers a request. It returns start when the caller must queue the
// request's turn; retry when this activation is gone and the caller must
// route the request again. Otherwise the activation kept it, or settled it
// (a deadlock). Any goroutine.
func (a *ActivationRec) submit(c *Call) (start, retry bool) {
	c.act = a
	a.Mu.Lock()
	a.Calls++
	switch {
	case a.State == dead:
		a.Mu.Unlock()
		c.act = nil
		return false, true
	case a.State == activating && a.inChainLocked(c):
		// A call from OnActivate came back: it would wait for the
		// activation that waits for it.
		a.Mu.Unlock()
		a.s.Fail(nil, c, deadlockError(c))
		return false, false
	case a.State != Valid || a.DeactPending && !a.holdsChainLocked(c):
		// Held for after activation, or for the next activation. A
		// request whose chain holds a request running here is not held:
		// that request cannot end, nor the deactivation begin, without it.
		a.pushLocked(c)
		a.Mu.Unlock()
		return false, false
	}
	d := a.admitLocked(c)
	a.Mu.Unlock()
	switch d {
	case admission.Start:
		return true, false
	case admission.Deadlock:
		a.s.Fail(nil, c, deadlockError(c))
	}
	return false, false
}

// admitLocked runs the gate on c, queuing it when it must wait. mu held.
func (a *ActivationRec) admitLocked(c *Call) admission.Decision {
	a.seq++
	c.seq = a.seq
	d := a.gate.Admit(c.seq, c.kind, a.holdsChainLocked(c))
	switch d {
	case admission.Start:
		a.touched = true
	case admission.Queue:
		a.pushLocked(c)
	}
	return d
}

// holdsChainLocked reports whether a request up c's call chain runs here.
// mu held.
func (a *ActivationRec) holdsChainLocked(c *Call) bool {
	for l := c.Chain; l != nil; l = l.Next {
		if l.Act == a && a.gate.Holds(l.Seq) {
			return true
		}
	}
	return false
}

// inChainLocked reports whether c's call chain passes through this
// activation at all (its hooks included). mu held.
func (a *ActivationRec) inChainLocked(c *Call) bool {
	for l := c.Chain; l != nil; l = l.Next {
		if l.Act == a {
			return true
		}
	}
	return false
}

func (a *ActivationRec) pushLocked(c *Call) {
	if a.queue == nil {
		a.queue = a.qfirst[:0]
	}
	a.queue = append(a.queue, c)
}

func (a *ActivationRec) popLocked() *Call {
	c := a.queue[a.qhead]
	a.queue[a.qhead] = nil
	a.qhead++
	if a.qhead == len(a.queue) {
		a.queue, a.qhead = a.queue[:0], 0
	}
	return c
}

func (a *ActivationRec) QueuedLocked() int { return len(a.queue) - a.qhead }

// takeQueueLocked removes every request not started and appends them to
// q. Timer ticks among them are dropped: they belong to this activation
// and die with it. mu held.
func (a *ActivationRec) takeQueueLocked(q []*Call) []*Call {
	for _, c := range a.queue[a.qhead:] {
		if c.tick != nil {
			c.tick.inFlight = false
			c.Release()
			continue
		}
		q = append(q, c)
	}
	clear(a.queue)
	a.queue, a.qhead = a.queue[:0], 0
	for a.gate.Queued() > 0 {
		a.gate.Drop()
	}
	return q
}

// finish ends request c in the gate; see finishGate.
func (a *ActivationRec) finish(e *activation.Exec, c *Call) { a.finishGate(e, c.seq, true) }

// finishGate ends the running request (or tick) seq in the gate and starts
// what may start now, or begins a deactivation that was waiting for the
// requests to end. touch counts it as activity for idle collection. e is
// the worker running the turn's Done, or nil.
func (a *ActivationRec) finishGate(e *activation.Exec, seq uint64, touch bool) {
	var buf [8]*Call
	a.Mu.Lock()
	a.gate.Finish(seq)
	if touch {
		a.touched = true
	}
	if a.DeactPending {
		a.unlockMaybeDeactivate(e)
		return
	}
	starts := buf[:0]
	for a.QueuedLocked() > 0 {
		head := a.queue[a.qhead]
		if !a.gate.Next(head.seq, head.kind) {
			break
		}
		starts = append(starts, a.popLocked())
	}
	a.Mu.Unlock()
	for _, n := range starts {
		a.enqueue(e, n)
	}
}

// enqueue queues the turn of an admitted request. If the pool has closed,
// the request fails with Unavailable.
func (a *ActivationRec) enqueue(e *activation.Exec, c *Call) {
	if err := a.push(e, activation.Turn{Name: c.turnName(), Task: c}, false); err != nil {
		a.Mu.Lock()
		switch {
		case c.tick != nil && c.kind == admission.Interleave:
			a.ticksRunning-- // an interleaving tick never entered the gate
			c.tick.inFlight = false
		case c.tick != nil:
			a.gate.Finish(c.seq)
			c.tick.inFlight = false
		default:
			a.gate.Finish(c.seq)
		}
		a.Mu.Unlock()
		a.s.Fail(e, c, Unavailable(a.s, "its silo is shutting down"))
	}
}

// push queues a turn on the activation's group: through e, the worker
// running the current turn, when there is one, so the group runs next on
// its processor; otherwise as any goroutine.
func (a *ActivationRec) push(e *activation.Exec, t activation.Turn, system bool) error {
	switch {
	case e != nil && system:
		return e.EnqueueSystem(a.group, t)
	case e != nil:
		return e.Enqueue(a.group, t)
	case system:
		return a.group.EnqueueSystem(t)
	}
	return a.group.Enqueue(t)
}

// activated ends the activate turn: the activation becomes valid, or
// (when err is not nil) dead, failing every request that waited for it.
func (a *ActivationRec) activated(e *activation.Exec, err error) {
	a.Mu.Lock()
	// Most activations are made by one request: room for a few on the
	// stack spares every activation two slices.
	var qbuf, sbuf [4]*Call
	q := a.takeQueueLocked(qbuf[:0])
	if a.State == dead && err == nil { // the silo closed meanwhile
		err = Unavailable(a.s, "it closed")
	}
	if err != nil {
		a.State = dead
		for _, t := range a.timers {
			t.stopLocked()
		}
		a.timers = nil
		a.Mu.Unlock()
		a.s.removeActivation(a)
		for _, c := range q {
			a.s.Fail(e, c, err)
		}
		return
	}
	a.State = Valid
	a.idleSince = a.s.Clock.Now()
	starts := sbuf[:0]
	var deadlocks []*Call
	for _, c := range q {
		switch a.admitLocked(c) {
		case admission.Start:
			starts = append(starts, c)
		case admission.Deadlock:
			deadlocks = append(deadlocks, c)
		}
	}
	var due []*grainTimer
	for _, t := range a.timers {
		if t.dueWhileActivating {
			t.dueWhileActivating = false
			due = append(due, t)
		}
	}
	a.unlockMaybeDeactivate(e) // begins only if nothing started
	for _, t := range due {
		t.fire()
	}
	for _, c := range deadlocks {
		a.s.Fail(e, c, deadlockError(c))
	}
	for _, c := range starts {
		a.enqueue(e, c)
	}
}

// requestDeactivation asks for the activation to end as soon as no request
// runs; requests queued meanwhile go to the next activation. Any
// goroutine; a turn's own request counts as running until it ends.
func (a *ActivationRec) RequestDeactivation(reason grain.DeactivationReason) {
	a.Mu.Lock()
	if a.State != Valid && a.State != activating || a.DeactPending {
		a.Mu.Unlock()
		return
	}
	a.DeactPending, a.deactivate = true, reason
	a.unlockMaybeDeactivate(nil)
}

// unlockMaybeDeactivate releases mu, first beginning the deactivation that
// was asked for if nothing runs any more. mu held on entry, not on return.
func (a *ActivationRec) unlockMaybeDeactivate(e *activation.Exec) {
	begin := a.DeactPending && a.quietLocked()
	if begin {
		a.beginDeactivationLocked()
	}
	a.Mu.Unlock()
	if begin {
		a.queueDeactivation(e)
	}
}

// quietLocked reports whether a valid activation runs nothing, so a
// deactivation may begin. mu held.
func (a *ActivationRec) quietLocked() bool {
	return a.State == Valid && a.gate.Running() == 0 && a.ticksRunning == 0
}

// beginDeactivationLocked moves a valid, quiet activation to deactivating
// and stops its timers. The caller then calls queueDeactivation. mu held.
func (a *ActivationRec) beginDeactivationLocked() {
	a.State = deactivating
	for _, t := range a.timers {
		t.stopLocked()
	}
	a.timers = nil
}

// queueDeactivation queues the deactivate turn.
func (a *ActivationRec) queueDeactivation(e *activation.Exec) {
	h := a.s.NewCall(1)
	h.act, h.hook, h.reason = a, hookDeactivate, a.deactivate
	h.Due = a.s.Since() + a.s.Cfg.StopDeactivationTimeout
	if err := a.push(e, activation.Turn{Name: "OnDeactivate", Task: h}, true); err != nil {
		h.Release()
		a.deactivated(e)
	}
}

// end marks the activation dead, stops its timers, takes it out of the
// catalog and returns the requests it held.
func (a *ActivationRec) end() []*Call {
	a.Mu.Lock()
	a.State = dead
	for _, t := range a.timers {
		t.stopLocked()
	}
	a.timers = nil
	q := a.takeQueueLocked(nil)
	a.Mu.Unlock()
	a.s.removeActivation(a)
	return q
}

// deactivated ends the deactivate turn: the activation is dead and gone
// from the catalog, and the requests that arrived meanwhile are routed
// again, to a new activation.
func (a *ActivationRec) deactivated(e *activation.Exec) {
	for _, c := range a.end() {
		c.act = nil
		c.inline = false // this is a turn's Done, not the caller's turn
		a.s.Route(e, c)
	}
}

// abandon ends an activation that never started because its directory
// registration lost to the activation on silo winner, or failed with err:
// the requests it holds go on to the winner, or fail with err.
func (a *ActivationRec) Abandon(winner directory.Entry, err error) {
	for _, c := range a.end() {
		c.act = nil
		if err != nil {
			a.s.Fail(nil, c, err)
			continue
		}
		a.s.Cl.Forward(winner, c, false)
	}
}

// deadlockError names the call chain that would wait on itself.
func deadlockError(c *Call) error {
	var ids []string
	for l := c.Chain; l != nil; l = l.Next {
		ids = append(ids, l.grain())
	}
	var b strings.Builder
	for i := len(ids) - 1; i >= 0; i-- {
		b.WriteString(ids[i])
		b.WriteString(" → ")
	}
	b.WriteString(c.Id.String())
	return status.Errorf(codes.Aborted,
		"granary: deadlock: call chain %s: %s is waiting for this call and does not admit it (make the grain reentrant, the method always_interleave, or allow call-chain reentrancy)",
		b.String(), c.Id)
}

func Unavailable(s *Runtime, why string) error {
	return status.Error(codes.Unavailable, fmt.Sprintf("granary: silo %s: %s", s.Cfg.Name, why))
}
