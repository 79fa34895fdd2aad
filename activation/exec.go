package activation

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// An Exec is the worker goroutine running a turn. The pool passes it to
// Task.Run and Task.Done; the turn uses it to enqueue work near itself, to
// run a call inline, and to wait without holding a processor. An Exec
// belongs to the goroutine it was passed to, for the duration of that call
// only: it must not be kept or shared.
type Exec struct {
	pool     *Pool
	p        *proc // the processor held, or nil
	wake     chan struct{}
	spinning bool // counted in pool.nspinning
	started  bool // set by launch, before the goroutine starts

	// frames are the groups whose tokens this goroutine holds or will take
	// back: frames[0] is the group the worker is draining, each further one
	// a group run inline from the turn below it.
	frames [maxInlineDepth + 1]frame
	depth  int

	batch      [64]Turn // turns peeked by runGroup, run without the group lock (64: see docs/benchmarks.md)
	waits      uint64   // releases so far: runGroup sees that a turn waited
	res        resumer  // the continuation turn of this goroutine's waits
	schedTick  uint32   // findRunnable calls, to look at the global queue first now and then
	nextStreak int      // groups taken from next in a row
	rng        uint64   // xorshift state for victim choice and sample gaps
	sampleIn   uint32   // turns until the next timed one (turnstats.go)

	report execReport // what Close reports if it abandons this goroutine's turn
}

// random returns a pseudo-random number: xorshift64, cheap and private to
// the worker, which is all victim choice needs. Owner only.
func (e *Exec) random() uint64 {
	x := e.rng
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	e.rng = x
	return x
}

type frame struct {
	g     *Group
	name  string // the waiting turn's name, set when the token is released
	held  bool   // this goroutine holds g's token
	ahead int    // turns of the current batch that ran and are still queued
}

func newExec(p *Pool) *Exec {
	e := &Exec{pool: p, wake: make(chan struct{}, 1), rng: rand.Uint64() | 1}
	e.res.e = e
	e.sampleIn = e.nextSampleGap()
	return e
}

// Pool returns the pool the turn runs on.
func (e *Exec) Pool() *Pool { return e.pool }

// Group returns the group whose turn is running.
func (e *Exec) Group() *Group {
	if e.depth == 0 {
		return nil
	}
	return e.frames[e.depth-1].g
}

// Enqueue appends t to g's queue like Group.Enqueue, but when g becomes
// runnable it goes to this worker's processor, to run as soon as the
// current turn ends or waits.
func (e *Exec) Enqueue(g *Group, t Turn) error { return g.enqueue(e, t, false) }

// EnqueueSystem is Exec.Enqueue for a system turn; see Group.EnqueueSystem.
func (e *Exec) EnqueueSystem(g *Group, t Turn) error { return g.enqueue(e, t, true) }

// loop is the worker goroutine.
func (e *Exec) loop() {
	defer e.pool.wg.Done()
	defer e.pool.nworkers.Add(-1)
	defer e.pool.forget(e)
	for {
		if e.p == nil && !e.parkSpare() {
			return
		}
		if e.p.status.Load() == pDetached {
			e.pool.retireProc(e)
			continue
		}
		g := e.findRunnable()
		if g == nil {
			return
		}
		if !g.state.CompareAndSwap(groupQueued, groupRunning) {
			panic("activation: group " + g.Label() + " taken from a run queue was not queued")
		}
		if e.spinning {
			e.resetSpinning()
		}
		e.runGroup(g)
	}
}

// parkSpare parks a worker that holds no processor until startWorker hands
// it one. It returns false when the worker should exit instead: the pool
// closed, or enough spares are parked already. Owner only.
func (e *Exec) parkSpare() bool {
	p := e.pool
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		p.dropAll()
		return false
	}
	if len(p.spares) >= p.cfg.Processors {
		// Enough spares for any burst of hand-offs; let this one go.
		p.mu.Unlock()
		return false
	}
	p.spares = append(p.spares, e)
	p.mu.Unlock()
	<-e.wake
	return e.p != nil
}

// resetSpinning ends this worker's spinning because it found work, and
// wakes another spinner if more work is visible. Owner only.
func (e *Exec) resetSpinning() {
	e.spinning = false
	if e.pool.nspinning.Add(-1) == 0 && (e.pool.queuedOutside() || (e.p != nil && !e.p.runqEmpty())) {
		e.pool.wakep()
	}
}

// findRunnable returns a queued group to run, looking locally, globally and
// in other processors' rings, parking when there is nothing. It returns nil
// when the worker should exit. Owner only.
func (e *Exec) findRunnable() *Group {
	p := e.pool
	cfg := &p.cfg
	for {
		pp := e.p
		if p.closed.Load() {
			pp.stealNext.Store(false)
			p.dropAll()
			return nil
		}
		e.schedTick++
		if e.schedTick%61 == 0 {
			if g := p.globalGet(pp); g != nil {
				e.nextStreak = 0
				return g
			}
		}
		if g := pp.next.Load(); g != nil {
			if e.nextStreak >= cfg.QuantumTurns {
				// A chain of groups handing each other next would starve the
				// ring: send next to the tail this time.
				if g = pp.next.Swap(nil); g != nil {
					pp.runqput(p, g, false)
				}
			} else if g = pp.next.Swap(nil); g != nil {
				pp.stealNext.Store(false)
				e.nextStreak++
				return g
			}
		}
		e.nextStreak = 0
		if g := pp.runqget(); g != nil {
			return g
		}
		if g := p.inbox.Swap(nil); g != nil {
			return g
		}
		if g := p.globalGet(pp); g != nil {
			return g
		}
		busy := int32(cfg.Processors) - p.npidle.Load()
		if e.spinning || 2*p.nspinning.Load() < busy {
			if !e.spinning {
				e.spinning = true
				p.nspinning.Add(1)
			}
			for range cfg.SpinRounds {
				if g := p.inbox.Swap(nil); g != nil {
					return g
				}
				if g := p.globalGet(pp); g != nil {
					return g
				}
				if g := p.steal(e, pp); g != nil {
					return g
				}
				runtime.Gosched()
				if p.closed.Load() || !pp.runqEmpty() {
					break
				}
			}
			if !pp.runqEmpty() {
				continue
			}
		}
		if !e.park() {
			return nil
		}
	}
}

// park gives the processor back and waits until it is needed again. The
// worker stays attached to the idle processor, so waking it is one channel
// send: the same two goroutine switches as a channel round trip. It returns
// false if the worker should exit. Owner only.
func (e *Exec) park() bool {
	p := e.pool
	pp := e.p
	if !pp.runqEmpty() {
		return true
	}
	// Once parked on pp, e's fields belong to whoever takes pp: settle
	// them first.
	wasSpinning := e.spinning
	e.spinning = false
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		e.spinning = wasSpinning
		return true // findRunnable sees closed
	}
	e.p = nil
	p.pidleputLocked(pp)
	pp.parked = e
	p.mu.Unlock()
	if wasSpinning {
		p.nspinning.Add(-1)
	}
	// A submitter that found a spinner before we stopped spinning did not
	// wake anyone: look once more now that we are counted idle, and take
	// our processor back if no one has.
	if p.stealableWork() {
		p.mu.Lock()
		if pp.parked == e {
			p.pidleremoveLocked(pp)
			p.mu.Unlock()
			e.p = pp
			e.spinning = true
			p.nspinning.Add(1)
			return true
		}
		p.mu.Unlock()
	}
	<-e.wake
	return e.p != nil
}

// runGroup drains g, whose token this worker took from a run queue, until
// its queue is empty, its quantum ends, or its token leaves this goroutine.
// Owner only.
func (e *Exec) runGroup(g *Group) {
	pool := e.pool
	pp := e.p
	pp.runSeq.Store(pp.runSeq.Load() + 1)
	if pp.preempt.Load() {
		pp.preempt.Store(false)
	}
	pp.curGroup.Store(g)
	e.report.cur.Store(g)
	f := e.pushFrame(g)
	n := 0
	for {
		if pool.closed.Load() {
			g.dropTurns(e)
			if g.becomeIdle(e) {
				continue
			}
			f.held = false
			break
		}
		// Peek a batch: one lock for up to len(e.batch) turns (a whole
		// quantum by default), which stay queued until they have run.
		k := g.peekBatch(e, e.batch[:max(1, min(len(e.batch), pool.cfg.QuantumTurns-n))])
		if k == 0 {
			f.held = false // peekBatch made the group idle
			break
		}
		if r, isRes := e.batch[0].Task.(*resumer); isRes {
			// A waiting turn's continuation: the token and the processor go
			// to the goroutine that waits; this worker becomes a spare.
			clear(e.batch[:k])
			e.handTo(r.e, f)
			break
		}
		ran, waited := e.runBatch(g, f, k)
		n += ran
		clear(e.batch[:k])
		f.ahead = 0
		if !f.held {
			break // the pool closed while the turn waited
		}
		pp = e.p
		if waited {
			ran = 1 // release removed the others; this is the continuation entry
		}
		if !g.completeN(e, ran) {
			f.held = false // completeN made the group idle
			break
		}
		if pp.status.Load() != pRunning || n >= pool.cfg.QuantumTurns || pp.preempt.Load() {
			pp.preempt.Store(false)
			f.held = false
			g.yieldGlobal()
			break
		}
	}
	g.turns.Add(uint64(n))
	e.popFrame()
	if e.p != nil {
		e.p.curGroup.Store(nil)
	}
}

// runBatch runs the peeked turns e.batch[:k] of g in order, until all have
// run, one has waited, or the batch must stop early: for a continuation
// (it starts a batch of its own), a queued system turn, a preemption or a
// closing pool. It returns how many turns ran, and whether the last of
// them waited (release then removed the batch's run turns from the
// queue). Token holder only.
func (e *Exec) runBatch(g *Group, f *frame, k int) (ran int, waited bool) {
	for ran < k && !waited {
		var stop bool
		ran, waited, stop = e.runBatchFrom(g, f, ran, k)
		if stop {
			break
		}
	}
	return ran, waited
}

// runBatchFrom runs e.batch[i:k] for runBatch, under one deferred recover:
// a recover per turn would weigh on every short turn. A turn that
// panics gets a *PanicError in its Done, and runBatchFrom returns after
// it so that runBatch can go on with the next. Token holder only.
func (e *Exec) runBatchFrom(g *Group, f *frame, i, k int) (next int, waited, stop bool) {
	pool, pp := e.pool, e.p
	waits := e.waits
	inRun := false
	next = i
	defer func() {
		if !inRun {
			return
		}
		r := recover()
		t := e.batch[next]
		t.Task.Done(e, newPanicError(g, t, r))
		next++
		waited = e.waits != waits
	}()
	for ; next < k; next++ {
		t := e.batch[next]
		if next > 0 {
			if _, isRes := t.Task.(*resumer); isRes || g.sysPending.Load() || pp.preempt.Load() || pool.closed.Load() {
				return next, false, true // the rest waits for the next batch
			}
			g.batchPos.Store(int32(next))
		}
		f.ahead = next
		var start time.Time
		sampled := e.sampleTurn()
		if sampled {
			start = pool.now()
		}
		inRun = true
		t.Task.Run(e)
		inRun = false
		t.Task.Done(e, nil)
		if sampled {
			e.endSample(start, waits)
		}
		if e.waits != waits {
			return next + 1, true, false
		}
	}
	return next, false, false
}

// runTurn runs one turn and reports how it ended. Token holder only.
func (e *Exec) runTurn(g *Group, t Turn) {
	sampled := e.sampleTurn()
	var start time.Time
	waits := e.waits
	if sampled {
		start = e.pool.now()
	}
	err := e.call(g, t)
	t.Task.Done(e, err)
	if sampled && err == nil {
		e.endSample(start, waits)
	}
}

// newPanicError describes turn t of g panicking with r; it is called in the
// deferred function that recovered, so the stack is the panicking one.
func newPanicError(g *Group, t Turn, r any) *PanicError {
	return &PanicError{Group: g.Label(), Turn: t.Name, Value: r, Stack: debug.Stack()}
}

func (e *Exec) call(g *Group, t Turn) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError(g, t, r)
		}
	}()
	t.Task.Run(e)
	return nil
}

func (e *Exec) pushFrame(g *Group) *frame {
	f := &e.frames[e.depth]
	e.depth++
	*f = frame{g: g, held: true}
	return f
}

func (e *Exec) popFrame() {
	e.depth--
	e.frames[e.depth] = frame{}
}

// handTo gives this worker's processor and the token of f's group to x,
// whose continuation turn is at the head of the group. Owner only.
func (e *Exec) handTo(x *Exec, f *frame) {
	pp := e.p
	e.p = nil
	f.held = false
	xf := &x.frames[x.depth-1]
	xf.held = true
	pp.runSeq.Store(pp.runSeq.Load() + 1)
	pp.curGroup.Store(xf.g)
	x.p = pp
	x.wake <- struct{}{}
}

// resumer is the task of a continuation turn: running it hands the
// processor and the group's token to the goroutine that waits. Workers
// recognise it before Run is called; Run itself is never called.
type resumer struct{ e *Exec }

func (r *resumer) Run(*Exec) { panic("activation: continuation run as a turn") }

// Done is called when the pool closed before the continuation ran: the
// waiting goroutine continues without a processor.
func (r *resumer) Done(_ *Exec, err error) {
	if err != nil {
		r.e.wake <- struct{}{}
	}
}

// An Event is a one-shot signal a turn can wait for with Exec.Wait without
// holding its processor: typically the reply to a call. The zero value is
// ready to use. Reset makes it reusable once no one waits on it.
type Event struct {
	state atomic.Pointer[Exec] // nil, eventSignaled, or the waiting Exec
}

var eventSignaled = new(Exec)

// Signal sets the event and resumes the turn waiting on it, if any, through
// the global queue. Signaling twice is harmless. Any goroutine.
func (ev *Event) Signal() { ev.signal(nil) }

// Signal sets ev from a turn: a resumed waiter's group becomes runnable on
// this worker's processor, to run as soon as the current turn ends.
func (e *Exec) Signal(ev *Event) { ev.signal(e) }

func (ev *Event) signal(from *Exec) {
	x := ev.state.Swap(eventSignaled)
	if x == nil || x == eventSignaled {
		return
	}
	f := &x.frames[x.depth-1]
	f.g.pushResume(from, Turn{Task: &x.res, Name: f.name})
}

// Signaled reports whether the event has been signaled. Any goroutine.
func (ev *Event) Signaled() bool { return ev.state.Load() == eventSignaled }

// Reset clears a signaled event for reuse. No Wait may be in progress.
func (ev *Event) Reset() { ev.state.Store(nil) }

// Wait blocks the turn until ev is signaled. Unless ev is signaled already,
// the turn releases every group token it holds (so other turns of those
// groups may run: interleaving happens only here) and hands its processor
// to another worker. When ev is signaled, the turn waits in its group's
// FIFO, like any turn, to take the token and a processor back. If the pool
// closes meanwhile, Wait returns once ev is signaled, and the turn runs on
// without a processor. Turn goroutine only.
func (e *Exec) Wait(ev *Event) {
	if ev.state.Load() == eventSignaled {
		return
	}
	if !e.holding("Wait") {
		// The pool closed under this turn: just wait.
		if ev.state.CompareAndSwap(nil, e) {
			<-e.wake
		}
		return
	}
	top := &e.frames[e.depth-1]
	e.release()
	if ev.state.CompareAndSwap(nil, e) {
		<-e.wake
	} else {
		e.retake(top)
	}
	e.endWait()
}

// Blocking runs fn, which may block (file or network I/O, a lock, a cgo
// call), without holding the processor or the group tokens, and takes them
// back afterwards; if fn panics, the tokens are taken back before the panic
// continues. Turn goroutine only.
func (e *Exec) Blocking(fn func()) {
	if !e.holding("Blocking") {
		fn()
		return
	}
	top := &e.frames[e.depth-1]
	e.release()
	defer func() {
		e.retake(top)
		e.endWait()
	}()
	fn()
}

// holding reports whether the turn holds its token and a processor; it is
// false only after the pool closed under the turn. Turn goroutine only.
func (e *Exec) holding(what string) bool {
	if e.depth == 0 {
		panic("activation: Exec." + what + " called outside a turn")
	}
	return e.frames[e.depth-1].held && e.p != nil
}

// release gives up every held group token and the processor before a wait.
// Turn goroutine only.
func (e *Exec) release() {
	pool := e.pool
	e.waits++
	pool.activate(e) // before any group goes idle, so Stop cannot finish early
	pool.blocked.Add(1)
	for i := e.depth - 1; i >= 0; i-- {
		f := &e.frames[i]
		if !f.held {
			continue
		}
		f.held = false
		f.g.mu.Lock()
		freed := f.g.popHeadLocked(f.ahead, nil) // batch turns that ran before this one
		f.ahead = 0
		f.name = f.g.headLocked().Name // its continuation will carry the name
		freed = f.g.popHeadLocked(1, freed)
		f.g.mu.Unlock()
		releaseSegments(freed)
		f.g.release(e)
	}
	e.noteWait(&e.frames[e.depth-1])
	e.handoff()
}

func (e *Exec) endWait() {
	e.noteWaitEnd()
	e.pool.blocked.Add(-1)
	e.pool.deactivate(e)
}

// handoff gives this goroutine's processor to a worker that can use it, or
// back to the idle list. Owner only; afterwards e holds no processor.
func (e *Exec) handoff() {
	pool := e.pool
	pp := e.p
	pp.handoffs.Store(pp.handoffs.Load() + 1)
	if pp.status.Load() == pDetached {
		pool.retireProc(e)
		return
	}
	e.p = nil
	pp.curGroup.Store(nil)
	if !pp.runqEmpty() || pool.queuedOutside() {
		pool.startWorker(pp, false)
		return
	}
	pool.pidleput(pp)
}

// retake takes back the token of frame f after a release, and a processor.
// Turn goroutine only.
func (e *Exec) retake(f *frame) {
	pool := e.pool
	if pool.closed.Load() {
		if e.p != nil {
			e.handoff()
		}
		return
	}
	if e.p == nil {
		e.p = pool.pidleget()
	}
	if e.p != nil {
		if f.g.acquireIdle(e, Turn{Task: &e.res, Name: f.name}) {
			f.held = true
			e.p.runSeq.Store(e.p.runSeq.Load() + 1)
			e.p.curGroup.Store(f.g)
			return
		}
		e.handoff()
	}
	f.g.push(nil, Turn{Task: &e.res, Name: f.name}, false)
	<-e.wake
	if e.p != nil {
		e.p.curGroup.Store(f.g)
	}
}

// TryRun runs t inline, on this goroutine, if g is idle with an empty
// queue and the inline depth allows it: the caller takes g's token for the
// turn, like a function call. It returns false, having done nothing, when
// it cannot; the caller then enqueues t and waits. When TryRun returns true,
// t has run and its Done has been called. Turn goroutine only.
func (e *Exec) TryRun(g *Group, t Turn) bool {
	pool := e.pool
	if t.Task == nil || g.pool != pool || e.depth == 0 || e.depth > pool.cfg.InlineDepth ||
		e.p == nil || pool.closed.Load() || !e.frames[e.depth-1].held {
		return false
	}
	if !g.acquireIdle(e, t) {
		return false
	}
	caller := &e.frames[e.depth-1]
	f := e.pushFrame(g)
	e.p.curGroup.Store(g)
	e.runTurn(g, t)
	g.turns.Add(1)
	if f.held {
		if _, more := g.complete(e); more {
			g.yield(e)
		}
	}
	e.popFrame()
	if !caller.held {
		e.pool.activate(e)
		e.pool.blocked.Add(1)
		e.retake(caller)
		e.endWait()
	}
	if e.p != nil {
		e.p.curGroup.Store(caller.g)
	}
	return true
}
