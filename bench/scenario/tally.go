package scenario

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// A Tally counts the events each subscriber of a Stream workload handled:
// the harness makes it, a System's subscribers count into it, and the
// harness waits on it for the slowest subscriber. Subscriber i is named
// Name(i); each has a Counter of its own, on a cache line of its own, so
// that subscribers on different cores do not slow each other by counting.
//
// The harness's publisher waits for the subscribers without polling: a
// sleep on this machine lasts a quarter of a millisecond or more, as long
// as thousands of deliveries. It names the count it waits for; the
// subscriber whose count reaches it wakes the publisher, which then looks
// at every count. So a subscriber pays one load of a line that changes
// only when the publisher starts a wait.
type Tally struct {
	names  []string
	all    []*Counter
	byName map[string]*Counter

	// target is the count the waiting publisher waits for; waiting says
	// it waits, and the first subscriber to reach target clears it and
	// wakes the publisher through wake.
	target  atomic.Int64
	waiting atomic.Bool
	wake    chan struct{}
}

// A Counter counts the events one subscriber handled.
type Counter struct {
	n atomic.Int64
	t *Tally
	_ [48]byte // to a cache line of its own
}

// Count counts one event handled. Any goroutine, but one subscriber's
// events are counted one after another.
func (c *Counter) Count() {
	n := c.n.Add(1)
	if n == c.t.target.Load() && c.t.waiting.CompareAndSwap(true, false) {
		select {
		case c.t.wake <- struct{}{}:
		default:
		}
	}
}

// Load is the count.
func (c *Counter) Load() int64 { return c.n.Load() }

// NewTally returns the tally of subscribers subscribers, named "s0",
// "s1", and so on, every count zero.
func NewTally(subscribers int) *Tally {
	t := &Tally{
		names:  make([]string, subscribers),
		all:    make([]*Counter, subscribers),
		byName: make(map[string]*Counter, subscribers),
		wake:   make(chan struct{}, 1),
	}
	for i := range subscribers {
		t.names[i] = "s" + strconv.Itoa(i)
		t.all[i] = &Counter{t: t}
		t.byName[t.names[i]] = t.all[i]
	}
	return t
}

// Subscribers is how many subscribers the tally counts.
func (t *Tally) Subscribers() int { return len(t.names) }

// Name is the name of subscriber i: its grain's key or identity.
func (t *Tally) Name(i int) string { return t.names[i] }

// Counter is the counter of the subscriber named name; nil when no
// subscriber has that name. Any goroutine.
func (t *Tally) Counter(name string) *Counter { return t.byName[name] }

// Least is how many events every subscriber has handled: the least of
// their counts.
func (t *Tally) Least() int64 {
	if len(t.all) == 0 {
		return 0
	}
	least := t.all[0].Load()
	for _, c := range t.all[1:] {
		least = min(least, c.Load())
	}
	return least
}

// Total is how many events the subscribers have handled, together.
func (t *Tally) Total() int64 {
	var n int64
	for _, c := range t.all {
		n += c.Load()
	}
	return n
}

// tallyRecheck is how often a waiting publisher looks at the counts
// though no subscriber woke it: a guard, not the means.
const tallyRecheck = 10 * time.Millisecond

// await waits until every subscriber has handled target events, ctx ends
// or limit passes, and returns the least count it saw. One goroutine at a
// time.
func (t *Tally) await(ctx context.Context, target int64, limit time.Duration) (int64, error) {
	least := t.Least()
	if least >= target {
		return least, nil
	}
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(tallyRecheck)
	defer tick.Stop()
	defer t.waiting.Store(false)
	for {
		// Armed before the counts are read: a subscriber that reaches
		// target after the read finds the publisher waiting.
		t.target.Store(target)
		t.waiting.Store(true)
		if least = t.Least(); least >= target {
			return least, nil
		}
		select {
		case <-t.wake:
		case <-tick.C:
			if time.Now().After(deadline) {
				return least, fmt.Errorf("gave up after %v: the slowest of %d subscribers handled %d of %d events",
					limit, len(t.all), t.Least(), target)
			}
		case <-ctx.Done():
			return least, fmt.Errorf("%w: the slowest of %d subscribers handled %d of %d events",
				ctx.Err(), len(t.all), t.Least(), target)
		}
	}
}
