package activation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// outcome counts how the turns of a test ended.
type outcome struct {
	mu      sync.Mutex
	ran     int
	dropped int
	other   []error
	calls   map[*fn]int
}

func (o *outcome) task(run func(*Exec)) *fn {
	f := &fn{}
	f.run = func(e *Exec) {
		if run != nil {
			run(e)
		}
	}
	f.done = func(_ *Exec, err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.calls == nil {
			o.calls = map[*fn]int{}
		}
		o.calls[f]++
		switch {
		case err == nil:
			o.ran++
		case errors.Is(err, ErrClosed):
			o.dropped++
		default:
			o.other = append(o.other, err)
		}
	}
	return f
}

func (o *outcome) check(t *testing.T, accepted int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.other) != 0 {
		t.Errorf("unexpected errors: %v", o.other)
	}
	if o.ran+o.dropped != accepted {
		t.Errorf("ran %d + dropped %d != %d accepted turns", o.ran, o.dropped, accepted)
	}
	for f, n := range o.calls {
		if n != 1 {
			t.Errorf("Done called %d times for one turn (%p)", n, f)
		}
	}
	if len(o.calls) != accepted {
		t.Errorf("Done called for %d turns; want %d", len(o.calls), accepted)
	}
}

// TestStopDrains: Stop runs every queued turn, and the turns they enqueue,
// waits for a turn in a blocking region, then stops every goroutine.
func TestStopDrains(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var o outcome
	var accepted atomic.Int32
	groups := make([]*Group, 100)
	for i := range groups {
		groups[i] = p.NewGroup(fmt.Sprint("g", i))
	}
	unblock := make(chan struct{})
	blocking := make(chan struct{})
	var unblocked atomic.Bool
	accepted.Add(1)
	if err := groups[0].Enqueue(Turn{Name: "io", Task: o.task(func(e *Exec) {
		e.Blocking(func() {
			close(blocking)
			<-unblock
			unblocked.Store(true)
		})
	})}); err != nil {
		t.Fatal(err)
	}
	recv(t, blocking, "the blocking region")
	for i := range 2000 {
		g := groups[i%len(groups)]
		accepted.Add(1)
		if err := g.Enqueue(Turn{Name: "work", Task: o.task(func(e *Exec) {
			// Each turn enqueues a follow-up; Stop must run those too.
			accepted.Add(1)
			if err := e.Enqueue(groups[(i+1)%len(groups)], Turn{Name: "follow", Task: o.task(nil)}); err != nil {
				panic(err)
			}
		})}); err != nil {
			t.Fatal(err)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(context.Background()) }()
	waitUntil(t, "Stop begins", p.stopping.Load)
	close(unblock)
	if err := recv(t, stopped, "Stop"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !unblocked.Load() {
		t.Fatal("Stop returned before the blocking region ended")
	}
	o.check(t, int(accepted.Load()))
	if o.dropped != 0 {
		t.Errorf("Stop dropped %d turns", o.dropped)
	}
	if err := groups[0].Enqueue(Turn{Name: "late", Task: o.task(nil)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Enqueue after Stop = %v; want ErrClosed", err)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	p.Close()
}

// TestStopDeadline: when ctx ends before the pool drains, Stop closes it,
// drops what is queued, and returns ctx's error.
func TestStopDeadline(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New(func() Config { c := DefaultConfig(); c.Processors = 1; c.HandOnAfter = time.Hour; return c }())
	if err != nil {
		t.Fatal(err)
	}
	var o outcome
	started, release := make(chan struct{}), make(chan struct{})
	if err := p.NewGroup("busy").Enqueue(Turn{Name: "busy", Task: o.task(func(*Exec) {
		close(started)
		<-release
	})}); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the busy turn")
	for i := range 100 {
		if err := p.NewGroup(fmt.Sprint("g", i)).Enqueue(Turn{Name: "queued", Task: o.task(nil)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(ctx) }()
	waitUntil(t, "Stop begins", p.stopping.Load)
	cancel()
	waitUntil(t, "Close begins", p.closed.Load)
	close(release)
	if err := recv(t, stopped, "Stop"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop = %v; want context.Canceled", err)
	}
	o.check(t, 101)
	if o.dropped != 100 {
		t.Errorf("dropped %d turns; want the 100 queued behind the busy one", o.dropped)
	}
}

// TestCloseWhileBusy: Close drops queued turns, tells each owner, lets a
// waiting turn finish, and leaves no goroutine behind.
func TestCloseWhileBusy(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New(func() Config { c := DefaultConfig(); c.HandOnAfter = time.Hour; return c }())
	if err != nil {
		t.Fatal(err)
	}
	var o outcome
	accepted := 0
	// A turn that waits on an event that a queued (and so dropped) turn
	// would signal: Close must still finish, through the dropped turn's Done.
	var ev Event
	waiting := make(chan struct{})
	signaler := &fn{done: func(*Exec, error) { ev.Signal() }}
	waiter := p.NewGroup("waiter")
	accepted++
	if err := waiter.Enqueue(Turn{Name: "wait", Task: o.task(func(e *Exec) {
		close(waiting)
		e.Wait(&ev)
	})}); err != nil {
		t.Fatal(err)
	}
	recv(t, waiting, "the waiting turn")
	started, release := make(chan struct{}), make(chan struct{})
	for i := range p.cfg.Processors {
		accepted++
		once := i == 0
		if err := p.NewGroup(fmt.Sprint("busy", i)).Enqueue(Turn{Name: "busy", Task: o.task(func(*Exec) {
			if once {
				close(started)
			}
			<-release
		})}); err != nil {
			t.Fatal(err)
		}
	}
	recv(t, started, "a busy turn")
	if err := p.NewGroup("signaler").Enqueue(Turn{Name: "signal", Task: signaler}); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		accepted++
		if err := p.NewGroup(fmt.Sprint("g", i%50)).Enqueue(Turn{Name: "queued", Task: o.task(nil)}); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	waitUntil(t, "Close begins", p.closed.Load)
	close(release)
	recv(t, closed, "Close")
	p.Close() // idempotent
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("Stop after Close = %v", err)
	}
	o.check(t, accepted)
	if o.dropped == 0 {
		t.Error("Close dropped nothing")
	}
	if err := waiter.Enqueue(Turn{Name: "late", Task: o.task(nil)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Enqueue after Close = %v; want ErrClosed", err)
	}
}

// TestEnqueueRacingClose: turns enqueued concurrently with Close either run
// or are dropped with ErrClosed; none is lost.
func TestEnqueueRacingClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	for range 5 {
		p, err := New(DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		var o outcome
		var accepted atomic.Int32
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := p.NewGroup(fmt.Sprint("w", w))
				for range 20000 {
					if err := g.Enqueue(Turn{Name: "t", Task: o.task(nil)}); err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Error(err)
						}
						return
					}
					accepted.Add(1)
				}
			}()
		}
		waitUntil(t, "turns run", func() bool { o.mu.Lock(); defer o.mu.Unlock(); return o.ran > 100 })
		p.Close()
		wg.Wait()
		o.check(t, int(accepted.Load()))
	}
}

// TestPanicIsReported: a panicking turn's Done gets a *PanicError; the group
// and the pool keep running, inline turns included.
func TestPanicIsReported(t *testing.T) {
	p := newTestPool(t, nil)
	g := p.NewGroup("grain/p")
	done := make(chan error, 4)
	if err := g.Enqueue(turn("Explode", func(*Exec) { panic("boom") }, done)); err != nil {
		t.Fatal(err)
	}
	if err := g.Enqueue(turn("After", nil, done)); err != nil {
		t.Fatal(err)
	}
	var pe *PanicError
	if err := recv(t, done, "the panicking turn"); !errors.As(err, &pe) {
		t.Fatalf("Done got %v; want a *PanicError", err)
	}
	if pe.Value != "boom" || pe.Group != "grain/p" || pe.Turn != "Explode" || len(pe.Stack) == 0 {
		t.Errorf("PanicError = %+v", pe)
	}
	if !strings.Contains(pe.Error(), "boom") {
		t.Errorf("Error() = %q", pe.Error())
	}
	if err := recv(t, done, "the next turn"); err != nil {
		t.Fatalf("turn after a panic: %v", err)
	}
	// Inline: the callee's panic goes to the callee's Done; the caller goes on.
	callee := p.NewGroup("callee")
	var inner error
	if err := g.Enqueue(turn("Caller", func(e *Exec) {
		e.TryRun(callee, Turn{Name: "Bad", Task: &fn{
			run:  func(*Exec) { panic(errors.New("inner")) },
			done: func(_ *Exec, err error) { inner = err },
		}})
	}, done)); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "the caller"); err != nil {
		t.Fatalf("caller of a panicking inline turn: %v", err)
	}
	if !errors.As(inner, &pe) || pe.Unwrap() == nil || pe.Unwrap().Error() != "inner" {
		t.Errorf("inline panic reported as %v", inner)
	}
}

// TestPanicMidBatch: turns queued behind a busy turn run as one batch under
// one recover. A panic in the middle of it is reported to that turn's Done
// alone, exactly once, and the batch goes on in order; a turn that waits
// and then panics is reported the same way.
func TestPanicMidBatch(t *testing.T) {
	p := newTestPool(t, nil)
	g := p.NewGroup("grain/batch")
	gate, started := make(chan struct{}), make(chan struct{})
	if err := g.Enqueue(turn("Gate", func(*Exec) { close(started); <-gate }, nil)); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the gate turn")

	var ev Event
	type result struct {
		name string
		err  error
	}
	results := make(chan result, 16)
	var order []string // touched only by g's turns
	add := func(name string, run func(e *Exec)) {
		t.Helper()
		task := &fn{
			run: func(e *Exec) {
				order = append(order, name)
				if run != nil {
					run(e)
				}
			},
			done: func(_ *Exec, err error) { results <- result{name, err} },
		}
		if err := g.Enqueue(Turn{Name: name, Task: task}); err != nil {
			t.Fatal(err)
		}
	}
	add("ok1", nil)
	add("boom1", func(*Exec) { panic("one") })
	add("ok2", nil)
	add("waitThenBoom", func(e *Exec) {
		e.Wait(&ev)
		panic("two")
	})
	add("ok3", nil)
	if n := g.Stats().QueueLen; n != 6 {
		t.Fatalf("queue length = %d; want 6 (gate and five)", n)
	}
	close(gate)
	waitUntil(t, "the turn to wait", func() bool {
		x := ev.state.Load()
		return x != nil && x != eventSignaled
	})
	ev.Signal()

	// Done comes in run order, except that ok3 runs while waitThenBoom
	// waits (a wait gives up the token), so it finishes first.
	want := []struct {
		name  string
		panic any
	}{{"ok1", nil}, {"boom1", "one"}, {"ok2", nil}, {"ok3", nil}, {"waitThenBoom", "two"}}
	for _, w := range want {
		r := recv(t, results, "Done of "+w.name)
		if r.name != w.name {
			t.Fatalf("Done of %q came next; want %q", r.name, w.name)
		}
		var pe *PanicError
		switch {
		case w.panic == nil && r.err != nil:
			t.Errorf("%s: Done got %v; want nil", w.name, r.err)
		case w.panic != nil && (!errors.As(r.err, &pe) || pe.Value != w.panic || pe.Turn != w.name):
			t.Errorf("%s: Done got %v; want a *PanicError of %v", w.name, r.err, w.panic)
		}
	}
	// Every Done came exactly once: the pool is drained and nothing more
	// arrives.
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		t.Fatalf("extra Done for %q: %v", r.name, r.err)
	default:
	}
	if got := strings.Join(order, ","); got != "ok1,boom1,ok2,waitThenBoom,ok3" {
		t.Errorf("run order %s", got)
	}
}

// TestSystemTurnsFirst: system turns run before queued application turns.
func TestSystemTurnsFirst(t *testing.T) {
	p := newTestPool(t, func(c *Config) { c.Processors = 1; c.HandOnAfter = time.Hour })
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 8)
	if err := p.NewGroup("busy").Enqueue(turn("busy", func(*Exec) { close(started); <-release }, done)); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the busy turn")
	g := p.NewGroup("g")
	var order []string // touched only by turns of g
	add := func(name string, system bool) {
		tr := turn(name, func(*Exec) { order = append(order, name) }, done)
		enqueue := g.Enqueue
		if system {
			enqueue = g.EnqueueSystem
		}
		if err := enqueue(tr); err != nil {
			t.Fatal(err)
		}
	}
	add("a1", false)
	add("a2", false)
	add("s1", true)
	add("a3", false)
	add("s2", true)
	close(release)
	for range 6 {
		recv(t, done, "turns")
	}
	if got, want := strings.Join(order, " "), "s1 s2 a1 a2 a3"; got != want {
		t.Fatalf("order = %q; want %q", got, want)
	}
}

// TestSystemTurnCutsBatch: a system turn queued by a running turn runs
// right after it, ahead of application turns already queued with it.
func TestSystemTurnCutsBatch(t *testing.T) {
	p := newTestPool(t, func(c *Config) { c.Processors = 1; c.HandOnAfter = time.Hour })
	blockerIn, blockerOut := make(chan struct{}), make(chan struct{})
	if err := p.NewGroup("busy").Enqueue(turn("busy", func(*Exec) { close(blockerIn); <-blockerOut }, nil)); err != nil {
		t.Fatal(err)
	}
	recv(t, blockerIn, "the busy turn")
	g := p.NewGroup("g")
	var order []string // touched only by turns of g
	done := make(chan error, 8)
	for i := range 5 {
		name := fmt.Sprint("a", i)
		if err := g.Enqueue(turn(name, func(e *Exec) {
			order = append(order, name)
			if i == 1 {
				sys := turn("sys", func(*Exec) { order = append(order, "sys") }, done)
				if err := e.EnqueueSystem(g, sys); err != nil {
					panic(err)
				}
			}
		}, done)); err != nil {
			t.Fatal(err)
		}
	}
	close(blockerOut)
	for range 6 {
		recv(t, done, "turns")
	}
	if got, want := strings.Join(order, " "), "a0 a1 sys a2 a3 a4"; got != want {
		t.Fatalf("order = %q; want %q", got, want)
	}
}

func TestEnqueueRejectsNilTask(t *testing.T) {
	p := newTestPool(t, nil)
	if err := p.NewGroup("g").Enqueue(Turn{Name: "nil"}); !errors.Is(err, ErrNilTask) {
		t.Fatalf("Enqueue(nil task) = %v; want ErrNilTask", err)
	}
}

// TestStats: group and pool counters follow the work done.
func TestStats(t *testing.T) {
	clock := newFakeClock()
	p := newTestPool(t, func(c *Config) {
		c.Processors = 2
		c.HandOnAfter = time.Hour
		c.LongTurnWarning = time.Hour
		c.Clock = clock
	})
	waitForMonitor(t, clock)
	g := p.NewGroup("counted")
	done := make(chan error, 100)
	for range 100 {
		if err := g.Enqueue(turn("t", nil, done)); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		recv(t, done, "turns")
	}
	waitUntil(t, "the group's counters settle", func() bool { return g.Stats().Turns == 100 })
	if gs := g.Stats(); gs.Label != "counted" || gs.QueueLen != 0 {
		t.Errorf("group stats %+v", gs)
	}
	// Busy time is sampled by the monitor: a turn that holds a processor
	// while the clock moves 50ms is charged about that much.
	hold, held := make(chan struct{}), make(chan struct{})
	if err := g.Enqueue(turn("hold", func(*Exec) { close(held); <-hold }, done)); err != nil {
		t.Fatal(err)
	}
	recv(t, held, "the holding turn")
	waitUntil(t, "busy time is sampled", func() bool {
		clock.Advance(p.cfg.MonitorInterval)
		return g.Stats().Busy >= 50*time.Millisecond
	})
	close(hold)
	recv(t, done, "the holding turn")

	// Steals: a turn fills its processor's ring, then holds the processor;
	// the other processor's worker must steal to run the queued groups.
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	stolen := make(chan error, 64)
	if err := p.NewGroup("filler").Enqueue(turn("fill", func(e *Exec) {
		for i := range 64 {
			if err := e.Enqueue(p.NewGroup(fmt.Sprint("s", i)), turn("s", nil, stolen)); err != nil {
				panic(err)
			}
		}
		close(started)
		<-release
	}, nil)); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the filler")
	for range 63 { // the one in next is not stealable until the monitor says so
		recv(t, stolen, "stolen turns")
	}
	s := p.Stats()
	if s.Steals == 0 {
		t.Errorf("no steals counted: %+v", s)
	}
	if s.Processors != 2 || s.RunningWorkers < 1 || s.Workers < 2 {
		t.Errorf("pool stats %+v", s)
	}
}
