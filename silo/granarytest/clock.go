package granarytest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// drainGrace is how long a fired one-shot timer whose tick was received,
// but which its owner neither set again nor stopped, keeps Advance
// waiting: the time for its owner to act on the tick. A loop that re-arms
// its timer after each tick (the reminder service) is seen to be done at
// once; one that has nothing left to arm (the grain-timer wheel with no
// timer left, which a silo hook covers besides) or a select that took
// another case costs this much real time, once.
const drainGrace = 2 * time.Millisecond

// afterGrace is how long a tick of After that no one receives keeps
// Advance waiting: the goroutine that waits on it receives it at once,
// and one whose select took another case never will.
const afterGrace = 20 * time.Millisecond

// fakeClock is the cluster's clock: a clockwork.Clock that moves only in
// Advance, and that knows every timer, ticker and callback on it. That
// lets Advance step from one due timer to the next and tell when what a
// step fired has been taken up, which clockwork's FakeClock cannot say.
//
// One-shot timers (NewTimer, After, Sleep, AfterFunc) are the steps:
// each fires at its own time. Tickers are not: at each step every ticker
// due fires once, and the ticks it missed are dropped, as a real ticker
// drops the ticks of a slow reader. So the runtime's sweeps (call
// timeouts every 10 ms, say) do not turn an hour into 360 000 steps.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter // armed
	// fired are the channel waiters whose tick is not yet seen taken up.
	fired []*fakeWaiter
	// running counts AfterFunc callbacks that have not returned.
	running int
	// version moves on every change to the waiters, so a settle can tell
	// that nothing happened between two looks.
	version uint64
}

// fakeWaiter is a timer, a ticker or an AfterFunc callback. Fields under
// fakeClock.mu.
type fakeWaiter struct {
	c      *fakeClock
	exp    time.Time
	period time.Duration  // a ticker's, 0 for a timer
	ch     chan time.Time // nil for AfterFunc
	fn     func()
	armed  bool

	// A fired channel waiter is pending until its tick is taken up: the
	// channel is empty and (for a timer) its owner set it again or
	// stopped it, or drainGrace passed since it was seen empty.
	pending  bool
	rearmed  bool
	after    bool      // made by After, which no one can stop
	seen     time.Time // real time its channel was first seen as it is
	seenFull bool
}

func newFakeClock(start time.Time) *fakeClock { return &fakeClock{now: start} }

var (
	_ clockwork.Clock  = (*fakeClock)(nil)
	_ clockwork.Timer  = (*fakeTimer)(nil)
	_ clockwork.Ticker = (*fakeTicker)(nil)
)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *fakeClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// After is NewTimer(d).Chan(). A tick that no one receives, because the
// select that waited on it took another case, keeps Advance waiting for
// afterGrace.
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	w := &fakeWaiter{c: c, ch: make(chan time.Time, 1), after: true}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked(w, d)
	return w.ch
}

// Sleep blocks until Advance has moved the clock on by d.
func (c *fakeClock) Sleep(d time.Duration) { <-c.After(d) }

func (c *fakeClock) NewTimer(d time.Duration) clockwork.Timer {
	w := &fakeWaiter{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked(w, d)
	return (*fakeTimer)(w)
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	w := &fakeWaiter{c: c, fn: f}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked(w, d)
	return (*fakeTimer)(w)
}

// NewTicker panics for d <= 0, as time.NewTicker does.
func (c *fakeClock) NewTicker(d time.Duration) clockwork.Ticker {
	if d <= 0 {
		panic(fmt.Sprintf("granarytest: NewTicker with non-positive period %v", d))
	}
	w := &fakeWaiter{c: c, ch: make(chan time.Time, 1), period: d}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked(w, d)
	return (*fakeTicker)(w)
}

// armLocked sets w to fire d from now; a timer of d <= 0 fires at once.
// A tick still in w's channel is dropped, as a real timer's or ticker's
// Reset drops a stale one since Go 1.23, so its owner never reads an
// early tick, and a tick that no one will read does not keep Advance
// waiting (rearmed settles it). mu held.
func (c *fakeClock) armLocked(w *fakeWaiter, d time.Duration) {
	c.version++
	c.disarmLocked(w)
	w.drain()
	w.rearmed = true
	if d <= 0 && w.period == 0 {
		c.fireLocked(w)
		return
	}
	w.exp, w.armed = c.now.Add(d), true
	c.waiters = append(c.waiters, w)
}

// disarmLocked takes w off the clock; it reports whether it was armed.
// mu held.
func (c *fakeClock) disarmLocked(w *fakeWaiter) bool {
	if !w.armed {
		return false
	}
	c.version++
	w.armed = false
	c.waiters = slices.DeleteFunc(c.waiters, func(o *fakeWaiter) bool { return o == w })
	return true
}

// fireLocked fires w at the clock's time: it sends the time on w's
// channel (dropping it if the last is still there) or starts its
// callback. A ticker is set again for its first period after now. mu held.
func (c *fakeClock) fireLocked(w *fakeWaiter) {
	c.version++
	if w.fn != nil {
		c.running++
		go func() {
			defer func() {
				c.mu.Lock()
				c.running--
				c.version++
				c.mu.Unlock()
			}()
			w.fn()
		}()
	} else {
		select {
		case w.ch <- c.now:
		default:
		}
		if !w.pending {
			c.fired = append(c.fired, w)
		}
		w.pending, w.rearmed, w.seen = true, false, time.Time{}
	}
	if w.period > 0 && w.armed {
		missed := c.now.Sub(w.exp) / w.period
		w.exp = w.exp.Add((missed + 1) * w.period)
	} else {
		c.disarmLocked(w)
	}
}

// nextStep returns when the earliest one-shot waiter is due, if any.
func (c *fakeClock) nextStep() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	ok := false
	for _, w := range c.waiters {
		if w.period == 0 && (!ok || w.exp.Before(next)) {
			next, ok = w.exp, true
		}
	}
	return next, ok
}

// moveTo sets the clock to t (never back) and fires every waiter due by
// then, in order of due time.
func (c *fakeClock) moveTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
		c.version++
	}
	for {
		var first *fakeWaiter
		for _, w := range c.waiters {
			if !w.exp.After(c.now) && (first == nil || w.exp.Before(first.exp)) {
				first = w
			}
		}
		if first == nil {
			return
		}
		c.fireLocked(first)
	}
}

// unsettled returns what the clock's waiters have not yet taken up: ticks
// waiting in a channel or just taken, callbacks running; "" when none.
// It retires the fired waiters that are done, and returns the version.
func (c *fakeClock) unsettled() (string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var what []string
	if c.running > 0 {
		what = append(what, fmt.Sprintf("%d clock callbacks running", c.running))
	}
	realNow := time.Now()
	c.fired = slices.DeleteFunc(c.fired, func(w *fakeWaiter) bool {
		full := len(w.ch) > 0
		if w.seen.IsZero() || full != w.seenFull {
			w.seen, w.seenFull = realNow, full // a new state: its grace starts now
		}
		var done bool
		switch {
		case full:
			// Received at once by a goroutine waiting on it; an After
			// whose select took another case is never received.
			done = w.after && realNow.Sub(w.seen) >= afterGrace
			if !done {
				what = append(what, fmt.Sprintf("the tick of a %s due at %v not yet received", w.kind(), w.exp))
			}
		case w.period > 0 || w.rearmed:
			done = true
		default:
			done = realNow.Sub(w.seen) >= drainGrace
			if !done {
				what = append(what, fmt.Sprintf("the owner of a timer due at %v acting on its tick", w.exp))
			}
		}
		if done {
			w.pending, w.seen = false, time.Time{}
		}
		return done
	})
	return strings.Join(what, "; "), c.version
}

// drain drops the tick in w's channel, if any. mu held.
func (w *fakeWaiter) drain() {
	if w.ch == nil {
		return
	}
	select {
	case <-w.ch:
	default:
	}
}

func (w *fakeWaiter) kind() string {
	switch {
	case w.period > 0:
		return "ticker"
	case w.after:
		return "clock.After"
	}
	return "timer"
}

// retireLocked forgets w's fired tick and drops it from w's channel:
// its owner stopped it, and a real timer's or ticker's Stop drops a stale
// tick since Go 1.23. mu held.
func (c *fakeClock) retireLocked(w *fakeWaiter) {
	w.drain()
	if w.pending {
		w.pending, w.seen = false, time.Time{}
		c.fired = slices.DeleteFunc(c.fired, func(o *fakeWaiter) bool { return o == w })
		c.version++
	}
}

// idle reports whether no callback runs: for the cluster's cleanup.
func (c *fakeClock) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running == 0
}

// fakeTimer is a fakeWaiter seen as a clockwork.Timer.
type fakeTimer fakeWaiter

func (t *fakeTimer) Chan() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) bool {
	w := (*fakeWaiter)(t)
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	was := w.armed
	w.c.armLocked(w, d)
	return was
}

func (t *fakeTimer) Stop() bool {
	w := (*fakeWaiter)(t)
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.retireLocked(w) // its owner is done with the tick
	return w.c.disarmLocked(w)
}

// fakeTicker is a fakeWaiter seen as a clockwork.Ticker.
type fakeTicker fakeWaiter

func (t *fakeTicker) Chan() <-chan time.Time { return t.ch }

// Reset panics for d <= 0, as time.Ticker's does.
func (t *fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("granarytest: Ticker.Reset with non-positive period %v", d))
	}
	w := (*fakeWaiter)(t)
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.period = d
	w.c.armLocked(w, d)
}

func (t *fakeTicker) Stop() {
	w := (*fakeWaiter)(t)
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.retireLocked(w)
	w.c.disarmLocked(w)
}
