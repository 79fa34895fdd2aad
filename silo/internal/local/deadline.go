package local

import (
	"sync"
	"sync/atomic"
	"time"
)

// wheelSlots is the wheel's size: a call due within wheelSlots ticks is
// visited once, at its tick; one due later is passed over once per turn of
// the wheel until its round comes.
const wheelSlots = 512

// timeoutWheel expires calls whose callers wait past their deadline. It is
// a hashed timing wheel: a call is linked into the slot of the tick it is
// due in, and a sweeper goroutine visits one slot per tick. A call costs
// two uncontended slot locks (link, unlink), where a runtime timer per call
// would cost a heap insertion, a deletion and two clock reads on every
// call (docs/benchmarks.md#the-timeout-wheel).
//
// The price is precision: a call expires up to one Resolution after its
// deadline. The sweeper's ticks also keep a coarse clock (now), which
// callers read instead of the real one to compute deadlines; a deadline
// taken from it is up to one Resolution early. Both are far inside the
// slack of a response timeout, and a caller's context deadline is exact:
// callers wait on their context too.
type timeoutWheel struct {
	s     *Runtime
	res   time.Duration
	now   atomic.Int64 // Silo.since() at the last tick, in nanoseconds
	swept atomic.Int64 // the last tick whose slot the sweeper visited
	slots [wheelSlots]wheelSlot

	stop chan struct{}
	done chan struct{}
}

type wheelSlot struct {
	mu   sync.Mutex
	head *Call
	_    [48]byte // with mu and head, one slot per 64-byte cache line
}

func (w *timeoutWheel) init(s *Runtime, res time.Duration) {
	w.s, w.res = s, res
	w.now.Store(int64(s.Since()))
	w.swept.Store(int64(w.coarseNow() / res))
	w.stop, w.done = make(chan struct{}), make(chan struct{})
}

// coarseNow is the silo's time at the last tick. Any goroutine.
func (w *timeoutWheel) coarseNow() time.Duration { return time.Duration(w.now.Load()) }

func (w *timeoutWheel) slotOf(due time.Duration) *wheelSlot {
	return &w.slots[uint64(due/w.res)%wheelSlots]
}

// add links c. The wheel holds no reference of its own: the sweeper
// settles an expired call under its slot's lock, and the caller unlinks
// (remove) before it lets the record go, so the record outlives the
// sweeper's use of it. A call due in a tick whose slot was already
// visited is settled at once: it is due within one Resolution, if not
// overdue. Caller's goroutine.
func (w *timeoutWheel) add(c *Call) {
	sl := w.slotOf(c.Due)
	sl.mu.Lock()
	// The sweeper marks a tick swept under its slot's lock, so this read
	// and the visit are ordered.
	if int64(c.Due/w.res) <= w.swept.Load() {
		sl.mu.Unlock()
		c.Settle(nil, nil, DeadlineError(c))
		return
	}
	c.wslot, c.wnext, c.wprev = sl, sl.head, nil
	if sl.head != nil {
		sl.head.wprev = c
	}
	sl.head = c
	sl.mu.Unlock()
}

// remove unlinks c unless the sweeper expired it. After it returns the
// sweeper no longer touches c. Caller's goroutine, before it releases c.
func (w *timeoutWheel) remove(c *Call) {
	sl := w.slotOf(c.Due)
	sl.mu.Lock()
	if c.wslot != sl { // expired, or settled at once by add
		sl.mu.Unlock()
		return
	}
	sl.unlinkLocked(c)
	sl.mu.Unlock()
}

func (sl *wheelSlot) unlinkLocked(c *Call) {
	if c.wprev != nil {
		c.wprev.wnext = c.wnext
	} else {
		sl.head = c.wnext
	}
	if c.wnext != nil {
		c.wnext.wprev = c.wprev
	}
	c.wslot, c.wnext, c.wprev = nil, nil, nil
}

// run is the sweeper. Owned by Start; stopped by halt.
func (w *timeoutWheel) run() {
	defer close(w.done)
	t := w.s.Clock.NewTicker(w.res)
	defer t.Stop()
	last := w.coarseNow() / w.res
	for {
		select {
		case <-w.stop:
			return
		case <-t.Chan():
		}
		now := w.s.Since()
		w.now.Store(int64(now))
		tick := now / w.res
		if tick-last > wheelSlots {
			last = tick - wheelSlots // every slot gets visited once
		}
		for ; last < tick; last++ {
			w.expire(last + 1)
		}
	}
}

// expire settles the calls due in tick, which have the tick's slot;
// calls of later turns of the wheel stay. Sweeper only.
func (w *timeoutWheel) expire(tick time.Duration) {
	sl := &w.slots[uint64(tick)%wheelSlots]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	w.swept.Store(int64(tick))
	for c := sl.head; c != nil; {
		next := c.wnext
		if c.Due/w.res <= tick {
			sl.unlinkLocked(c)
			// Under the lock: the caller may free c once it is unlinked
			// and the lock is free. Settling never blocks.
			c.Settle(nil, nil, DeadlineError(c))
		}
		c = next
	}
}

// halt stops the sweeper and waits for it. Calls still linked keep their
// references; their callers remove them when their replies come.
func (w *timeoutWheel) halt() {
	close(w.stop)
	<-w.done
}
