package local

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/jonboulle/clockwork"
)

// timerWheelSlots is the grain-timer wheel's size: with the default
// resolution its span is about a second, so a timer of a period up to that
// shares its slot with no timer of a later turn of the wheel.
const TimerWheelSlots = 1024

// timerBatchMax bounds the ticks one batch turn fires, so that a burst
// of timers due together, such as many registered at once, makes several
// turns that other processors can take rather than one long one.
const TimerBatchMax = 512

// never is the due time of nothing: a slot's min when it is empty, the
// wheel's armed time when no clock timer is set.
const Never = time.Duration(math.MaxInt64)

// TimerWheel drives the silo's grain timers. It is a hashed timing wheel:
// a timer is linked into the slot of the tick (TimerResolution) it is due
// in, and a sweeper goroutine, woken by one clock timer, collects every
// timer due by then from the slots of the ticks that passed and hands
// them, outside the slot locks, to one turn on the pool (timerBatch),
// which fires their ticks: it runs short ones inline (tickInlineMax) and
// queues the others on its own worker's run queue.
//
// The wheel costs a link and an unlink under an uncontended slot lock per
// tick, and one wake-up per resolution at most while timers are due,
// where a clock timer per grain timer would cost a goroutine and a
// runtime-timer heap operation per tick and wake a parked worker for each
// (docs/benchmarks.md#the-timer-wheel). Firing the ticks from a turn
// takes their call records from that worker's processor's pool and puts
// queued ticks on its own run queue, rather than through the pool's
// global queue.
//
// The sweeper does not tick: the clock timer is armed for the earliest
// due time linked, and not at all while no timer is linked, so an idle
// silo does not wake. Each slot keeps a lower bound of its timers' due
// times (min), and a bitmap marks the slots that hold any, so finding the
// next wake-up looks at a few words and slots, and a sweep passes over a
// slot whose timers are all of later turns of the wheel without walking
// it; a timer due later than the wheel's span waits in its slot, checked
// by its due time, not counted in rounds. With the real clock a wake-up is
// rounded up to the end of its tick, so the timers due in one tick are
// collected together, up to one resolution late; with a fake clock it is
// the exact due time, since tests advance the clock by exactly that.
type TimerWheel struct {
	s     *Runtime
	Res   time.Duration
	Exact bool // wake at the due time itself, not the end of its tick
	// InlineMax is tickInlineMax. A test may set it before it makes any
	// timer, to say which ticks are short whatever -race costs them.
	InlineMax time.Duration

	// swept is the last tick whose slot the sweeper visited once that
	// tick had passed: every timer due in it or before was collected. It
	// is stored under that slot's lock, so a link into the slot sees it.
	swept atomic.Int64
	slots [TimerWheelSlots]timerSlot
	busy  [TimerWheelSlots / 64]atomic.Uint64 // a bit per slot that holds a timer
	// soon holds the timers linked with a due time in a tick already
	// swept; every sweep empties it.
	soon timerSlot

	// armed is when the clock timer fires, as a time since the silo's
	// epoch, or never. Stored under armMu; read without it by linkers,
	// which take armMu only to arm it earlier.
	ArmMu  sync.Mutex
	Armed  atomic.Int64
	clk    clockwork.Timer
	Halted bool // armMu held

	// group runs the batches' turns.
	group *activation.Group

	// Sweeper only.
	sweeps uint64

	freeMu sync.Mutex
	free   []*timerBatch // batches whose turns ended

	stop chan struct{}
	Done chan struct{}
}

// timerSlot is a list of linked timers. head and the timers' links are
// guarded by mu; min is written under mu and read without it.
type timerSlot struct {
	mu   sync.Mutex
	head *grainTimer
	// min is at most the due time of every timer linked here, or never
	// when none is. Unlinking does not raise it: a stale min only wakes
	// the sweeper early once, and the visit recomputes it.
	min atomic.Int64
}

func (w *TimerWheel) init(s *Runtime, res time.Duration) {
	w.s, w.Res, w.Exact, w.InlineMax = s, res, !s.realClock, tickInlineMax
	w.swept.Store(int64(s.Since()/res) - 1)
	for i := range w.slots {
		w.slots[i].min.Store(int64(Never))
	}
	w.soon.min.Store(int64(Never))
	w.Armed.Store(int64(Never))
	w.clk = s.Clock.NewTimer(time.Hour)
	w.clk.Stop()
	w.group = s.Pool.NewGroup("timer wheel")
	w.stop, w.Done = make(chan struct{}), make(chan struct{})
}

// link links t, due at due (a time since the silo's epoch), arming the
// clock if t is due before it fires. t must not be linked. t.a.mu held.
func (w *TimerWheel) link(t *grainTimer, due time.Duration) {
	tick := int64(due / w.Res)
	i := uint64(tick) % TimerWheelSlots
	sl := &w.slots[i]
	sl.mu.Lock()
	// The sweeper stores swept under the lock of the swept tick's slot,
	// so a tick it swept is seen here, and a timer linked here before
	// that is seen by the sweep.
	if tick <= w.swept.Load() {
		sl.mu.Unlock()
		sl = &w.soon
		sl.mu.Lock()
		t.wsoon = true
	} else {
		t.wsoon = false
		// Read first: links from every worker share these words.
		if bit := uint64(1) << (i % 64); w.busy[i/64].Load()&bit == 0 {
			w.busy[i/64].Or(bit)
		}
	}
	t.due = due
	t.wslot, t.wprev, t.wnext = sl, nil, sl.head
	if sl.head != nil {
		sl.head.wprev = t
	}
	sl.head = t
	if int64(due) < sl.min.Load() {
		sl.min.Store(int64(due))
	}
	sl.mu.Unlock()
	// After the link: a sweep that began re-arming before this load sees
	// the link (see rearm).
	if wake := w.WakeAt(due); int64(wake) < w.Armed.Load() {
		w.arm(wake)
	}
}

// unlink unlinks t if it is linked; after it returns the wheel no longer
// fires t unless it is linked again. A sweep may have collected t already
// and fire it yet: Stop and Change tell fireFromWheel. t.a.mu held.
func (w *TimerWheel) unlink(t *grainTimer) {
	sl := &w.soon
	i := uint64(t.due/w.Res) % TimerWheelSlots
	if !t.wsoon {
		sl = &w.slots[i]
	}
	sl.mu.Lock()
	if t.wslot == sl { // else not linked, or collected by a sweep
		w.unlinkLocked(sl, t, i)
	}
	sl.mu.Unlock()
}

// relink links t again, due at due. t.a.mu held.
func (w *TimerWheel) relink(t *grainTimer, due time.Duration) {
	w.unlink(t)
	w.link(t, due)
}

// unlinkLocked takes t out of sl, the slot of index i (unless sl is
// soon), clearing the slot's bit when it empties. sl.mu held.
func (w *TimerWheel) unlinkLocked(sl *timerSlot, t *grainTimer, i uint64) {
	if t.wprev != nil {
		t.wprev.wnext = t.wnext
	} else {
		sl.head = t.wnext
	}
	if t.wnext != nil {
		t.wnext.wprev = t.wprev
	}
	t.wslot, t.wnext, t.wprev = nil, nil, nil
	if sl.head == nil {
		sl.min.Store(int64(Never))
		if sl != &w.soon {
			w.busy[i/64].And(^(1 << (i % 64)))
		}
	}
}

// WakeAt is when the sweeper should wake for a timer due at due.
func (w *TimerWheel) WakeAt(due time.Duration) time.Duration {
	if w.Exact {
		return due
	}
	tick := due / w.Res
	if tick*w.Res < due {
		tick++
	}
	return tick * w.Res
}

// arm sets the clock timer to fire at wake, unless it fires before.
func (w *TimerWheel) arm(wake time.Duration) {
	w.ArmMu.Lock()
	if int64(wake) < w.Armed.Load() && !w.Halted {
		w.Armed.Store(int64(wake))
		for {
			// A timer is set for a duration, not a time: had a test moved
			// a fake clock on between the read and the Reset, the timer
			// would fire that much late, so set it again.
			now := w.s.Since()
			w.clk.Reset(wake - now)
			if !w.Exact || w.s.Since() == now {
				break
			}
		}
	}
	w.ArmMu.Unlock()
}

// run is the sweeper. Owned by Start; stopped by halt.
func (w *TimerWheel) run() {
	defer close(w.Done)
	for {
		select {
		case <-w.stop:
			return
		case <-w.clk.Chan():
		}
		w.sweep()
	}
}

// sweep collects the timers due by now, fires them, and re-arms the clock
// for the earliest one left. Sweeper only.
func (w *TimerWheel) sweep() {
	now := w.s.Since()
	tick := int64(now / w.Res)
	from := w.swept.Load() + 1
	if tick-from >= TimerWheelSlots {
		from = tick - TimerWheelSlots + 1 // every slot gets visited once
	}
	w.sweeps++
	b := w.getBatch()
	b.now = now
	for k := from; k <= tick; k++ {
		// Tick k < tick has passed: it is swept. The current tick is
		// visited again by the next sweep, for the timers due later in it.
		b.ts = w.collect(&w.slots[uint64(k)%TimerWheelSlots], uint64(k)%TimerWheelSlots, k, k < tick, now, b.ts)
	}
	b.ts = w.collect(&w.soon, 0, 0, false, now, b.ts)
	for len(b.ts) > TimerBatchMax {
		rest := w.getBatch()
		rest.now = now
		rest.ts = append(rest.ts, b.ts[TimerBatchMax:]...)
		clear(b.ts[TimerBatchMax:])
		b.ts = b.ts[:TimerBatchMax]
		w.dispatch(b)
		b = rest
	}
	w.dispatch(b)
	w.rearm(tick)
}

// dispatch queues b's turn. Sweeper only.
func (w *TimerWheel) dispatch(b *timerBatch) {
	switch {
	case len(b.ts) == 0:
		w.putBatch(b)
	case w.group.Enqueue(activation.Turn{Name: "timer ticks", Task: b}) != nil:
		b.Done(nil, activation.ErrClosed) // the ticks fail as they are queued
	}
}

// timerBatch is a sweep's due timers: its turn fires their ticks.
type timerBatch struct {
	w    *TimerWheel
	now  time.Duration // the sweep's time
	ts   []firing
	next int // ts[next:] are not fired yet
}

// firing is a timer a sweep collected, with its Change count then.
type firing struct {
	t       *grainTimer
	changes uint32
}

// Run fires the timers' ticks, running short ones inline for up to
// tickInlineBudget. e is nil when the pool has closed.
func (b *timerBatch) Run(e *activation.Exec) {
	now := monoNow()
	until := now + tickInlineBudget
	stale := false // ticks were queued since now was read
	for b.next < len(b.ts) {
		f := b.ts[b.next]
		b.next++
		if stale && f.t.mode.Load() == tickInline {
			now, stale = monoNow(), false
		}
		if !f.t.fireFromWheel(e, f.changes, b.now, e != nil && now < until) {
			stale = true
			continue
		}
		// One clock read per inline tick times it and the budget.
		end := monoNow()
		if end-now > b.w.InlineMax {
			// It waited or ran long, holding back the ticks after it:
			// its ticks are queued from now on, and those after it are
			// due from the time they are fired.
			f.t.mode.Store(tickQueued)
			b.now = b.w.s.Since()
		}
		now = end
	}
}

// Done fires what Run did not, when the pool dropped the turn (its ticks
// then fail as they are queued) or a fire panicked, and recycles the
// batch.
func (b *timerBatch) Done(e *activation.Exec, _ error) {
	b.Run(e)
	b.w.putBatch(b)
}

func (w *TimerWheel) getBatch() *timerBatch {
	w.freeMu.Lock()
	defer w.freeMu.Unlock()
	if n := len(w.free); n > 0 {
		b := w.free[n-1]
		w.free = w.free[:n-1]
		return b
	}
	return &timerBatch{w: w}
}

func (w *TimerWheel) putBatch(b *timerBatch) {
	clear(b.ts)
	b.ts, b.next = b.ts[:0], 0
	w.freeMu.Lock()
	if len(w.free) < 4 && cap(b.ts) <= 2*TimerBatchMax { // after a burst, let the rest go
		w.free = append(w.free, b)
	}
	w.freeMu.Unlock()
}

// collect unlinks the timers of sl (the slot of index i) due by now and
// appends them to batch; when swept, it first records tick k as swept.
// A timer linked again during the sweep and collected twice is appended
// once. Sweeper only.
func (w *TimerWheel) collect(sl *timerSlot, i uint64, k int64, swept bool, now time.Duration, batch []firing) []firing {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if swept {
		w.swept.Store(k)
	}
	if sl.min.Load() > int64(now) {
		return batch // nothing due yet, maybe nothing at all
	}
	m := Never
	for t := sl.head; t != nil; {
		next := t.wnext
		if t.due <= now {
			w.unlinkLocked(sl, t, i)
			if t.wsweep != w.sweeps {
				t.wsweep = w.sweeps
				batch = append(batch, firing{t, t.changes.Load()})
			}
		} else {
			m = min(m, t.due)
		}
		t = next
	}
	if sl.head != nil {
		sl.min.Store(int64(m))
	}
	return batch
}

// rearm arms the clock for the earliest timer linked after a sweep at
// tick, or leaves it unarmed when none is. Sweeper only.
func (w *TimerWheel) rearm(tick int64) {
	// armed reads never while the slots are read, so a timer linked
	// meanwhile arms the clock itself; one linked before is seen here.
	w.ArmMu.Lock()
	if w.Halted {
		w.ArmMu.Unlock()
		return
	}
	w.Armed.Store(int64(Never))
	w.ArmMu.Unlock()
	if next := w.earliest(tick); next != Never {
		w.arm(w.WakeAt(next))
	}
}

// earliest is a lower bound of the due times of the timers linked, or
// never when none is. Every timer in the slot of tick k (from tick on, in
// the wheel's next turn) is due in tick k or later, so the first slot
// whose min falls in its own tick ends the search. Sweeper only.
func (w *TimerWheel) earliest(tick int64) time.Duration {
	m := time.Duration(w.soon.min.Load())
	start := uint64(tick) % TimerWheelSlots
	for n := uint64(0); n < TimerWheelSlots; {
		i := (start + n) % TimerWheelSlots
		word := w.busy[i/64].Load() >> (i % 64)
		if word == 0 { // no slot linked in the rest of this word
			n += 64 - i%64
			continue
		}
		skip := uint64(bits.TrailingZeros64(word))
		n += skip
		if n >= TimerWheelSlots {
			break
		}
		i = (start + n) % TimerWheelSlots
		slotMin := time.Duration(w.slots[i].min.Load())
		m = min(m, slotMin)
		if slotMin < time.Duration(tick+int64(n)+1)*w.Res {
			break
		}
		n++
	}
	return m
}

// halt stops the sweeper and waits for it. Timers still linked stay so;
// their activations have ended or are ending.
func (w *TimerWheel) halt() {
	w.ArmMu.Lock()
	w.Halted = true
	w.Armed.Store(math.MinInt64) // links arm nothing
	w.clk.Stop()
	w.ArmMu.Unlock()
	close(w.stop)
	<-w.Done
}
