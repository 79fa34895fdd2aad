package activation

import (
	"sync/atomic"
	"time"
)

// Processor states. Who owns each transition:
//
//	idle -> running       any goroutine taking it off the idle list (mu held)
//	running -> idle       its owner, parking (mu held)
//	running -> detached   the monitor, when a turn has held it too long
//	detached -> free      its owner, when that turn ends or waits
//	free -> running       the monitor, reusing it for a later detach
const (
	pIdle uint32 = iota
	pRunning
	pDetached
	pFree
)

// runqSize is the capacity of a processor's local ring, as in the Go
// runtime: large enough that overflow to the global queue is rare, small
// enough to steal half of in one pass.
const runqSize = 256

// proc is a processor: a run token with its local run queue.
//
// The ring is single-producer (the owner), multi-consumer (the owner and
// thieves): the owner writes slots and publishes them by storing tail;
// consumers claim slots by advancing head with a CAS, so a consumer that
// read a slot the owner has since reused fails its CAS and retries.
type proc struct {
	id       int
	status   atomic.Uint32
	runqhead atomic.Uint32
	runqtail atomic.Uint32
	runq     [runqSize]atomic.Pointer[Group]
	next     atomic.Pointer[Group]

	// Written by the owner, read by the monitor and Stats.
	runSeq   atomic.Uint64 // group runs (and resumed turns) started here
	curGroup atomic.Pointer[Group]
	steals   atomic.Uint64
	handoffs atomic.Uint64
	turnTime turnTimes // sampled turn durations (turnstats.go)

	// Written by the monitor, read by the owner and thieves.
	preempt   atomic.Bool // the current run is past its quantum
	stealNext atomic.Bool // next has waited for a monitor interval
	// runSince is when the monitor first saw the current run, in Unix
	// nanoseconds, for Close's report of abandoned turns.
	runSince atomic.Int64

	parked *Exec // the worker parked on this idle processor; mu held

	act activity // Stop's activity counts of the workers holding it

	// Monitor only.
	mon struct {
		run      uint64
		runSince time.Time
		warned   bool
	}
	_ [cacheLine]byte // keep neighbouring processors off each other's cache lines
}

func newProc(id int) *proc { return &proc{id: id} }

// runqEmpty reports whether the ring and next look empty. Any goroutine.
func (pp *proc) runqEmpty() bool {
	return pp.runqhead.Load() == pp.runqtail.Load() && pp.next.Load() == nil
}

// runqput makes g runnable on pp: into next when next is true (moving the
// old next to the tail), else at the ring's tail. A full ring sends half of
// itself and g to the global queue. When the ring gains work that another
// worker could run, a spinning worker is woken. Owner only.
func (pp *proc) runqput(p *Pool, g *Group, next bool) {
	if next {
		old := pp.next.Swap(g)
		if old == nil {
			return
		}
		g = old
	}
	for {
		h := pp.runqhead.Load()
		t := pp.runqtail.Load()
		if t-h < runqSize {
			pp.runq[t%runqSize].Store(g)
			pp.runqtail.Store(t + 1)
			p.wakep()
			return
		}
		if pp.runqputSlow(p, g, h, t) {
			return
		}
	}
}

// runqputSlow moves half of a full ring and g to the global queue. It fails
// when a thief moved head meanwhile, and then the ring has room. Owner only.
func (pp *proc) runqputSlow(p *Pool, g *Group, h, t uint32) bool {
	var batch [runqSize/2 + 1]*Group
	n := (t - h) / 2
	for i := range n {
		batch[i] = pp.runq[(h+i)%runqSize].Load()
	}
	if !pp.runqhead.CompareAndSwap(h, h+n) {
		return false
	}
	batch[n] = g
	p.gmu.Lock()
	for _, b := range batch[:n+1] {
		p.gq.push(b)
	}
	p.gqlen.Store(int32(p.gq.n))
	p.gmu.Unlock()
	p.wakep()
	return true
}

// runqget takes the next runnable group from pp's ring, without looking at
// next. Owner only.
func (pp *proc) runqget() *Group {
	for {
		h := pp.runqhead.Load()
		t := pp.runqtail.Load()
		if t == h {
			return nil
		}
		g := pp.runq[h%runqSize].Load()
		if pp.runqhead.CompareAndSwap(h, h+1) {
			return g
		}
	}
}

// runqgrab claims groups from pp's ring into batch: half of them, or all of
// them when all is set; with stealNext, next too when the ring is empty.
// Any goroutine.
func (pp *proc) runqgrab(batch *[runqSize]*Group, stealNext, all bool) uint32 {
	for {
		h := pp.runqhead.Load()
		t := pp.runqtail.Load()
		n := t - h
		if !all {
			n -= n / 2
		}
		if n == 0 {
			if stealNext {
				if g := pp.next.Load(); g != nil && pp.next.CompareAndSwap(g, nil) {
					batch[0] = g
					return 1
				}
			}
			return 0
		}
		if n > runqSize { // head and tail read at different times; retry
			continue
		}
		for i := range n {
			batch[i] = pp.runq[(h+i)%runqSize].Load()
		}
		if pp.runqhead.CompareAndSwap(h, h+n) {
			return n
		}
	}
}

// runqsteal moves half of victim's ring into pp's ring and returns one group
// to run now, or nil. Owner of pp only; pp's ring must be empty.
func (pp *proc) runqsteal(p *Pool, victim *proc, stealNext bool) *Group {
	var batch [runqSize]*Group
	n := victim.runqgrab(&batch, stealNext, false)
	if n == 0 {
		return nil
	}
	g := batch[n-1]
	for _, b := range batch[:n-1] {
		pp.runqput(p, b, false)
	}
	return g
}
