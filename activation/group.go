package activation

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Group states. A group's state changes only by CAS. Who owns each
// transition:
//
//	idle -> queued     the goroutine whose enqueue found it idle; it submits it
//	queued -> running  the worker that took it from a run queue
//	idle -> running    a worker taking it inline (Exec.TryRun) or back after a wait
//	running -> queued  the token holder, yielding with turns left
//	running -> idle    the token holder, finding the queue empty
const (
	groupIdle uint32 = iota
	groupQueued
	groupRunning
)

// A Group is a work-item group: the FIFO of turns of one activation. Its
// turns run one at a time, in order (system turns first), on the pool's
// processors; whoever holds the group's run token runs them. A Group must
// be made with Pool.NewGroup.
//
// The layout is a measured decision (TestGroupLayout keeps it): the fields
// an enqueue writes are packed into the first cache line, so a push to a
// busy group touches that line and the tail segment's, as a channel send
// touches its header and slot; the worker's per-turn fields are on a line
// producers never write, since sharing the lock's line would make each
// per-turn check a cache miss. The figures are in
// docs/benchmarks.md#the-groups-hot-path.
type Group struct {
	// Line 0: written by every enqueue and every batch.
	mu      sync.Mutex
	state   atomic.Uint32
	headSys bool      // the turns being run come from sys; guarded by mu
	app     turnQueue // application turns, its inline slot on line 1; guarded by mu

	// Line 1, after app's inline slot: set once, or rarely.
	// roomc is closed when the application queue drains to a quarter of
	// Config.MaxQueuedTurns, waking EnqueueWait callers; nil when none
	// wait. Guarded by mu.
	roomc chan struct{}
	pool  *Pool
	label fmt.Stringer // String is called only when the label is read

	// Lines 2 and 3: system turns are rare, so their queue shares its lines
	// with the fields the token holder reads and writes per turn.
	sys turnQueue // system turns; guarded by mu
	// sysPending is set when a system turn is queued, so a worker running
	// a batch of application turns stops early for it.
	sysPending atomic.Bool
	// batchPos is the position in the queue of the turn being run, within
	// the batch the token holder peeked: for the monitor.
	batchPos atomic.Int32
	turns    atomic.Uint64
	busy     atomic.Int64 // nanoseconds running turns, sampled by the monitor
	_        [24]byte     // 256 bytes in all: a size class whose objects start on a line
}

// Label returns the label the group was made with. Any goroutine.
func (g *Group) Label() string { return g.label.String() }

// Enqueue appends t to the group's queue from a goroutine that is not
// running a turn of the pool (a turn uses Exec.Enqueue, which keeps the
// work on its processor). It returns ErrClosed after the pool stopped and
// ErrNilTask for a turn without a task; otherwise t will run, or its Done
// will get ErrClosed if the pool is closed first. Any goroutine.
func (g *Group) Enqueue(t Turn) error { return g.enqueue(nil, t, false) }

// EnqueueSystem is Enqueue for a system turn (activation, deactivation,
// other lifecycle work): it runs before every application turn queued on
// the group, and cuts short a batch being run. Any goroutine.
func (g *Group) EnqueueSystem(t Turn) error { return g.enqueue(nil, t, true) }

// GroupStats is a snapshot of a group's counters.
type GroupStats struct {
	Label    string
	QueueLen int           // turns waiting, including one being run
	Turns    uint64        // turns run to completion
	Busy     time.Duration // time running turns, sampled every Config.MonitorInterval
}

// Stats returns the group's counters. Any goroutine.
func (g *Group) Stats() GroupStats {
	return GroupStats{
		Label:    g.Label(),
		QueueLen: g.queueLen(),
		Turns:    g.turns.Load(),
		Busy:     time.Duration(g.busy.Load()),
	}
}

// queueLen returns the number of queued turns, including one being run.
// Any goroutine.
func (g *Group) queueLen() int {
	g.mu.Lock()
	n := g.sys.n + g.app.n
	g.mu.Unlock()
	return n
}

func (g *Group) enqueue(from *Exec, t Turn, system bool) error {
	if t.Task == nil {
		return ErrNilTask
	}
	if g.pool.closed.Load() {
		return ErrClosed
	}
	g.push(from, t, system)
	return nil
}

// push appends t and submits the group if it was idle. It does not check
// whether the pool is closed: a closed pool drops what is submitted.
// Any goroutine.
func (g *Group) push(from *Exec, t Turn, system bool) {
	g.mu.Lock()
	if system {
		g.sys.push(t)
		g.sysPending.Store(true)
	} else {
		g.app.push(t)
	}
	g.mu.Unlock()
	g.maybeSubmit(from)
}

// pushResume appends the continuation turn of a waiting turn, whose wait
// ended. A turn that ends the wait goes first on its processor, as for
// any push, unless that processor has other groups queued: then it goes
// behind them, so that a turn that awaits many calls (a fan-out) is
// resumed once they have run rather than once per reply, each costing two
// goroutine switches. Any goroutine.
func (g *Group) pushResume(from *Exec, t Turn) {
	g.mu.Lock()
	g.app.push(t)
	g.mu.Unlock()
	g.maybeSubmitBehind(from, from != nil && from.p != nil && !from.p.runqEmpty())
}

// maybeSubmit submits the group if it is idle, after a push. Any goroutine.
func (g *Group) maybeSubmit(from *Exec) { g.maybeSubmitBehind(from, false) }

// maybeSubmitBehind is maybeSubmit, putting the group at the tail of
// from's processor's run queue rather than first when behind is set.
func (g *Group) maybeSubmitBehind(from *Exec, behind bool) {
	// Load before CAS: a busy group is the common case, and a failing CAS
	// would still take its cache line exclusively.
	if g.state.Load() != groupIdle || !g.state.CompareAndSwap(groupIdle, groupQueued) {
		return
	}
	g.pool.activate(from)
	if !behind {
		g.pool.submit(from, g)
		return
	}
	from.p.runqput(g.pool, g, false)
	if g.pool.closed.Load() {
		g.pool.dropAll()
	}
}

// EnqueueWait is Enqueue with flow control, for a goroutine outside the
// pool that feeds the group from an outside source such as a network
// stream. While the group holds Config.MaxQueuedTurns application turns or
// more, EnqueueWait waits until it has drained to a quarter of that, then
// queues t. Waiting keeps the feeder from outrunning the workers that drain
// the group (it would otherwise take their cores and grow the queue without
// bound), and passes the pressure back to the source, as a full channel
// would. If ctx ends first it returns ctx.Err(), and if the pool closes
// first ErrClosed; either way t was not queued.
//
// Never call it from a turn, or from inside Exec.Blocking: the group that
// must drain could be the caller's own, whose token the caller holds.
// Turns use Exec.Enqueue, which never waits. Any other goroutine.
func (g *Group) EnqueueWait(ctx context.Context, t Turn) error {
	if t.Task == nil {
		return ErrNilTask
	}
	limit := g.pool.cfg.MaxQueuedTurns
	for {
		if g.pool.closed.Load() {
			return ErrClosed
		}
		g.mu.Lock()
		if limit == 0 || g.app.n < limit {
			g.app.push(t)
			g.mu.Unlock()
			g.maybeSubmit(nil)
			return nil
		}
		if g.roomc == nil {
			g.roomc = make(chan struct{})
		}
		room := g.roomc
		g.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-g.pool.closing:
			return ErrClosed
		}
	}
}

// peekLocked picks the next turn, system turns first. mu held.
func (g *Group) peekLocked() (Turn, bool) {
	if g.sys.n > 0 {
		g.headSys = true
		return g.sys.peek()
	}
	g.headSys = false
	return g.app.peek()
}

// headLocked returns the turn being run, or a zero Turn if the queue is
// empty. mu held.
func (g *Group) headLocked() Turn {
	var t Turn
	if g.headSys {
		t, _ = g.sys.peek()
	} else {
		t, _ = g.app.peek()
	}
	return t
}

// popHeadLocked removes m turns from the head of the queue being run, and
// lets EnqueueWait callers go on once the application queue is down to a
// quarter of the mark. The emptied segments are chained in front of freed
// and returned, for releaseSegments once mu is released. mu held.
func (g *Group) popHeadLocked(m int, freed *segment) *segment {
	if g.headSys {
		return g.sys.popN(m, freed)
	}
	freed = g.app.popN(m, freed)
	if g.roomc != nil && g.app.n <= g.pool.cfg.MaxQueuedTurns/4 {
		close(g.roomc)
		g.roomc = nil
	}
	return freed
}

// peekBatch copies the turns to run next into buf without removing them:
// one system turn, or up to len(buf) application turns. They stay queued
// until they have run, so a turn that waits mid-batch leaves the rest in
// line, and the monitor can find the one running. If the queue is empty,
// the group goes idle before the lock is released (as in complete) and
// peekBatch returns 0. Token holder only.
func (g *Group) peekBatch(e *Exec, buf []Turn) int {
	g.mu.Lock()
	g.batchPos.Store(0)
	if g.sys.n > 0 {
		g.headSys = true
		buf[0], _ = g.sys.peek()
		g.mu.Unlock()
		return 1
	}
	g.sysPending.Store(false)
	g.headSys = false
	k := min(len(buf), g.app.n)
	front := g.app.front()
	if k == 0 && !g.state.CompareAndSwap(groupRunning, groupIdle) {
		g.mu.Unlock()
		panic("activation: group " + g.Label() + " drained by a goroutine not holding its token")
	}
	g.mu.Unlock()
	if k == 0 {
		g.pool.deactivate(e)
		return 0
	}
	// Copy outside the lock: the reads miss the cache, and producers
	// should not wait for them.
	front.copy(buf[:k])
	return k
}

// completeN removes the m turns that just ran and reports whether more are
// queued; if none are, the group goes idle, as in complete. Token holder
// only.
func (g *Group) completeN(e *Exec, m int) bool {
	g.mu.Lock()
	freed := g.popHeadLocked(m, nil)
	more := g.sys.n+g.app.n > 0
	g.finishLocked(e, more)
	releaseSegments(freed)
	return more
}

// finishLocked releases g.mu after a completion; when nothing more is
// queued (more is false) the group goes idle first, so a pusher after us
// sees idle and submits it. Token holder only, with g.mu held.
func (g *Group) finishLocked(e *Exec, more bool) {
	if !more && !g.state.CompareAndSwap(groupRunning, groupIdle) {
		g.mu.Unlock()
		panic("activation: group " + g.Label() + " completed by a goroutine not holding its token")
	}
	g.mu.Unlock()
	if !more {
		g.pool.deactivate(e)
	}
}

// complete removes the turn that just ran and returns the next one. When
// there is none, the group goes idle before the lock is released, so a
// pusher after us sees idle and submits it: the token is gone. Token
// holder only.
func (g *Group) complete(e *Exec) (Turn, bool) {
	g.mu.Lock()
	freed := g.popHeadLocked(1, nil)
	t, ok := g.peekLocked()
	g.finishLocked(e, ok)
	releaseSegments(freed)
	return t, ok
}

// acquireIdle takes the token of an idle group with an empty queue and
// makes t its head: the entry that stands for a turn run inline, or for a
// waiting turn taken back directly. The emptiness check and the push are
// one critical section, so a turn pushed concurrently is either seen here
// (then the group is submitted for it and acquireIdle fails) or queued
// behind t. Any worker.
func (g *Group) acquireIdle(from *Exec, t Turn) bool {
	if g.state.Load() != groupIdle || !g.state.CompareAndSwap(groupIdle, groupRunning) {
		return false
	}
	g.pool.activate(from)
	g.mu.Lock()
	if g.sys.n+g.app.n != 0 {
		g.mu.Unlock()
		g.yield(from) // a turn slipped in: it runs first, scheduled normally
		return false
	}
	g.batchPos.Store(0)
	g.app.push(t)
	g.headSys = false
	g.mu.Unlock()
	return true
}

// release gives up the token, submitting the group again if it has turns.
// Token holder only.
func (g *Group) release(from *Exec) {
	if g.queueLen() != 0 {
		g.yield(from)
		return
	}
	if g.becomeIdle(from) {
		g.yield(from)
	}
}

// becomeIdle moves a running group with an empty queue to idle. It returns
// true if turns arrived meanwhile and the caller has the token again (the
// group is running). Token holder only.
func (g *Group) becomeIdle(e *Exec) bool {
	if !g.state.CompareAndSwap(groupRunning, groupIdle) {
		panic("activation: group " + g.Label() + " released by a goroutine not holding its token")
	}
	g.pool.deactivate(e)
	// A pusher whose critical section came after our CAS sees idle and
	// submits the group itself; one whose section came before is seen here.
	if g.queueLen() == 0 || !g.state.CompareAndSwap(groupIdle, groupRunning) {
		return false
	}
	g.pool.activate(e)
	return true
}

// yield puts a running group with turns left back in line. Token holder only.
func (g *Group) yield(from *Exec) {
	if !g.state.CompareAndSwap(groupRunning, groupQueued) {
		panic("activation: group " + g.Label() + " yielded by a goroutine not holding its token")
	}
	g.pool.submit(from, g)
}

// yieldGlobal puts a running group at the back of the global queue, behind
// every group waiting there: the end of a quantum. Token holder only.
func (g *Group) yieldGlobal() {
	if !g.state.CompareAndSwap(groupRunning, groupQueued) {
		panic("activation: group " + g.Label() + " yielded by a goroutine not holding its token")
	}
	g.pool.globalPut(g)
	g.pool.wakep()
	if g.pool.closed.Load() {
		g.pool.dropAll()
	}
}

// drop discards the turns of a queued group of a closed pool, telling each
// owner ErrClosed. The caller took g from a run queue. Any goroutine.
func (g *Group) drop() {
	if !g.state.CompareAndSwap(groupQueued, groupRunning) {
		panic("activation: dropping group " + g.Label() + " that is not queued")
	}
	for {
		g.dropTurns(nil)
		if !g.becomeIdle(nil) {
			return
		}
	}
}

// dropTurns discards every queued turn. Token holder only.
func (g *Group) dropTurns(e *Exec) {
	for {
		g.mu.Lock()
		t, ok := g.peekLocked()
		var freed *segment
		if ok {
			freed = g.popHeadLocked(1, nil)
		}
		g.mu.Unlock()
		releaseSegments(freed)
		if !ok {
			return
		}
		t.Task.Done(e, ErrClosed)
	}
}
