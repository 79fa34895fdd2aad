package local

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Activation is one activation of a grain: its group (the turns), its
// implementation, its lifecycle, its admission gate and its queue of
// requests that may not start yet.
//
// Its lifecycle is a lifecycle.Machine, under Mu, which holds the rules:
// the runtime feeds it every event of the activation's life and performs
// the actions it answers, and keeps no lifecycle state of its own. A
// request is offered to it (submit: Offer), and then, once admitted, to
// the gate, which decides when it starts. The activate turn is queued once
// the registration won (StartActivation: Registered) and its end is
// ActivateDone (activated); the end of a request's or a timer tick's turn
// is TurnDone (finish, grainTimer.done); a deactivation asked for is
// Deactivate (RequestDeactivation), the collector's look IdleTick
// (collectIdle), the deactivate turn's end Deactivated (deactivated), a
// lost or failed registration RegistrationLost or RegistrationFailed
// (Abandon), and the silo closing Close (close). Every answer but Offer's
// is performed by unlockDo. See the lifecycle package for the wiring.
type Activation struct {
	s     *Runtime
	typ   *GrainType
	ID    grain.ID
	ActID uint64
	group *activation.Group
	impl  any // set by the activate turn; used by turns only
	// states are the activation's persistent states, in the order of its
	// type's declarations: set by the activate turn; used by turns only.
	states []grainrt.BoundState
	set    *WorkerSet // the stateless-worker set it belongs to, or nil
	// Registered: in a cluster, the directory holds this activation's
	// entry, which it unregisters when it ends.
	Registered atomic.Bool
	Retries    uint8 // failed registrations retried; the registration's callbacks only

	Mu    sync.Mutex
	life  lifecycle.Machine
	gate  admission.Gate
	queue []*Call // requests not started: gate-queued, or held by the lifecycle (while registering, activating or deactivating)
	// qfirst is queue's first backing array: the request that makes an
	// activation waits in it, and most queues never hold two.
	qfirst [1]*Call
	seq    uint64
	timers *grainTimer // newest first, linked by anext
	// qhead and ticksRunning share a word: an activation is kept within
	// the 320-byte size class (TestActivationStaysIn320Bytes).
	qhead        int32
	ticksRunning int32 // interleaving timer ticks, which bypass the gate
	// Calls counts the requests offered to the activation; sampled is
	// calls as HotGrains last saw it (hotMu held too). 32 bits each: only
	// their difference is read, which wraps safely.
	Calls, Sampled uint32
	log            *zap.Logger
	// inbox and posted hold the plain one-way requests not yet offered:
	// see inbox.go.
	inbox   atomic.Pointer[post]
	inboxN  atomic.Int32 // posts pushed and not yet taken, about
	backlog atomic.Int32 // requests queued and posted, as of the last settleInboxLocked
	posted  *post
}

// Lifecycle is the activation's lifecycle state. Mu held.
func (a *Activation) Lifecycle() lifecycle.State { return a.life.State() }

// DeactivationPending reports whether a deactivation was asked for and
// has not begun. Mu held.
func (a *Activation) DeactivationPending() bool {
	_, pending := a.life.Pending()
	return pending
}

func (s *Runtime) newActivation(id grain.ID, typ *GrainType) *Activation {
	a := &Activation{
		s:     s,
		typ:   typ,
		ID:    id,
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
func (a *Activation) String() string { return a.ID.String() }

func (a *Activation) logger() *zap.Logger {
	a.Mu.Lock()
	defer a.Mu.Unlock()
	if a.log == nil {
		a.log = a.s.Log.With(zap.Stringer("grain", a.ID), zap.Uint64("activation", a.ActID))
	}
	return a.log
}

// start queues the activate turn: the lifecycle's StartActivate.
func (a *Activation) start() error {
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
// (a deadlock). One-way requests posted before it are offered first, so
// that a sender's call comes after its one-way requests. e is the worker
// of the calling turn, or nil. Any goroutine.
func (a *Activation) submit(e *activation.Exec, c *Call) (start, retry bool) {
	c.act = a
	var d offered
	a.Mu.Lock()
	if a.inbox.Load() != nil || a.posted != nil {
		a.takeInboxLocked(&d)
		for a.posted != nil {
			a.offerPostedLocked(&d)
		}
	}
	o := a.offerLocked(c)
	a.settleInboxLocked(&d)
	a.Mu.Unlock()
	d.do(e, a)
	switch o.do {
	case offerStart:
		return true, false
	case offerRetry:
		c.act = nil
		return false, true
	case offerFail:
		a.s.Fail(nil, c, deadlockError(c))
	case offerOverLimit:
		a.overLimit(c, o.v, o.depth)
	}
	return false, false
}

// An offerOutcome is what offering a request decided that must be done
// with mu released.
type offerOutcome struct {
	do    offerAction
	v     queueVerdict
	depth int
}

type offerAction uint8

const (
	offerKept      offerAction = iota // queued or held
	offerStart                        // admitted: queue its turn
	offerRetry                        // the activation is gone: route it again
	offerFail                         // a deadlock: fail it
	offerOverLimit                    // queued past, or refused at, a queue limit: overLimit
)

// offerLocked offers c to the lifecycle and the gate: the rules of a
// request arriving. mu held.
func (a *Activation) offerLocked(c *Call) offerOutcome {
	a.Calls++
	inChain, holdsChain := a.life.OfferNeeds()
	switch a.life.Offer(inChain && a.inChainLocked(c), holdsChain && a.holdsChainLocked(c)).Do {
	case lifecycle.Admit:
		a.seq++
		c.seq = a.seq
		switch a.gate.AdmitChain(c.seq, c.kind, a.chainLocked(c)) {
		case admission.Queue:
			v, depth := a.queueOfferedLocked(c)
			if v == queueFull {
				a.gate.Drop() // it never waits here
			}
			if v != queueOK {
				return offerOutcome{do: offerOverLimit, v: v, depth: depth}
			}
			return offerOutcome{}
		case admission.Deadlock:
			return offerOutcome{do: offerFail}
		}
		return offerOutcome{do: offerStart}
	case lifecycle.Hold:
		// Held for after activation, or for the next activation.
		v, depth := a.queueOfferedLocked(c)
		if v == queueFull {
			a.life.Unhold() // refused, so not held after all
		}
		if v != queueOK {
			return offerOutcome{do: offerOverLimit, v: v, depth: depth}
		}
		return offerOutcome{}
	case lifecycle.Retry:
		return offerOutcome{do: offerRetry}
	}
	// FailDeadlock: a call from OnActivate came back: it would wait for
	// the activation that waits for it.
	return offerOutcome{do: offerFail}
}

// offered holds what offering posted requests left to do after mu is
// released: the common case, a start or two, without allocating (a
// slice into its own array would move it to the heap).
type offered struct {
	n     int
	first [4]*Call // the first starts
	more  []*Call  // the starts after them
	rest  []offeredCall
	// pastSoft counts the posts taken past the queue's soft limit, and
	// softDepth is the depth the last of them made.
	pastSoft, softDepth int
}

type offeredCall struct {
	c *Call
	o offerOutcome
}

// refused reports whether d holds anything but starts.
func (d *offered) refused() bool { return len(d.rest) > 0 || d.pastSoft > 0 }

func (d *offered) add(c *Call, o offerOutcome) {
	switch {
	case o.do == offerKept:
	case o.do != offerStart:
		d.rest = append(d.rest, offeredCall{c, o})
	case d.n < len(d.first):
		d.first[d.n] = c
		d.n++
	default:
		d.more = append(d.more, c)
	}
}

// do does, with mu released, what offering posted requests to a left.
func (d *offered) do(e *activation.Exec, a *Activation) {
	if d.pastSoft > 0 {
		a.warnPastSoft(d.softDepth, d.pastSoft)
	}
	for _, r := range d.rest {
		switch c := r.c; r.o.do {
		case offerRetry:
			c.act = nil
			a.s.Route(e, c)
		case offerFail:
			a.s.Fail(e, c, deadlockError(c))
		case offerOverLimit:
			a.overLimit(c, r.o.v, r.o.depth)
		}
	}
	for _, c := range d.first[:d.n] {
		a.enqueue(e, c)
	}
	for _, c := range d.more {
		a.enqueue(e, c)
	}
}

// holdFirst holds c, the request that makes the activation, for the
// lifecycle. The activation is not published yet: no lock needed.
func (a *Activation) holdFirst(c *Call) {
	a.life.Offer(false, false) // Registering: Hold
	a.pushLocked(c)
}

// admitLocked runs the gate on c, a request the activation holds
// already, queuing it when it must wait. mu held.
func (a *Activation) admitLocked(c *Call) admission.Decision {
	a.seq++
	c.seq = a.seq
	d := a.gate.AdmitChain(c.seq, c.kind, a.chainLocked(c))
	if d == admission.Queue {
		a.pushLocked(c)
	}
	return d
}

// holdsChainLocked reports whether a request up c's call chain runs here.
// mu held.
func (a *Activation) holdsChainLocked(c *Call) bool {
	for l := c.Chain; l != nil; l = l.Next {
		if l.Act == a && a.gate.Holds(l.Seq()) {
			return true
		}
	}
	return false
}

// chainLocked is what c's call chain says about this activation, for the
// gate. Of the links whose requests run here, the innermost that set a
// call-chain reentrancy scope decides: a scope covers everything its call
// causes, the calls of requests that re-entered through it included,
// unless one of those sets its own. Without one the type decides
// (InChain). mu held.
func (a *Activation) chainLocked(c *Call) admission.Chain {
	ch := admission.NotInChain
	for l := c.Chain; l != nil; l = l.Next {
		if l.Act != a || !a.gate.Holds(l.Seq()) {
			continue
		}
		switch l.Reentry() {
		case grainrt.ChainReentryAllow:
			return admission.InChainAllowed
		case grainrt.ChainReentrySuppress:
			return admission.InChainSuppressed
		}
		ch = admission.InChain
	}
	return ch
}

// inChainLocked reports whether c's call chain passes through this
// activation at all (its hooks included). mu held.
func (a *Activation) inChainLocked(c *Call) bool {
	for l := c.Chain; l != nil; l = l.Next {
		if l.Act == a {
			return true
		}
	}
	return false
}

// pushLocked queues c, counting it in its worker set's depth; requests
// offered to the activation are queued by queueOfferedLocked instead,
// which checks the queue limits. mu held.
func (a *Activation) pushLocked(c *Call) {
	if a.set != nil {
		a.set.queued.Add(1)
	}
	a.appendLocked(c)
}

// appendLocked adds c to the queue. mu held.
func (a *Activation) appendLocked(c *Call) {
	if a.queue == nil {
		a.queue = a.qfirst[:0]
	}
	a.queue = append(a.queue, c)
}

func (a *Activation) popLocked() *Call {
	if a.set != nil {
		a.set.queued.Add(-1)
	}
	c := a.queue[a.qhead]
	a.queue[a.qhead] = nil
	a.qhead++
	if int(a.qhead) == len(a.queue) {
		a.queue, a.qhead = a.queue[:0], 0
	}
	return c
}

// QueuedLocked is the activation's queue depth (see queuelimit.go). mu
// held.
func (a *Activation) QueuedLocked() int { return len(a.queue) - int(a.qhead) }

// takeQueueLocked removes every request not started and appends them to
// q. Timer ticks among them are dropped: they belong to this activation
// and die with it. mu held.
func (a *Activation) takeQueueLocked(q []*Call) []*Call {
	if a.set != nil {
		a.set.queued.Add(-int64(a.QueuedLocked()))
	}
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

// finish ends request c's turn: in the gate, then for the lifecycle (see
// unlockTurnDone). e is the worker running the turn's Done, or nil.
func (a *Activation) finish(e *activation.Exec, c *Call, panicked bool) {
	a.Mu.Lock()
	a.gate.Finish(c.seq)
	a.unlockTurnDone(e, true, panicked)
}

// unlockTurnDone tells the lifecycle that a turn ended, the gate (or
// ticksRunning) told already, and performs its answer: it starts what the
// gate may start now, or begins a deactivation that waited for the turns
// to end. activity counts the turn against idle collection; panicked says
// grain code panicked. mu held on entry, not on return.
func (a *Activation) unlockTurnDone(e *activation.Exec, activity, panicked bool) {
	var d offered
	if p := a.inbox.Load(); p != nil && p != busyInbox {
		a.takeInboxLocked(&d)
	}
	r := a.life.TurnDone(a.quietLocked(), activity, panicked, a.s.IdleNow())
	if r.Do != lifecycle.StartQueued {
		a.settleInboxLocked(&d)
		a.unlockDo(e, r, nil, directory.Entry{})
		d.do(e, a)
		return
	}
	var buf [8]*Call
	starts := a.startQueuedLocked(buf[:0])
	a.settleInboxLocked(&d)
	a.Mu.Unlock()
	for _, n := range starts {
		a.enqueue(e, n)
	}
	d.do(e, a)
}

// startQueuedLocked takes from the queue's head the requests the gate
// starts now, appending them to starts. mu held.
func (a *Activation) startQueuedLocked(starts []*Call) []*Call {
	for a.QueuedLocked() > 0 {
		head := a.queue[a.qhead]
		if !a.gate.Next(head.seq, head.kind) {
			break
		}
		starts = append(starts, a.popLocked())
	}
	return starts
}

// quietLocked reports whether the activation runs nothing: no request
// holds the gate and no interleaving tick runs. mu held.
func (a *Activation) quietLocked() bool {
	return a.gate.Running() == 0 && a.ticksRunning == 0
}

// enqueue queues the turn of an admitted request. If the pool has closed,
// the request fails with Unavailable.
func (a *Activation) enqueue(e *activation.Exec, c *Call) {
	if err := a.push(e, activation.Turn{Name: c.turnName(), Task: c}, false); err != nil {
		var d offered
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
		// The pool runs nothing more: what was posted fails too, here,
		// rather than each through an enqueue of its own.
		a.takeInboxLocked(&d)
		dropped := a.posted != nil
		for a.posted != nil {
			p := a.popPostedLocked()
			freePost(p)
		}
		a.settleInboxLocked(&d)
		a.Mu.Unlock()
		d.do(e, a)
		if dropped {
			a.s.Log.Warn("one-way requests were dropped: their silo is shutting down", zap.Stringer("grain", a.ID))
		}
		a.s.Fail(e, c, Unavailable(a.s, "its silo is shutting down"))
	}
}

// push queues a turn on the activation's group: through e, the worker
// running the current turn, when there is one, so the group runs next on
// its processor; otherwise as any goroutine.
func (a *Activation) push(e *activation.Exec, t activation.Turn, system bool) error {
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

// activated ends the activate turn: OnActivate (or reading the grain's
// states) succeeded, or failed with err (ActivateDone).
func (a *Activation) activated(e *activation.Exec, err error) {
	a.Mu.Lock()
	a.unlockDo(e, a.life.ActivateDone(err != nil, a.s.Since()), err, directory.Entry{})
}

// RequestDeactivation asks for the activation to end as soon as no request
// runs; requests queued meanwhile go to the next activation (Deactivate).
// Any goroutine; a turn's own request counts as running until it ends.
func (a *Activation) RequestDeactivation(reason grain.DeactivationReason) {
	a.Mu.Lock()
	a.unlockDo(nil, a.life.Deactivate(reason, a.quietLocked()), nil, directory.Entry{})
}

// deactivated ends the deactivate turn (Deactivated): the activation is
// dead and gone from the catalog, and the requests that arrived meanwhile
// are routed again, to a new activation.
func (a *Activation) deactivated(e *activation.Exec) {
	a.Mu.Lock()
	a.unlockDo(e, a.life.Deactivated(), nil, directory.Entry{})
}

// Abandon ends an activation that never started because its directory
// registration lost to the activation on silo winner
// (RegistrationLost), or failed with err (RegistrationFailed): the
// requests it holds go on to the winner, or fail with err.
func (a *Activation) Abandon(winner directory.Entry, err error) {
	a.Mu.Lock()
	if err != nil {
		a.unlockDo(nil, a.life.RegistrationFailed(), err, directory.Entry{})
		return
	}
	a.unlockDo(nil, a.life.RegistrationLost(a.quietLocked()), nil, winner)
}

// close ends the activation at once, the silo closing (Close): its timers
// stop, it leaves the catalog, and the requests it holds fail with
// Unavailable.
func (a *Activation) close() {
	a.Mu.Lock()
	a.unlockDo(nil, a.life.Close(), nil, directory.Entry{})
}

// queueActions are the actions that dispose of the queue.
const queueActions = lifecycle.RerouteQueue | lifecycle.ForwardQueue | lifecycle.MigrateQueue | lifecycle.FailQueue

// unlockDo performs r, the lifecycle's answer to an event, and releases
// mu (held on entry, not on return): under mu what touches the queue, the
// gate and the timers, then the rest, in the order of r's bits. err is
// the error a failed queue gets (FailQueue: the activate or registration
// error; Unavailable for CauseClosed), winner where a forwarded one goes (ForwardQueue); e is the
// worker running the event's turn, or nil. Offer's answers are performed
// by submit, and TurnDone's StartQueued by unlockTurnDone.
func (a *Activation) unlockDo(e *activation.Exec, r lifecycle.Result, err error, winner directory.Entry) {
	if r.Do == 0 {
		a.Mu.Unlock()
		return
	}
	// Most activations are made by one request: room for a few on the
	// stack spares every activation two slices.
	var qbuf, sbuf [4]*Call
	var q, starts, deadlocks []*Call
	var due []*grainTimer
	if r.Do&(lifecycle.AdmitHeld|queueActions) != 0 {
		q = a.takeQueueLocked(qbuf[:0])
	}
	if r.Has(lifecycle.AdmitHeld) {
		starts = sbuf[:0]
		for _, c := range q {
			switch a.admitLocked(c) {
			case admission.Start:
				starts = append(starts, c)
			case admission.Deadlock:
				deadlocks = append(deadlocks, c)
			}
		}
		q = nil
	}
	if r.Has(lifecycle.FireDueTimers) {
		for t := a.timers; t != nil; t = t.anext {
			if t.dueWhileActivating {
				t.dueWhileActivating = false
				due = append(due, t)
			}
		}
		slices.Reverse(due) // in the order they were registered
	}
	if r.Has(lifecycle.StartQueued) {
		starts = a.startQueuedLocked(starts)
	}
	if r.Has(lifecycle.StopTimers) {
		for t := a.timers; t != nil; t = t.anext {
			t.stopLocked()
		}
		a.timers = nil
	}
	if r.Has(lifecycle.DropRegistration) {
		a.Registered.Store(false) // the entry is the winner's
	}
	a.Mu.Unlock()

	if r.Has(lifecycle.StartActivate) {
		if a.start() != nil {
			a.activated(nil, Unavailable(a.s, "its silo is shutting down"))
		}
	}
	if r.Has(lifecycle.BeginDeactivate) {
		a.queueDeactivation(e, r.Reason)
	}
	if r.Has(lifecycle.Remove) {
		a.s.removeActivation(a)
	}
	switch {
	case r.Do&(lifecycle.RerouteQueue|lifecycle.MigrateQueue) != 0:
		// No migration protocol yet: a migration's queue is routed again.
		for _, c := range q {
			c.act = nil
			c.inline = false // this is not the caller's turn
			a.s.Route(e, c)
		}
	case r.Has(lifecycle.ForwardQueue):
		for _, c := range q {
			c.act = nil
			c.leaveLimit() // its latency is the winner's
			a.s.Cl.Forward(winner, c, false)
		}
	case r.Has(lifecycle.FailQueue):
		if r.Cause == lifecycle.CauseClosed && len(q) > 0 {
			err = Unavailable(a.s, "it closed")
		}
		for _, c := range q {
			c.act = nil
			a.s.Fail(e, c, err)
		}
	}
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

// queueDeactivation queues the deactivate turn, OnDeactivate with reason.
func (a *Activation) queueDeactivation(e *activation.Exec, reason grain.DeactivationReason) {
	h := a.s.NewCall(1)
	h.act, h.hook, h.reason = a, hookDeactivate, reason
	h.Due = a.s.Since() + a.s.Cfg.StopDeactivationTimeout
	if err := a.push(e, activation.Turn{Name: "OnDeactivate", Task: h}, true); err != nil {
		h.Release()
		a.deactivated(e)
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
	b.WriteString(c.ID.String())
	return status.Errorf(codes.Aborted,
		"granary: deadlock: call chain %s: %s is waiting for this call and does not admit it (make the grain reentrant, the method always_interleave, or allow call-chain reentrancy, for the type or on the call that waits)",
		b.String(), c.ID)
}

func Unavailable(s *Runtime, why string) error {
	return status.Error(codes.Unavailable, fmt.Sprintf("granary: silo %s: %s", s.Cfg.Name, why))
}
