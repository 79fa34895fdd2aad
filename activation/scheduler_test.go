package activation

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestConfigValidateNamesField(t *testing.T) {
	tests := []struct {
		field  string
		mutate func(*Config)
	}{
		{"Processors", func(c *Config) { c.Processors = 0 }},
		{"Processors", func(c *Config) { c.Processors = maxProcessors + 1 }},
		{"QuantumTurns", func(c *Config) { c.QuantumTurns = 0 }},
		{"QuantumTime", func(c *Config) { c.QuantumTime = 0 }},
		{"SpinRounds", func(c *Config) { c.SpinRounds = -1 }},
		{"HandOnAfter", func(c *Config) { c.HandOnAfter = -time.Second }},
		{"LongTurnWarning", func(c *Config) { c.LongTurnWarning = 0 }},
		{"MonitorInterval", func(c *Config) { c.MonitorInterval = 0 }},
		{"InlineDepth", func(c *Config) { c.InlineDepth = maxInlineDepth + 1 }},
		{"MaxQueuedTurns", func(c *Config) { c.MaxQueuedTurns = -1 }},
		{"Logger", func(c *Config) { c.Logger = nil }},
		{"Clock", func(c *Config) { c.Clock = nil }},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.mutate(&cfg)
		p, err := New(cfg)
		if err == nil {
			p.Close()
			t.Errorf("New accepted a bad %s", tt.field)
			continue
		}
		if !strings.Contains(err.Error(), "Config."+tt.field) || !strings.HasPrefix(err.Error(), "activation: ") {
			t.Errorf("error for bad %s = %q; want it to name Config.%s", tt.field, err, tt.field)
		}
	}
}

// stressGroup is the state of one group in the stress test. next and ran
// are plain fields: only turns of this group touch them, so the race
// detector itself checks that those turns are ordered.
type stressGroup struct {
	g     *Group
	x     exclusive
	next  [8]int // the sequence number expected next from each producer
	ran   int
	calls int // calls from other groups' turns that ran here
	made  atomic.Int32
}

type stressTurn struct {
	sg       *stressGroup
	producer int
	seq      int
	callee   *stressGroup // when set, the turn calls callee and waits
	conc     *concurrency
	wg       *sync.WaitGroup
	bad      *atomic.Int32
}

func (s *stressTurn) Run(e *Exec) {
	s.sg.x.enter(s.conc)
	if s.sg.next[s.producer] != s.seq {
		s.bad.Add(1)
	}
	s.sg.next[s.producer] = s.seq + 1
	s.sg.ran++
	if s.callee != nil {
		ev := new(Event)
		c := &stressCall{sg: s.callee, conc: s.conc, ev: ev}
		s.callee.made.Add(1)
		call := Turn{Name: "call", Task: c}
		// This turn's code pauses here: an inline callee runs on this
		// goroutine, and while it waits other turns of this group may run.
		s.sg.x.leave(s.conc)
		if !e.TryRun(s.callee.g, call) {
			if err := e.Enqueue(s.callee.g, call); err != nil {
				panic(err)
			}
		}
		e.Wait(ev)
		s.sg.x.enter(s.conc)
	}
	s.sg.x.leave(s.conc)
}

func (s *stressTurn) Done(_ *Exec, err error) {
	if err != nil {
		s.bad.Add(1)
	}
	s.wg.Done()
}

type stressCall struct {
	sg   *stressGroup
	conc *concurrency
	ev   *Event
}

func (c *stressCall) Run(*Exec) {
	c.sg.x.enter(c.conc)
	c.sg.calls++
	c.sg.x.leave(c.conc)
}

func (c *stressCall) Done(e *Exec, _ error) { e.Signal(c.ev) }

// TestStressSingleThreadAndFIFO: 10,000 groups, 8 producers each. No group
// ever runs two turns at once, each producer's turns run in order, and no
// more than Processors turns run at once. A tenth of the turns call
// another group and wait for it, inline or through the hand-off.
func TestStressSingleThreadAndFIFO(t *testing.T) {
	for _, inline := range []int{0, 8} {
		t.Run(fmt.Sprintf("inline=%d", inline), func(t *testing.T) {
			const groups, producers, perProducer = 10000, 8, 3
			p := newTestPool(t, func(c *Config) {
				c.InlineDepth = inline
				c.HandOnAfter = time.Hour // no hand-on: the bound below is exact
			})
			sgs := make([]*stressGroup, groups)
			for i := range sgs {
				sgs[i] = &stressGroup{g: p.NewGroup(fmt.Sprint("g", i))}
			}
			var (
				wg   sync.WaitGroup
				conc concurrency
				bad  atomic.Int32
			)
			wg.Add(groups * producers * perProducer)
			var prod sync.WaitGroup
			for pr := range producers {
				prod.Add(1)
				go func() {
					defer prod.Done()
					rng := rand.New(rand.NewPCG(uint64(pr), 1))
					for seq := range perProducer {
						for _, i := range rng.Perm(groups) {
							st := &stressTurn{sg: sgs[i], producer: pr, seq: seq, conc: &conc, wg: &wg, bad: &bad}
							if rng.IntN(10) == 0 {
								st.callee = sgs[rng.IntN(groups)]
							}
							if err := sgs[i].g.Enqueue(Turn{Name: "stress", Task: st}); err != nil {
								t.Error(err)
								wg.Done()
							}
						}
					}
				}()
			}
			prod.Wait()
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			recv(t, done, "all stress turns")
			if n := bad.Load(); n != 0 {
				t.Errorf("%d turns ran out of order or failed", n)
			}
			for _, sg := range sgs {
				if n := sg.x.bad.Load(); n != 0 {
					t.Fatalf("group %s ran turns in parallel %d times", sg.g.Label(), n)
				}
				if sg.ran != producers*perProducer {
					t.Fatalf("group %s ran %d turns; want %d", sg.g.Label(), sg.ran, producers*perProducer)
				}
				if sg.calls != int(sg.made.Load()) {
					t.Fatalf("group %s ran %d calls; %d were made", sg.g.Label(), sg.calls, sg.made.Load())
				}
			}
			if m := conc.max.Load(); m > int32(p.cfg.Processors) {
				t.Errorf("%d turns ran at once on %d processors", m, p.cfg.Processors)
			}
		})
	}
}

// hog is a group that feeds itself an endless stream of turns.
type hog struct {
	g     *Group
	turns atomic.Int64
	stop  atomic.Bool
}

func (h *hog) Run(e *Exec) {
	h.turns.Add(1)
	if !h.stop.Load() {
		if err := e.Enqueue(h.g, Turn{Name: "hog", Task: h}); err != nil {
			panic(err)
		}
	}
}

func (h *hog) Done(*Exec, error) {}

// TestFairnessQuantumTurns: a group fed endlessly delays another group's
// turn by about one quantum of turns, not more.
func TestFairnessQuantumTurns(t *testing.T) {
	const quantum = 16
	p := newTestPool(t, func(c *Config) {
		c.Processors = 1
		c.QuantumTurns = quantum
		c.HandOnAfter = time.Hour
	})
	h := &hog{g: p.NewGroup("hog")}
	defer h.stop.Store(true)
	if err := h.g.Enqueue(Turn{Name: "hog", Task: h}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the hog runs", func() bool { return h.turns.Load() > 10*quantum })
	for i := range 20 {
		v := p.NewGroup(fmt.Sprint("v", i))
		ran := make(chan int64, 1)
		if err := v.Enqueue(Turn{Name: "v", Task: &fn{run: func(*Exec) { ran <- h.turns.Load() }}}); err != nil {
			t.Fatal(err)
		}
		// Counted after Enqueue returns: counting before would charge the
		// hog with the turns it ran while this goroutine waited for a
		// core between the count and the Enqueue.
		queued := h.turns.Load()
		after := recv(t, ran, "the other group's turn")
		// The hog may be anywhere in its quantum when v is queued, and may
		// start one more quantum before it sees v: two quanta at most.
		if d := after - queued; d > 2*quantum+1 {
			t.Fatalf("the hog ran %d turns before another group's turn; quantum is %d", d, quantum)
		}
	}
}

// TestFairnessQuantumTime: with an effectively endless turn quantum, the
// monitor ends a run after QuantumTime, measured on the injected clock.
func TestFairnessQuantumTime(t *testing.T) {
	clock := newFakeClock()
	p := newTestPool(t, func(c *Config) {
		c.Processors = 1
		c.QuantumTurns = 1 << 30
		c.QuantumTime = 10 * time.Millisecond
		c.MonitorInterval = time.Millisecond
		c.HandOnAfter = time.Hour
		c.LongTurnWarning = time.Hour
		c.Clock = clock
	})
	waitForMonitor(t, clock)
	h := &hog{g: p.NewGroup("hog")}
	defer h.stop.Store(true)
	if err := h.g.Enqueue(Turn{Name: "hog", Task: h}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the hog runs", func() bool { return h.turns.Load() > 100 })
	v := p.NewGroup("v")
	ran := make(chan struct{}, 1)
	if err := v.Enqueue(Turn{Name: "v", Task: &fn{run: func(*Exec) { ran <- struct{}{} }}}); err != nil {
		t.Fatal(err)
	}
	// Without the clock moving, the hog keeps the only processor.
	advanced := time.Duration(0)
	waitUntil(t, "the other group runs", func() bool {
		select {
		case <-ran:
			return true
		default:
			clock.Advance(time.Millisecond)
			advanced += time.Millisecond
			return false
		}
	})
	if advanced < 10*time.Millisecond {
		t.Errorf("the other group ran after %v of clock time; the quantum is 10ms", advanced)
	}
}

// TestRaceRandomisesOrder: under the race detector the pool randomises
// whether a group made runnable by a turn goes to next or to the tail, so
// no test can rely on either order.
func TestRaceRandomisesOrder(t *testing.T) {
	if !raceEnabled {
		t.Skip("the order is randomised only under -race")
	}
	p := newTestPool(t, func(c *Config) { c.Processors = 1 })
	orders := map[string]int{}
	for range 200 {
		var mu sync.Mutex
		var got []string
		done := make(chan error, 3)
		rec := func(s string) func(*Exec) {
			return func(*Exec) { mu.Lock(); got = append(got, s); mu.Unlock() }
		}
		x, y := p.NewGroup("x"), p.NewGroup("y")
		err := p.NewGroup("parent").Enqueue(turn("parent", func(e *Exec) {
			_ = e.Enqueue(x, turn("x", rec("x"), done))
			_ = e.Enqueue(y, turn("y", rec("y"), done))
		}, done))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			recv(t, done, "turns")
		}
		orders[strings.Join(got, "")]++
	}
	if orders["xy"] == 0 || orders["yx"] == 0 {
		t.Errorf("orders seen: %v; want both xy and yx under -race", orders)
	}
}

// TestSequentialRoundTrips: many round trips from outside the pool, each
// waiting for the last, with every processor count. A lost wakeup anywhere
// in submit, spin and park shows up here as a timeout.
func TestSequentialRoundTrips(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		t.Run(fmt.Sprint("procs=", procs), func(t *testing.T) {
			p := newTestPool(t, func(c *Config) { c.Processors = procs })
			gs := []*Group{p.NewGroup("a"), p.NewGroup("b"), p.NewGroup("c")}
			done := make(chan error, 1)
			tr := turn("ping", nil, done)
			for i := range 20000 {
				if err := gs[i%len(gs)].Enqueue(tr); err != nil {
					t.Fatal(err)
				}
				if err := recv(t, done, fmt.Sprint("round trip ", i)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
