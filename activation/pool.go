package activation

// The pool: how turns of millions of groups share a few processors.
//
// Design
//
// A Pool owns N processors (N = Config.Processors, default GOMAXPROCS). A
// processor is a run token plus the scheduling state that goes with it: a
// bounded local ring of runnable groups, a one-slot next, and counters. A
// worker is a goroutine; it runs grain code only while it holds a
// processor, so at most N workers run grain code at once. This is the Go
// runtime's own split between P (processor) and M (thread), one level up:
// our workers are its goroutines, our groups are its goroutines' run queues.
//
// Groups, not turns, are what the pool schedules. A group (group.go) is the
// FIFO of one activation; it is in at most one run queue at a time, and the
// worker that takes it from a queue holds its run token and drains up to a
// quantum of its turns. So one enqueue onto a busy group costs a lock and a
// slot write, with no scheduling at all.
//
// Where a runnable group goes:
//   - made runnable by a turn (a local call, a reply, a one-way send): into
//     next on the worker's processor, kicking the previous next to the ring's
//     tail. The callee then runs on the same processor as soon as the caller's
//     turn ends or blocks, with warm caches and no wakeup;
//   - made runnable from outside the pool (a network reader, a timer): into
//     the one-slot inbox when a worker is spinning (it looks there first),
//     straight into an idle processor's next with its parked worker woken
//     when none is, else onto the global queue;
//   - at the end of its quantum with turns left: onto the global queue, behind
//     every group already waiting there, so one hot group cannot keep others
//     waiting for more than about a quantum;
//   - ring full: half the ring moves to the global queue in one lock.
//
// An idle worker looks in next, its ring, the global queue (first every 61st
// time, so the global queue is never starved by local work), then steals half
// of a random victim's ring. It spins for SpinRounds rounds of that, yielding
// between rounds, before it gives its processor back and parks. A submit
// wakes a parked worker only when no worker is spinning, and at most half of
// the busy processors' worth of workers spin at once, as in the Go runtime.
// Thieves do not take next from a running processor: its owner will run it
// when the current turn ends. The monitor marks next stealable when the
// owner's run has not moved for a monitor interval, and a detached
// processor's next is always stealable. A parked worker stays attached to
// its idle processor, so waking it is one channel send.
//
// Blocking. Grain code blocks Go-style: a call returns its answer. A turn
// that waits (Exec.Wait, Exec.Blocking) gives up its group's run token and
// hands its processor to another worker (a parked spare, or a new one), so
// the pool keeps N processors busy however many turns wait. When the wait
// ends, a continuation turn goes onto the group's queue; the worker that
// reaches it hands its processor and the group's token to the waiting
// goroutine and parks as a spare. Interleaving therefore happens only at
// waits, and only where the layer above enqueued something.
//
// Inline calls. A hand-off costs two goroutine switches there and two back.
// The common local call, where the callee's group is idle, needs none:
// Exec.TryRun takes the callee's token and runs its turn on the caller's
// goroutine, like a function call, up to Config.InlineDepth deep. Single
// threadedness is about holding the token, not about which goroutine runs.
// If the inline turn waits, every token on the goroutine's stack is
// released, and each is taken back before its frame continues.
//
// Long turns. The monitor goroutine samples each processor every
// MonitorInterval, watching a counter that moves once per group run, so the
// per-turn path pays nothing for it. A run past QuantumTime is asked to
// yield at its next turn boundary. A run still going after HandOnAfter
// means one turn is holding the processor; it loses its token:
// its processor is detached (its owner keeps running the turn, and anything
// it queues locally stays stealable) and a fresh processor goes to another
// worker. Past LongTurnWarning the monitor logs the group and the turn.
//
// Rejected designs. A goroutine per activation costs a stack per grain and a
// goroutine switch per message. A goroutine per run (protoactor's mailbox)
// pays a goroutine start per burst and lets runnable grain code exceed the
// core count. Running other work on a waiting worker's stack nests turns
// under unrelated turns and can deadlock when the inner one waits on the
// outer. A bounded per-group queue deadlocks when a turn enqueues onto a
// full group that needs the enqueuing processor to drain. The measurements
// behind these choices are in docs/benchmarks.md.
//
// Who may call what: functions documented "owner only" may be called only by
// the worker that holds the processor; "any goroutine" functions are safe
// anywhere; "mu held" functions need Pool.mu, "gmu held" Pool.gmu.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Pool is a fixed set of processors that run the turns of many groups.
// Create one with New and stop it with Stop or Close.
type Pool struct {
	// Read on every enqueue and turn, written once: kept apart from the
	// counters below, which change all the time, so that reading them
	// does not miss the cache (see docs/benchmarks.md#the-groups-hot-path).
	cfg      Config
	stopping atomic.Bool
	closed   atomic.Bool
	allp     atomic.Pointer[[]*proc] // every processor ever made; grows only
	closing  chan struct{}           // closed when Close begins: stops the monitor, wakes EnqueueWait
	_        [cacheLine]byte

	// outside is the activity stripe of goroutines that hold no processor
	// (see activity); each processor has its own.
	outside  activity
	blocked  atomic.Int64  // goroutines waiting with their processor handed on
	drained  chan struct{} // closed when stopping and the pool is quiescent
	drainedO sync.Once

	npidle    atomic.Int32 // processors in idle
	nspinning atomic.Int32 // workers looking for work while holding a processor
	nworkers  atomic.Int32 // worker goroutines alive

	mu     sync.Mutex // guards the fields below
	idle   []*proc    // processors with no worker
	free   []*proc    // detached processors retired by their owners, for reuse
	spares []*Exec    // workers parked without a processor

	// inbox passes one group from outside the pool to a spinning worker
	// without the global queue's lock.
	inbox atomic.Pointer[Group]

	gmu    sync.Mutex // guards gq
	gq     groupRing  // global queue
	gqlen  atomic.Int32
	handon atomic.Uint64 // processors detached by the monitor
	warned atomic.Uint64 // long-turn warnings logged

	closeOnce sync.Once
	closeDone chan struct{}
	wg        sync.WaitGroup // workers and the monitor

	// execs holds every worker goroutine alive, for Close to report the
	// ones it gives up on; guarded by mu. abandoned is what Close gave up
	// on, written before closeDone is closed.
	execs     map[*Exec]struct{}
	abandoned []AbandonedTurn
	// coarse is the monitor's last look, in Unix nanoseconds: a time
	// that costs an atomic load, for the record of a turn's wait.
	coarse atomic.Int64
}

// cacheLine is the size of a CPU cache line, for padding hot fields apart.
const cacheLine = 64

// New validates cfg and starts a pool. Its workers start on demand; its
// monitor starts now. Stop or Close it to release them.
func New(cfg Config) (*Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:       cfg,
		drained:   make(chan struct{}),
		closeDone: make(chan struct{}),
		closing:   make(chan struct{}),
	}
	all := make([]*proc, cfg.Processors)
	for i := range all {
		all[i] = newProc(i)
		all[i].status.Store(pIdle)
	}
	p.allp.Store(&all)
	// Idle in reverse so that processor 0 is taken first.
	for i := len(all) - 1; i >= 0; i-- {
		p.idle = append(p.idle, all[i])
	}
	p.npidle.Store(int32(len(all)))
	p.coarse.Store(p.now().UnixNano())
	m := newMonitor(p)
	p.wg.Add(1)
	go m.run()
	return p, nil
}

// Config returns the pool's configuration. Any goroutine.
func (p *Pool) Config() Config { return p.cfg }

// NewGroup returns an idle group whose turns run on p. label names it in
// warnings and stats (for a grain activation, its grain ID). Any goroutine.
func (p *Pool) NewGroup(label string) *Group {
	return &Group{pool: p, label: stringLabel(label)}
}

// NewGroupOf is NewGroup for a group labelled by owner.String(), called
// only when the label is read (a warning, a panic, stats). The silo makes
// a group per grain activation, by the million, and rarely reads their
// labels: this spares each one a string. Any goroutine.
func (p *Pool) NewGroupOf(owner fmt.Stringer) *Group {
	return &Group{pool: p, label: owner}
}

// stringLabel is a fixed label.
type stringLabel string

func (l stringLabel) String() string { return string(l) }

// Stop drains the pool gracefully: queued turns run, and so do the turns
// they enqueue, until no group is queued or running and no turn is waiting.
// Then the workers stop. Enqueue keeps accepting turns until then, and
// returns ErrClosed afterwards. If ctx ends first, Stop closes the pool
// (see Close) and returns ctx's error. Stop waits for every goroutine the
// pool started, and may be called again or alongside Close. Any goroutine
// that is not running a turn of this pool.
func (p *Pool) Stop(ctx context.Context) error {
	p.stopping.Store(true)
	if p.quiescent() {
		p.signalDrained()
	}
	select {
	case <-p.drained:
		p.Close()
		return nil
	case <-p.closeDone:
		return nil
	case <-ctx.Done():
		p.Close()
		return ctx.Err()
	}
}

// Close stops the pool at once. Running turns finish; queued turns are
// dropped, and each dropped turn's Task.Done gets ErrClosed; Enqueue returns
// ErrClosed. Close waits for the pool's goroutines, including turns still
// inside Exec.Wait or Exec.Blocking, which continue without a processor once
// their event is signaled or their function returns. Close is idempotent.
// Any goroutine that is not running a turn of this pool.
func (p *Pool) Close() {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		close(p.closing)
		p.mu.Lock()
		spares := p.spares
		p.spares = nil
		for _, pp := range p.idle {
			if pp.parked != nil {
				spares = append(spares, pp.parked)
				pp.parked = nil
			}
		}
		p.mu.Unlock()
		for _, s := range spares {
			s.wake <- struct{}{} // s.p is nil: the spare exits
		}
		p.dropAll()
		if p.waitWorkers() {
			p.dropAll()
		}
		close(p.closeDone)
	})
	<-p.closeDone
}

// waitWorkers waits for the pool's goroutines, up to CloseTimeout when it
// is set. It reports whether they all ended; if not, it has recorded and
// logged the turns it gives up on.
func (p *Pool) waitWorkers() bool {
	d := p.cfg.CloseTimeout
	if d <= 0 {
		p.wg.Wait()
		return true
	}
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d) // the real clock: a test's fake one would never end the wait
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	}
	p.abandoned = p.stuckTurns()
	for _, a := range p.abandoned {
		p.cfg.Logger.Error("activation: a turn still running at close was abandoned; whatever it does from now on is discarded",
			zap.String("group", a.Group),
			zap.String("turn", a.Turn),
			zap.Duration("running", a.Running),
			zap.Bool("waiting", a.Waiting),
			zap.Duration("close_timeout", d),
			zap.String("stack", a.Stack))
	}
	return false
}

// Abandoned returns the turns that Close gave up on because they were
// still running after CloseTimeout: empty if every turn ended in time, or
// before Close has returned. Any goroutine.
func (p *Pool) Abandoned() []AbandonedTurn {
	select {
	case <-p.closeDone:
		return slices.Clone(p.abandoned)
	default:
		return nil
	}
}

func (p *Pool) signalDrained() {
	p.drainedO.Do(func() { close(p.drained) })
}

// An activity stripe counts, for Stop, how often groups became queued or
// running and turns began to wait (inc), and how often they went idle or
// ended their wait (dec). Every inc is followed by exactly one dec, on any
// stripe, so the pool is quiescent when the sums over all stripes are
// equal. Each processor has a stripe and goroutines without one share
// Pool.outside: a single shared counter, moved on every group's idle and
// busy transitions by producers and workers alike, would be a cache miss
// on most transitions (see docs/benchmarks.md#the-groups-hot-path).
type activity struct {
	inc, dec atomic.Int64
	_        [cacheLine - 16]byte
}

// stripe returns the activity stripe for e: its processor's, or the
// shared one when e is nil or holds none. e's own goroutine.
func (p *Pool) stripe(e *Exec) *activity {
	if e != nil && e.p != nil {
		return &e.p.act
	}
	return &p.outside
}

// activate records that a group became queued or running, or a turn began
// to wait. e is the calling worker, or nil. Any goroutine.
func (p *Pool) activate(e *Exec) { p.stripe(e).inc.Add(1) }

// deactivate records that a group went idle or a waiter resumed; while
// stopping, it looks for quiescence. e is the calling worker, or nil.
// Any goroutine.
func (p *Pool) deactivate(e *Exec) {
	p.stripe(e).dec.Add(1)
	if p.stopping.Load() && p.quiescent() {
		p.signalDrained()
	}
}

// quiescent reports whether no group is queued or running and no turn
// waits. It reads every dec before any inc, and both only grow: the decs
// it sums were all done by the moment between the two loops and the incs
// include everything done by then, and since each dec follows its inc,
// equal sums mean that at that moment every inc had had its dec. So a
// true answer is never wrong, and the deactivate that ends the last
// activity sees it. Any goroutine.
func (p *Pool) quiescent() bool {
	dec := p.outside.dec.Load()
	for _, pp := range *p.allp.Load() {
		dec += pp.act.dec.Load()
	}
	// Load allp again: a processor made in between may hold incs.
	inc := p.outside.inc.Load()
	for _, pp := range *p.allp.Load() {
		inc += pp.act.inc.Load()
	}
	return inc == dec
}

// submit makes queued group g runnable. from is the worker submitting it,
// or nil when the caller is not a worker. Any goroutine.
func (p *Pool) submit(from *Exec, g *Group) {
	switch {
	case from != nil && from.p != nil:
		from.p.runqput(p, g, !raceEnabled || rand.IntN(2) == 0)
	case p.nspinning.Load() != 0 && (!raceEnabled || rand.IntN(2) == 0) && p.inbox.CompareAndSwap(nil, g):
		// A spinner is looking, and checks the inbox first. Publish, then
		// look again, as for the global queue: a spinner that stopped
		// before the CAS rechecks the inbox before it parks, or wakep
		// below sees no spinner and wakes a worker.
		p.wakep()
	case p.nspinning.Load() == 0 && p.npidle.Load() > 0 && (!raceEnabled || rand.IntN(2) == 0) && p.handDirect(g):
	default:
		p.globalPut(g)
		p.wakep()
	}
	if p.closed.Load() {
		p.dropAll()
	}
}

// globalPut appends g to the global queue. Any goroutine.
func (p *Pool) globalPut(g *Group) {
	p.gmu.Lock()
	p.gq.push(g)
	p.gqlen.Store(int32(p.gq.n))
	p.gmu.Unlock()
}

// globalGet takes a group from the global queue and moves a fair share of
// the rest into pp's ring. Owner of pp only; pp may be nil.
func (p *Pool) globalGet(pp *proc) *Group {
	if p.gqlen.Load() == 0 {
		return nil
	}
	p.gmu.Lock()
	if p.gq.n == 0 {
		p.gmu.Unlock()
		return nil
	}
	g := p.gq.pop()
	var batch [32]*Group
	n := 0
	if pp != nil {
		n = min(p.gq.n/p.cfg.Processors, len(batch), runqSize/2)
		for i := range n {
			batch[i] = p.gq.pop()
		}
	}
	p.gqlen.Store(int32(p.gq.n))
	p.gmu.Unlock()
	for i := range n {
		pp.runqput(p, batch[i], false)
	}
	return g
}

// wakep starts a spinning worker on an idle processor if there is one and
// no worker is spinning already. Any goroutine.
func (p *Pool) wakep() {
	if p.nspinning.Load() != 0 || p.npidle.Load() == 0 {
		return
	}
	if !p.nspinning.CompareAndSwap(0, 1) {
		return
	}
	p.mu.Lock()
	pp := p.pidlegetLocked()
	if pp == nil {
		p.mu.Unlock()
		p.nspinning.Add(-1)
		return
	}
	e := p.workerForLocked(pp, true)
	p.mu.Unlock()
	p.launch(e)
}

// handDirect gives g to an idle processor's worker through the processor's
// next slot, sparing the global queue and a search. It fails when no
// processor is idle. Any goroutine not holding a processor.
func (p *Pool) handDirect(g *Group) bool {
	p.mu.Lock()
	pp := p.pidlegetLocked()
	if pp == nil {
		p.mu.Unlock()
		return false
	}
	pp.next.Store(g) // no one owns pp until the worker below takes it
	e := p.workerForLocked(pp, false)
	p.mu.Unlock()
	p.launch(e)
	return true
}

// startWorker gives pp to a worker: the one parked on it, a spare, or a new
// one. spinning says whether the worker counts in nspinning already. The
// caller has taken pp out of idle (or owns it). Any goroutine.
func (p *Pool) startWorker(pp *proc, spinning bool) {
	p.mu.Lock()
	e := p.workerForLocked(pp, spinning)
	p.mu.Unlock()
	p.launch(e)
}

// workerForLocked picks the worker that will run pp and gives pp to it; it
// returns nil, leaving pp idle, when the pool is closing. mu held.
func (p *Pool) workerForLocked(pp *proc, spinning bool) *Exec {
	if p.closed.Load() {
		// Closing: put the processor back so Close can drain it.
		p.pidleputLocked(pp)
		if spinning {
			p.nspinning.Add(-1)
		}
		return nil
	}
	pp.status.Store(pRunning)
	var e *Exec
	if pp.parked != nil {
		e, pp.parked = pp.parked, nil
	} else if n := len(p.spares); n > 0 {
		e = p.spares[n-1]
		p.spares[n-1] = nil
		p.spares = p.spares[:n-1]
	} else {
		e = newExec(p)
		p.wg.Add(1)
		p.nworkers.Add(1)
		if p.execs == nil {
			p.execs = map[*Exec]struct{}{}
		}
		p.execs[e] = struct{}{}
	}
	// e is parked or new, so writing its fields here is safe; launch
	// publishes them to it.
	e.p = pp
	e.spinning = spinning
	return e
}

// launch wakes the worker that workerForLocked picked, or starts its
// goroutine. Any goroutine.
func (p *Pool) launch(e *Exec) {
	if e == nil {
		return
	}
	if e.started {
		e.wake <- struct{}{}
		return
	}
	e.started = true
	go e.loop()
}

// pidleremoveLocked takes pp, which is idle, off the idle list. mu held.
func (p *Pool) pidleremoveLocked(pp *proc) {
	for i, q := range p.idle {
		if q == pp {
			last := len(p.idle) - 1
			p.idle[i] = p.idle[last]
			p.idle[last] = nil
			p.idle = p.idle[:last]
			p.npidle.Add(-1)
			pp.parked = nil
			pp.status.Store(pRunning)
			return
		}
	}
	panic("activation: processor missing from the idle list")
}

// pidleputLocked puts pp on the idle list. mu held.
func (p *Pool) pidleputLocked(pp *proc) {
	pp.status.Store(pIdle)
	pp.curGroup.Store(nil)
	p.idle = append(p.idle, pp)
	p.npidle.Add(1)
}

// pidlegetLocked takes a processor off the idle list, or returns nil. mu held.
func (p *Pool) pidlegetLocked() *proc {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	pp := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	p.npidle.Add(-1)
	pp.status.Store(pRunning)
	return pp
}

// pidleget takes an idle processor for the caller's own use, or returns
// nil. A worker parked on it is released: it becomes a spare, or exits if
// there are enough spares. Any goroutine.
func (p *Pool) pidleget() *proc {
	if p.npidle.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	pp := p.pidlegetLocked()
	var exiting *Exec
	if pp != nil && pp.parked != nil {
		w := pp.parked
		pp.parked = nil
		if len(p.spares) < p.cfg.Processors {
			p.spares = append(p.spares, w)
		} else {
			exiting = w
		}
	}
	p.mu.Unlock()
	if exiting != nil {
		exiting.wake <- struct{}{} // with no processor: it exits
	}
	return pp
}

// pidleput returns pp to the idle list, waking a worker if work arrived on
// the global queue meanwhile. Any goroutine holding pp.
func (p *Pool) pidleput(pp *proc) {
	p.mu.Lock()
	p.pidleputLocked(pp)
	p.mu.Unlock()
	if p.queuedOutside() {
		p.wakep()
	}
}

// detach takes the run token away from processor pp, whose owner has been
// in one turn for too long, and gives a fresh processor to another worker.
// The owner keeps pp (it may still push to its ring, which thieves drain)
// until its turn ends and it retires pp. Monitor only.
func (p *Pool) detach(pp *proc) bool {
	if !pp.status.CompareAndSwap(pRunning, pDetached) {
		return false
	}
	p.handon.Add(1)
	p.mu.Lock()
	var np *proc
	if n := len(p.free); n > 0 {
		np = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	} else {
		old := *p.allp.Load()
		np = newProc(len(old))
		all := append(old[:len(old):len(old)], np)
		p.allp.Store(&all)
	}
	p.mu.Unlock()
	p.nspinning.Add(1)
	p.startWorker(np, true)
	return true
}

// retireProc ends e's use of its detached processor: its queued groups move
// to the global queue, and the processor is kept for the next detach. Owner
// only; afterwards e holds no processor.
func (p *Pool) retireProc(e *Exec) {
	pp := e.p
	e.p = nil
	pp.curGroup.Store(nil)
	moved := false
	if g := pp.next.Swap(nil); g != nil {
		p.globalPut(g)
		moved = true
	}
	for {
		g := pp.runqget()
		if g == nil {
			break
		}
		p.globalPut(g)
		moved = true
	}
	pp.status.Store(pFree)
	p.mu.Lock()
	p.free = append(p.free, pp)
	p.mu.Unlock()
	if moved {
		p.wakep()
	}
	if p.closed.Load() {
		p.dropAll()
	}
}

// dropAll drops every group waiting in a run queue, telling each dropped
// turn's owner ErrClosed. Only after the pool closed. Any goroutine.
func (p *Pool) dropAll() {
	if g := p.inbox.Swap(nil); g != nil {
		g.drop()
	}
	for {
		p.gmu.Lock()
		var g *Group
		if p.gq.n > 0 {
			g = p.gq.pop()
		}
		p.gqlen.Store(int32(p.gq.n))
		p.gmu.Unlock()
		if g == nil {
			break
		}
		g.drop()
	}
	var batch [runqSize]*Group
	for _, pp := range *p.allp.Load() {
		for {
			n := pp.runqgrab(&batch, true, true)
			if n == 0 {
				break
			}
			for _, g := range batch[:n] {
				g.drop()
			}
		}
	}
}

// steal takes runnable groups from a random victim into pp's ring and
// returns one to run now, or nil. Owner of pp only.
func (p *Pool) steal(e *Exec, pp *proc) *Group {
	all := *p.allp.Load()
	n := len(all)
	start := int(e.random() % uint64(n))
	for i := range n {
		v := all[(start+i)%n]
		if v == pp {
			continue
		}
		stealNext := v.status.Load() == pDetached || v.stealNext.Load()
		if v.runqhead.Load() == v.runqtail.Load() && (!stealNext || v.next.Load() == nil) {
			continue // nothing to take: skip the batch buffer
		}
		if g := pp.runqsteal(p, v, stealNext); g != nil {
			pp.steals.Store(pp.steals.Load() + 1)
			return g
		}
	}
	return nil
}

// queuedOutside reports whether groups wait outside every processor: on
// the global queue or in the inbox. Any goroutine.
func (p *Pool) queuedOutside() bool {
	return p.gqlen.Load() > 0 || p.inbox.Load() != nil
}

// stealableWork reports whether an idle worker could find a group to run:
// on the global queue, in a ring, or in a next that thieves may take.
// Any goroutine.
func (p *Pool) stealableWork() bool {
	if p.queuedOutside() {
		return true
	}
	for _, pp := range *p.allp.Load() {
		if pp.runqhead.Load() != pp.runqtail.Load() {
			return true
		}
		if pp.next.Load() != nil && (pp.status.Load() == pDetached || pp.stealNext.Load()) {
			return true
		}
	}
	return false
}

// groupRing is an unbounded FIFO of groups: the global queue. gmu held.
type groupRing struct {
	buf  []*Group
	head int
	n    int
}

func (r *groupRing) push(g *Group) {
	if r.n == len(r.buf) {
		nb := make([]*Group, max(64, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = g
	r.n++
}

func (r *groupRing) pop() *Group {
	g := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return g
}

// now is the monitor's clock reading.
func (p *Pool) now() time.Time { return p.cfg.Clock.Now() }

// forget drops e from the workers alive, as its goroutine ends.
func (p *Pool) forget(e *Exec) {
	p.mu.Lock()
	delete(p.execs, e)
	p.mu.Unlock()
}
