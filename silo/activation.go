package silo

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
	valid
	deactivating
	dead
)

// activationRec is one activation of a grain: its group (the turns), its
// implementation, its admission gate and its queue of requests that may not
// start yet.
type activationRec struct {
	s     *Runtime
	typ   *grainType
	id    grain.ID
	actID uint64
	group *activation.Group
	impl  any // set by the activate turn; used by turns only
	// states are the activation's persistent states, in the order of its
	// type's declarations: set by the activate turn; used by turns only.
	states []grainrt.BoundState
	set    *workerSet // the stateless-worker set it belongs to, or nil
	// registered: in a cluster, the directory holds this activation's
	// entry, which it unregisters when it ends.
	registered atomic.Bool
	retries    uint8 // failed registrations retried; the registration's callbacks only

	mu    sync.Mutex
	state actState
	gate  admission.Gate
	queue []*call // requests not started: gate-queued, or held while activating or deactivating
	// qfirst is queue's first backing array: the request that makes an
	// activation waits in it, and most queues never hold two.
	qfirst [1]*call
	qhead  int
	seq    uint64
	// deactivate is the reason for a deactivation asked for while
	// requests run; set means no new request starts here.
	deactivate   grain.DeactivationReason
	deactPending bool
	touched      bool      // a request ran since the collector last looked
	idleSince    time.Time // when the collector last saw it touched
	timers       []*grainTimer
	ticksRunning int // interleaving timer ticks, which bypass the gate
	// calls counts the requests offered to the activation; sampled is
	// calls as HotGrains last saw it (hotMu held too).
	calls, sampled uint64
	log            *zap.Logger
}

func (s *Runtime) newActivation(id grain.ID, typ *grainType) *activationRec {
	a := &activationRec{
		s:     s,
		typ:   typ,
		id:    id,
		actID: s.nextActID.Add(1),
	}
	a.group = s.pool.NewGroupOf(a)
	a.calls = 1 // the request that makes it, queued without submit
	a.gate.Reentrant = typ.opts.Reentrant
	a.gate.ChainReentrant = typ.opts.CallChainReentrant
	return a
}

// String is the grain's ID: the label of the activation's group, made
// only when read.
func (a *activationRec) String() string { return a.id.String() }

func (a *activationRec) logger() *zap.Logger {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.log == nil {
		a.log = a.s.log.With(zap.Stringer("grain", a.id), zap.Uint64("activation", a.actID))
	}
	return a.log
}

// start queues the activate turn. Called once, by whoever created it.
func (a *activationRec) start() error {
	h := a.s.newCall(1)
	h.act, h.hook, h.due = a, hookActivate, a.s.since()+a.s.cfg.ResponseTimeout
	err := a.group.EnqueueSystem(activation.Turn{Name: "OnActivate", Task: h})
	if err != nil {
		h.release()
	}
	return err
}

// submit offers a request. It returns start when the caller must queue the
// request's turn; retry when this activation is gone and the caller must
// route the request again. Otherwise the activation kept it, or settled it
// (a deadlock). Any goroutine.
func (a *activationRec) submit(c *call) (start, retry bool) {
	c.act = a
	a.mu.Lock()
	a.calls++
	switch {
	case a.state == dead:
		a.mu.Unlock()
		c.act = nil
		return false, true
	case a.state == activating && a.inChainLocked(c):
		// A call from OnActivate came back: it would wait for the
		// activation that waits for it.
		a.mu.Unlock()
		a.s.fail(nil, c, deadlockError(c))
		return false, false
	case a.state != valid || a.deactPending && !a.holdsChainLocked(c):
		// Held for after activation, or for the next activation. A
		// request whose chain holds a request running here is not held:
		// that request cannot end, nor the deactivation begin, without it.
		a.pushLocked(c)
		a.mu.Unlock()
		return false, false
	}
	d := a.admitLocked(c)
	a.mu.Unlock()
	switch d {
	case admission.Start:
		return true, false
	case admission.Deadlock:
		a.s.fail(nil, c, deadlockError(c))
	}
	return false, false
}

// admitLocked runs the gate on c, queuing it when it must wait. mu held.
func (a *activationRec) admitLocked(c *call) admission.Decision {
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
func (a *activationRec) holdsChainLocked(c *call) bool {
	for l := c.chain; l != nil; l = l.next {
		if l.act == a && a.gate.Holds(l.seq) {
			return true
		}
	}
	return false
}

// inChainLocked reports whether c's call chain passes through this
// activation at all (its hooks included). mu held.
func (a *activationRec) inChainLocked(c *call) bool {
	for l := c.chain; l != nil; l = l.next {
		if l.act == a {
			return true
		}
	}
	return false
}

func (a *activationRec) pushLocked(c *call) {
	if a.queue == nil {
		a.queue = a.qfirst[:0]
	}
	a.queue = append(a.queue, c)
}

func (a *activationRec) popLocked() *call {
	c := a.queue[a.qhead]
	a.queue[a.qhead] = nil
	a.qhead++
	if a.qhead == len(a.queue) {
		a.queue, a.qhead = a.queue[:0], 0
	}
	return c
}

func (a *activationRec) queuedLocked() int { return len(a.queue) - a.qhead }

// takeQueueLocked removes every request not started and appends them to
// q. Timer ticks among them are dropped: they belong to this activation
// and die with it. mu held.
func (a *activationRec) takeQueueLocked(q []*call) []*call {
	for _, c := range a.queue[a.qhead:] {
		if c.tick != nil {
			c.tick.inFlight = false
			c.release()
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
func (a *activationRec) finish(e *activation.Exec, c *call) { a.finishGate(e, c.seq, true) }

// finishGate ends the running request (or tick) seq in the gate and starts
// what may start now, or begins a deactivation that was waiting for the
// requests to end. touch counts it as activity for idle collection. e is
// the worker running the turn's Done, or nil.
func (a *activationRec) finishGate(e *activation.Exec, seq uint64, touch bool) {
	var buf [8]*call
	a.mu.Lock()
	a.gate.Finish(seq)
	if touch {
		a.touched = true
	}
	if a.deactPending {
		a.unlockMaybeDeactivate(e)
		return
	}
	starts := buf[:0]
	for a.queuedLocked() > 0 {
		head := a.queue[a.qhead]
		if !a.gate.Next(head.seq, head.kind) {
			break
		}
		starts = append(starts, a.popLocked())
	}
	a.mu.Unlock()
	for _, n := range starts {
		a.enqueue(e, n)
	}
}

// enqueue queues the turn of an admitted request. If the pool has closed,
// the request fails with Unavailable.
func (a *activationRec) enqueue(e *activation.Exec, c *call) {
	if err := a.push(e, activation.Turn{Name: c.turnName(), Task: c}, false); err != nil {
		a.mu.Lock()
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
		a.mu.Unlock()
		a.s.fail(e, c, unavailable(a.s, "its silo is shutting down"))
	}
}

// push queues a turn on the activation's group: through e, the worker
// running the current turn, when there is one, so the group runs next on
// its processor; otherwise as any goroutine.
func (a *activationRec) push(e *activation.Exec, t activation.Turn, system bool) error {
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
func (a *activationRec) activated(e *activation.Exec, err error) {
	a.mu.Lock()
	// Most activations are made by one request: room for a few on the
	// stack spares every activation two slices.
	var qbuf, sbuf [4]*call
	q := a.takeQueueLocked(qbuf[:0])
	if a.state == dead && err == nil { // the silo closed meanwhile
		err = unavailable(a.s, "it closed")
	}
	if err != nil {
		a.state = dead
		for _, t := range a.timers {
			t.stopLocked()
		}
		a.timers = nil
		a.mu.Unlock()
		a.s.removeActivation(a)
		for _, c := range q {
			a.s.fail(e, c, err)
		}
		return
	}
	a.state = valid
	a.idleSince = a.s.clock.Now()
	starts := sbuf[:0]
	var deadlocks []*call
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
		a.s.fail(e, c, deadlockError(c))
	}
	for _, c := range starts {
		a.enqueue(e, c)
	}
}

// requestDeactivation asks for the activation to end as soon as no request
// runs; requests queued meanwhile go to the next activation. Any
// goroutine; a turn's own request counts as running until it ends.
func (a *activationRec) requestDeactivation(reason grain.DeactivationReason) {
	a.mu.Lock()
	if a.state != valid && a.state != activating || a.deactPending {
		a.mu.Unlock()
		return
	}
	a.deactPending, a.deactivate = true, reason
	a.unlockMaybeDeactivate(nil)
}

// unlockMaybeDeactivate releases mu, first beginning the deactivation that
// was asked for if nothing runs any more. mu held on entry, not on return.
func (a *activationRec) unlockMaybeDeactivate(e *activation.Exec) {
	begin := a.deactPending && a.quietLocked()
	if begin {
		a.beginDeactivationLocked()
	}
	a.mu.Unlock()
	if begin {
		a.queueDeactivation(e)
	}
}

// quietLocked reports whether a valid activation runs nothing, so a
// deactivation may begin. mu held.
func (a *activationRec) quietLocked() bool {
	return a.state == valid && a.gate.Running() == 0 && a.ticksRunning == 0
}

// beginDeactivationLocked moves a valid, quiet activation to deactivating
// and stops its timers. The caller then calls queueDeactivation. mu held.
func (a *activationRec) beginDeactivationLocked() {
	a.state = deactivating
	for _, t := range a.timers {
		t.stopLocked()
	}
	a.timers = nil
}

// queueDeactivation queues the deactivate turn.
func (a *activationRec) queueDeactivation(e *activation.Exec) {
	h := a.s.newCall(1)
	h.act, h.hook, h.reason = a, hookDeactivate, a.deactivate
	h.due = a.s.since() + a.s.cfg.StopDeactivationTimeout
	if err := a.push(e, activation.Turn{Name: "OnDeactivate", Task: h}, true); err != nil {
		h.release()
		a.deactivated(e)
	}
}

// end marks the activation dead, stops its timers, takes it out of the
// catalog and returns the requests it held.
func (a *activationRec) end() []*call {
	a.mu.Lock()
	a.state = dead
	for _, t := range a.timers {
		t.stopLocked()
	}
	a.timers = nil
	q := a.takeQueueLocked(nil)
	a.mu.Unlock()
	a.s.removeActivation(a)
	return q
}

// deactivated ends the deactivate turn: the activation is dead and gone
// from the catalog, and the requests that arrived meanwhile are routed
// again, to a new activation.
func (a *activationRec) deactivated(e *activation.Exec) {
	for _, c := range a.end() {
		c.act = nil
		c.inline = false // this is a turn's Done, not the caller's turn
		a.s.route(e, c)
	}
}

// abandon ends an activation that never started because its directory
// registration lost to the activation on silo winner, or failed with err:
// the requests it holds go on to the winner, or fail with err.
func (a *activationRec) abandon(winner directory.Entry, err error) {
	for _, c := range a.end() {
		c.act = nil
		if err != nil {
			a.s.fail(nil, c, err)
			continue
		}
		a.s.cl.forward(winner, c, false)
	}
}

// deadlockError names the call chain that would wait on itself.
func deadlockError(c *call) error {
	var ids []string
	for l := c.chain; l != nil; l = l.next {
		ids = append(ids, l.grain())
	}
	var b strings.Builder
	for i := len(ids) - 1; i >= 0; i-- {
		b.WriteString(ids[i])
		b.WriteString(" → ")
	}
	b.WriteString(c.id.String())
	return status.Errorf(codes.Aborted,
		"granary: deadlock: call chain %s: %s is waiting for this call and does not admit it (make the grain reentrant, the method always_interleave, or allow call-chain reentrancy)",
		b.String(), c.id)
}

func unavailable(s *Runtime, why string) error {
	return status.Error(codes.Unavailable, fmt.Sprintf("granary: silo %s: %s", s.cfg.Name, why))
}
