package activation

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// chainCall is a turn of link i in a chain: it calls link i+1 and waits for
// its reply, unless it is the last link.
type chainCall struct {
	links []*Group
	i     int
	reply *Event        // signaled when the turn is done
	done  chan struct{} // closed when the first link is done
	ran   *atomic.Int32
}

func (c *chainCall) Run(e *Exec) {
	c.ran.Add(1)
	if c.i+1 == len(c.links) {
		return
	}
	var ev Event
	next := Turn{Name: "link", Task: &chainCall{links: c.links, i: c.i + 1, reply: &ev, ran: c.ran}}
	if !e.TryRun(c.links[c.i+1], next) {
		if err := e.Enqueue(c.links[c.i+1], next); err != nil {
			panic(err)
		}
	}
	e.Wait(&ev)
}

func (c *chainCall) Done(e *Exec, err error) {
	if err != nil {
		panic(err)
	}
	if c.done != nil {
		close(c.done)
		return
	}
	e.Signal(c.reply)
}

// TestNoStarvationFromBlocking: on N processors, 4·N turns in a chain each
// wait on the next group's turn, and all complete, with and without inline
// execution.
func TestNoStarvationFromBlocking(t *testing.T) {
	for _, inline := range []int{0, 2, 8} {
		t.Run(fmt.Sprintf("inline=%d", inline), func(t *testing.T) {
			p := newTestPool(t, func(c *Config) {
				c.InlineDepth = inline
				c.HandOnAfter = time.Hour
			})
			n := 4 * p.cfg.Processors
			links := make([]*Group, n)
			for i := range links {
				links[i] = p.NewGroup(fmt.Sprint("link", i))
			}
			var ran atomic.Int32
			done := make(chan struct{})
			first := &chainCall{links: links, done: done, ran: &ran}
			if err := links[0].Enqueue(Turn{Name: "link", Task: first}); err != nil {
				t.Fatal(err)
			}
			recv(t, done, "the whole chain")
			if got := ran.Load(); got != int32(n) {
				t.Fatalf("%d links ran; want %d", got, n)
			}
			s := p.Stats()
			if inline == 0 && s.Handoffs == 0 {
				t.Errorf("no processor hand-offs counted for a chain of waits: %+v", s)
			}
			if inline == 8 && s.Handoffs != 0 {
				t.Errorf("inline chain of %d handed processors off %d times", n, s.Handoffs)
			}
		})
	}
}

// TestWaitMidBatch: turns queued together run as one batch; when one in
// the middle waits, the ones behind it still run in order, and the waiting
// one continues after them.
func TestWaitMidBatch(t *testing.T) {
	p := newTestPool(t, func(c *Config) { c.Processors = 1; c.HandOnAfter = time.Hour })
	blockerIn, blockerOut := make(chan struct{}), make(chan struct{})
	if err := p.NewGroup("blocker").Enqueue(turn("block", func(*Exec) { close(blockerIn); <-blockerOut }, nil)); err != nil {
		t.Fatal(err)
	}
	recv(t, blockerIn, "the blocker")
	g := p.NewGroup("g")
	var ev Event
	var log []string // touched only by turns of g
	done := make(chan error, 4)
	add := func(name string, run func(*Exec)) {
		if err := g.Enqueue(turn(name, run, done)); err != nil {
			t.Fatal(err)
		}
	}
	add("a", func(*Exec) { log = append(log, "a") })
	add("b", func(e *Exec) { log = append(log, "b:start"); e.Wait(&ev); log = append(log, "b:resumed") })
	add("c", func(e *Exec) { log = append(log, "c"); e.Signal(&ev) })
	add("d", func(*Exec) { log = append(log, "d") })
	close(blockerOut)
	for range 4 {
		if err := recv(t, done, "turns"); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := strings.Join(log, " "), "a b:start c d b:resumed"; got != want {
		t.Fatalf("log = %q; want %q", got, want)
	}
}

// TestWaitInterleavesOnlyAtWait: while a turn waits, the next turn of its
// group runs; the waiting turn continues after it, never in the middle.
func TestWaitInterleavesOnlyAtWait(t *testing.T) {
	p := newTestPool(t, nil)
	g := p.NewGroup("g")
	var ev Event
	var log []string // touched only by turns of g
	done := make(chan error, 2)
	if err := g.Enqueue(turn("first", func(e *Exec) {
		log = append(log, "first:start")
		e.Wait(&ev)
		log = append(log, "first:resumed")
	}, done)); err != nil {
		t.Fatal(err)
	}
	if err := g.Enqueue(turn("second", func(e *Exec) {
		log = append(log, "second")
		e.Signal(&ev)
	}, done)); err != nil {
		t.Fatal(err)
	}
	recv(t, done, "a turn")
	recv(t, done, "a turn")
	if got, want := strings.Join(log, " "), "first:start second first:resumed"; got != want {
		t.Fatalf("log = %q; want %q", got, want)
	}
}

// TestInlineWaitReleasesEveryToken: A runs B inline and B waits. A's token
// is released too, so another turn of A runs and signals B's event; then B
// finishes, and A's turn takes its token back before it continues.
func TestInlineWaitReleasesEveryToken(t *testing.T) {
	p := newTestPool(t, nil)
	a, b := p.NewGroup("a"), p.NewGroup("b")
	var ev Event
	var aLog []string // touched only by turns of a
	var aBusy exclusive
	var conc concurrency
	done := make(chan error, 3)
	inlined := make(chan bool, 1)
	if err := a.Enqueue(turn("outer", func(e *Exec) {
		aBusy.enter(&conc)
		aLog = append(aLog, "outer:start")
		aBusy.leave(&conc)
		inlined <- e.TryRun(b, turn("inner", func(e *Exec) {
			if err := e.Enqueue(a, turn("other", func(*Exec) {
				aBusy.enter(&conc)
				aLog = append(aLog, "other")
				aBusy.leave(&conc)
				ev.Signal()
			}, done)); err != nil {
				panic(err)
			}
			e.Wait(&ev)
		}, done))
		aBusy.enter(&conc)
		aLog = append(aLog, "outer:end")
		aBusy.leave(&conc)
	}, done)); err != nil {
		t.Fatal(err)
	}
	if !recv(t, inlined, "TryRun") {
		t.Fatal("TryRun on an idle group returned false")
	}
	for range 3 {
		if err := recv(t, done, "turns"); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := strings.Join(aLog, " "), "outer:start other outer:end"; got != want {
		t.Fatalf("a's log = %q; want %q", got, want)
	}
	if aBusy.bad.Load() != 0 {
		t.Fatal("turns of a overlapped")
	}
}

// TestTryRunRefuses: TryRun runs nothing for the caller's own group, a
// group already on the caller's stack, or beyond InlineDepth.
func TestTryRunRefuses(t *testing.T) {
	p := newTestPool(t, func(c *Config) { c.InlineDepth = 2 })
	a, b, c, d := p.NewGroup("a"), p.NewGroup("b"), p.NewGroup("c"), p.NewGroup("d")
	type result struct{ self, cycle, ab, bc, cd bool }
	res := make(chan result, 1)
	done := make(chan error, 8)
	var r result
	if err := a.Enqueue(turn("a", func(e *Exec) {
		r.self = e.TryRun(a, turn("self", nil, done))
		r.ab = e.TryRun(b, turn("b", func(e *Exec) {
			r.cycle = e.TryRun(a, turn("cycle", nil, done)) // a is on the stack
			r.bc = e.TryRun(c, turn("c", func(e *Exec) {
				r.cd = e.TryRun(d, turn("d", nil, done)) // deeper than InlineDepth
			}, done))
		}, done))
		res <- r
	}, done)); err != nil {
		t.Fatal(err)
	}
	got := recv(t, res, "the turn")
	want := result{self: false, cycle: false, ab: true, bc: true, cd: false}
	if got != want {
		t.Fatalf("TryRun results %+v; want %+v", got, want)
	}
}

// spinner busy-spins in its turn until released or until limit passes.
func spinner(started chan<- struct{}, release <-chan struct{}, limit time.Duration) func(*Exec) {
	return func(*Exec) {
		close(started)
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			select {
			case <-release:
				return
			default:
			}
		}
	}
}

// TestBusySpinDoesNotStall: a turn that busy-spins for 200 ms on the only
// processor does not stop another group's turn for longer than the
// monitor's hand-on threshold (plus scheduling slack).
func TestBusySpinDoesNotStall(t *testing.T) {
	p := newTestPool(t, func(c *Config) {
		c.Processors = 1
		c.HandOnAfter = 20 * time.Millisecond
		c.MonitorInterval = 2 * time.Millisecond
	})
	started := make(chan struct{})
	spinDone := make(chan error, 1)
	if err := p.NewGroup("spinner").Enqueue(turn("spin", spinner(started, nil, 200*time.Millisecond), spinDone)); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the spinner")
	queued := time.Now()
	otherDone := make(chan error, 1)
	if err := p.NewGroup("other").Enqueue(turn("other", nil, otherDone)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-otherDone:
	case <-spinDone:
		t.Fatal("the other group waited for the whole 200ms spin")
	case <-time.After(defaultTestTimeout):
		t.Fatal("timed out")
	}
	t.Logf("other group ran %v after being queued behind a spinning turn", time.Since(queued))
	recv(t, spinDone, "the spinner")
	if p.Stats().HandOns == 0 {
		t.Error("no hand-on counted")
	}
}

// TestLongTurnHandOnAndWarning drives the monitor with a fake clock: past
// HandOnAfter a stuck turn's processor goes to another worker; past
// LongTurnWarning a warning names the group and the turn.
func TestLongTurnHandOnAndWarning(t *testing.T) {
	clock := newFakeClock()
	core, logs := observer.New(zap.WarnLevel)
	p := newTestPool(t, func(c *Config) {
		c.Processors = 1
		c.HandOnAfter = 50 * time.Millisecond
		c.LongTurnWarning = time.Second
		c.MonitorInterval = 5 * time.Millisecond
		c.Logger = zap.New(core)
		c.Clock = clock
	})
	waitForMonitor(t, clock)
	// Queue a quick turn ahead of the slow one while the only processor is
	// busy, so both are in one batch and the warning must name the second.
	blockerIn, blockerOut := make(chan struct{}), make(chan struct{})
	if err := p.NewGroup("blocker").Enqueue(turn("block", func(*Exec) { close(blockerIn); <-blockerOut }, nil)); err != nil {
		t.Fatal(err)
	}
	recv(t, blockerIn, "the blocker")
	started, release := make(chan struct{}), make(chan struct{})
	spinDone := make(chan error, 1)
	slow := p.NewGroup("grain/slow")
	if err := slow.Enqueue(turn("Quick", nil, nil)); err != nil {
		t.Fatal(err)
	}
	if err := slow.Enqueue(turn("Compute", spinner(started, release, defaultTestTimeout), spinDone)); err != nil {
		t.Fatal(err)
	}
	close(blockerOut)
	defer close(release)
	recv(t, started, "the spinner")
	otherDone := make(chan error, 1)
	if err := p.NewGroup("other").Enqueue(turn("other", nil, otherDone)); err != nil {
		t.Fatal(err)
	}
	var advanced time.Duration
	waitUntil(t, "the other group runs", func() bool {
		select {
		case <-otherDone:
			return true
		default:
			clock.Advance(5 * time.Millisecond)
			advanced += 5 * time.Millisecond
			return false
		}
	})
	if advanced < 50*time.Millisecond {
		t.Errorf("other group ran after %v of clock time; hand-on is at 50ms", advanced)
	}
	if logs.Len() != 0 {
		t.Errorf("warned before the 1s threshold: %v", logs.All())
	}
	waitUntil(t, "the long turn is logged", func() bool {
		clock.Advance(5 * time.Millisecond)
		return logs.Len() > 0
	})
	entry := logs.All()[0]
	fields := entry.ContextMap()
	if fields["group"] != "grain/slow" || fields["turn"] != "Compute" {
		t.Errorf("warning %q has fields %v; want group grain/slow and turn Compute", entry.Message, fields)
	}
	if s := p.Stats(); s.HandOns != 1 || s.LongTurnWarnings != 1 {
		t.Errorf("stats %+v; want 1 hand-on and 1 warning", s)
	}
}

// TestBlockingReleasesProcessor: on one processor, a turn blocked in
// Exec.Blocking does not keep another group from running, and takes its
// group's token back afterwards.
func TestBlockingReleasesProcessor(t *testing.T) {
	p := newTestPool(t, func(c *Config) {
		c.Processors = 1
		c.HandOnAfter = time.Hour
	})
	g := p.NewGroup("blocker")
	unblock := make(chan struct{})
	inBlocking := make(chan struct{})
	done := make(chan error, 3)
	var order []string // touched only by turns of g
	if err := g.Enqueue(turn("io", func(e *Exec) {
		order = append(order, "io:start")
		e.Blocking(func() {
			close(inBlocking)
			<-unblock
		})
		order = append(order, "io:end")
	}, done)); err != nil {
		t.Fatal(err)
	}
	recv(t, inBlocking, "the blocking region")
	if err := p.NewGroup("other").Enqueue(turn("other", nil, done)); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "another group's turn during the blocking region"); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.BlockedTurns != 1 {
		t.Errorf("BlockedTurns = %d; want 1", s.BlockedTurns)
	}
	// A turn of the same group interleaves at the blocking region.
	if err := g.Enqueue(turn("same", func(*Exec) { order = append(order, "same") }, done)); err != nil {
		t.Fatal(err)
	}
	recv(t, done, "the group's next turn")
	close(unblock)
	recv(t, done, "the blocked turn")
	if got, want := strings.Join(order, " "), "io:start same io:end"; got != want {
		t.Fatalf("order = %q; want %q", got, want)
	}
}

// TestWaiterResumesBehindQueuedWork: a turn that awaits many events, each
// signaled by a turn queued on its processor, is resumed behind the turns
// queued there, not after each signal, so a fan-out's caller resumes once
// its callees have run rather than once per reply.
func TestWaiterResumesBehindQueuedWork(t *testing.T) {
	p := newTestPool(t, func(c *Config) { c.Processors = 1; c.HandOnAfter = time.Hour })
	const n = 10
	var ran atomic.Int32
	events := make([]Event, n)
	seen := make(chan int32, 1)
	caller := p.NewGroup("caller")
	err := caller.Enqueue(turn("fan-out", func(e *Exec) {
		for i := range events {
			callee := p.NewGroup("callee")
			if err := e.Enqueue(callee, turn("reply", func(e *Exec) { ran.Add(1); e.Signal(&events[i]) }, nil)); err != nil {
				t.Error(err)
				return
			}
		}
		e.Wait(&events[0])
		seen <- ran.Load() // how many replied by the time the first wait ended
		for i := range events {
			e.Wait(&events[i])
		}
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, seen, "the caller's resumption"); got != n {
		t.Errorf("the caller resumed after %d of %d replies, want all of them", got, n)
	}
}
