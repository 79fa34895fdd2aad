package activation

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchConfig is the default config with the monitor's hand-on out of the
// way: a benchmark's driving turn may run for the whole benchmark.
func benchConfig(mutate func(*Config)) func(*Config) {
	return func(c *Config) {
		c.HandOnAfter = time.Hour
		c.LongTurnWarning = time.Hour
		if mutate != nil {
			mutate(c)
		}
	}
}

// BenchmarkBaselineChanRoundTrip is the yardstick: one goroutine sends to
// another over an unbuffered channel and waits for the answer.
func BenchmarkBaselineChanRoundTrip(b *testing.B) {
	req, resp := make(chan struct{}), make(chan struct{})
	go func() {
		for range req {
			resp <- struct{}{}
		}
	}()
	b.ReportAllocs()
	for b.Loop() {
		req <- struct{}{}
		<-resp
	}
	close(req)
}

type signalTask struct{ done chan struct{} }

func (s *signalTask) Run(*Exec)             {}
func (s *signalTask) Done(*Exec, error)     { s.done <- struct{}{} }
func newSignalTask() *signalTask            { return &signalTask{done: make(chan struct{}, 1)} }
func (s *signalTask) turn(name string) Turn { return Turn{Name: name, Task: s} }

// BenchmarkRoundTrip: a goroutine outside the pool enqueues one turn on an
// idle group and waits until it has run.
func BenchmarkRoundTrip(b *testing.B) { runRoundTrip(b, nil) }

// runRoundTrip runs the round-trip workload on a pool configured by mutate.
func runRoundTrip(b *testing.B, mutate func(*Config)) {
	p := newTestPool(b, benchConfig(mutate))
	g := p.NewGroup("g")
	task := newSignalTask()
	tr := task.turn("ping")
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Enqueue(tr); err != nil {
			b.Fatal(err)
		}
		<-task.done
	}
}

// quotas spreads total one-way sends from producers over groups: producer
// k sends its share to groups k, k+producers, ... round robin. It returns
// each producer's count and each group's expected total.
func quotas(total, producers, groups int) (perProducer []int, perGroup []int) {
	perProducer = make([]int, producers)
	perGroup = make([]int, groups)
	for k := range producers {
		perProducer[k] = total / producers
		if k < total%producers {
			perProducer[k]++
		}
		n := perProducer[k]
		for j := range groups {
			// sends of producer k go to groups (k+i) % groups, i = 0..n-1
			idx := (j - k%groups + groups) % groups
			if idx < n {
				perGroup[j] += (n-idx-1)/groups + 1
			}
		}
	}
	return perProducer, perGroup
}

// countTask is a group's one-way turn: it counts, and reports when the
// group has had all its turns. n is plain: only the group's turns touch it.
type countTask struct {
	n, want int
	wg      *sync.WaitGroup
}

func (c *countTask) Run(*Exec) {
	c.n++
	if c.n == c.want {
		c.wg.Done()
	}
}
func (c *countTask) Done(*Exec, error) {}

var throughputGroups = []int{1, 1000, 100000}

// BenchmarkThroughput: GOMAXPROCS producers outside the pool enqueue
// one-way turns over many groups. ns/op is per turn.
func BenchmarkThroughput(b *testing.B) {
	for _, groups := range throughputGroups {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			p := newTestPool(b, benchConfig(nil))
			gs := make([]*Group, groups)
			for i := range gs {
				gs[i] = p.NewGroup("g")
			}
			runThroughput(b, groups, func(perGroup []int, wg *sync.WaitGroup) func(i int) {
				turns := make([]Turn, groups)
				for i := range gs {
					turns[i] = Turn{Name: "count", Task: &countTask{want: perGroup[i], wg: wg}}
				}
				return func(i int) {
					if err := gs[i].Enqueue(turns[i]); err != nil {
						panic(err)
					}
				}
			})
		})
	}
}

// runThroughput drives b.N one-way sends from GOMAXPROCS producers. setup
// gets each group's expected count and a WaitGroup to Done once per group
// that got all of its turns; it returns the send function.
func runThroughput(b *testing.B, groups int, setup func(perGroup []int, wg *sync.WaitGroup) func(i int)) {
	producers := runtime.GOMAXPROCS(0)
	perProducer, perGroup := quotas(b.N, producers, groups)
	var wg sync.WaitGroup
	for _, n := range perGroup {
		if n > 0 {
			wg.Add(1)
		}
	}
	send := setup(perGroup, &wg)
	b.ReportAllocs()
	b.ResetTimer()
	var start sync.WaitGroup
	start.Add(producers)
	for k := range producers {
		go func() {
			defer start.Done()
			i := k % groups
			for range perProducer[k] {
				send(i)
				if i++; i == groups {
					i = 0
				}
			}
		}()
	}
	start.Wait()
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mturns/s")
}

// BenchmarkBaselineGoroutinePerGroup: the same workload with a goroutine
// per group draining a buffered channel of the same Turn values, calling
// Run and Done as the pool does.
func BenchmarkBaselineGoroutinePerGroup(b *testing.B) {
	for _, groups := range throughputGroups {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			chans := make([]chan Turn, groups)
			var exited sync.WaitGroup
			runThroughput(b, groups, func(perGroup []int, wg *sync.WaitGroup) func(i int) {
				turns := make([]Turn, groups)
				for i := range chans {
					chans[i] = make(chan Turn, 64)
					turns[i] = Turn{Name: "count", Task: &countTask{want: perGroup[i], wg: wg}}
					exited.Add(1)
					go func(c chan Turn) {
						defer exited.Done()
						for t := range c {
							t.Task.Run(nil)
							t.Task.Done(nil, nil)
						}
					}(chans[i])
				}
				return func(i int) { chans[i] <- turns[i] }
			})
			for _, c := range chans {
				close(c)
			}
			exited.Wait()
		})
	}
}

// callTask is the callee's turn in the hand-off benchmark.
type callTask struct{ reply Event }

func (c *callTask) Run(*Exec)               {}
func (c *callTask) Done(e *Exec, err error) { e.Signal(&c.reply) }

// BenchmarkHandoff: a turn in group A calls a turn in group B and waits for
// it, b.N times: the shape of a local grain call. inline takes B's token
// on A's goroutine when B is idle; blocking turns that off, so every call
// hands the processor over and back.
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range []struct {
		name   string
		inline int
	}{{"inline", DefaultConfig().InlineDepth}, {"blocking", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			p := newTestPool(b, benchConfig(func(c *Config) { c.InlineDepth = mode.inline }))
			a, callee := p.NewGroup("a"), p.NewGroup("b")
			call := &callTask{}
			ct := Turn{Name: "call", Task: call}
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			err := a.Enqueue(Turn{Name: "caller", Task: &fn{run: func(e *Exec) {
				for range b.N {
					call.reply.Reset()
					if !e.TryRun(callee, ct) {
						if err := e.Enqueue(callee, ct); err != nil {
							panic(err)
						}
					}
					e.Wait(&call.reply)
				}
			}, done: func(_ *Exec, err error) { done <- err }}})
			if err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// mailbox is protoactor-style dispatch, for comparison: a lock-protected
// queue and a scheduled flag; posting to an idle mailbox starts a goroutine
// that drains it, yielding every throughput messages, and ends when the
// mailbox is empty.
type mailbox struct {
	mu        sync.Mutex
	q         []func()
	scheduled atomic.Bool
}

const mailboxThroughput = 300

func (m *mailbox) post(f func()) {
	m.mu.Lock()
	m.q = append(m.q, f)
	m.mu.Unlock()
	if m.scheduled.CompareAndSwap(false, true) {
		go m.run()
	}
}

func (m *mailbox) run() {
	for i := 1; ; i++ {
		if i%mailboxThroughput == 0 {
			runtime.Gosched()
		}
		m.mu.Lock()
		if len(m.q) == 0 {
			m.mu.Unlock()
			m.scheduled.Store(false)
			// A post between our check and the Store saw scheduled set and
			// started nobody: take the mailbox back if it has work.
			m.mu.Lock()
			empty := len(m.q) == 0
			m.mu.Unlock()
			if empty || !m.scheduled.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		f := m.q[0]
		m.q[0] = nil
		m.q = m.q[1:]
		m.mu.Unlock()
		f()
	}
}

// BenchmarkGoroutinePerRun runs the RoundTrip, Throughput and Handoff
// workloads on protoactor-style mailboxes (a goroutine per run).
func BenchmarkGoroutinePerRun(b *testing.B) {
	b.Run("RoundTrip", func(b *testing.B) {
		var m mailbox
		done := make(chan struct{}, 1)
		f := func() { done <- struct{}{} }
		b.ReportAllocs()
		for b.Loop() {
			m.post(f)
			<-done
		}
	})
	for _, groups := range throughputGroups {
		b.Run(fmt.Sprintf("Throughput/groups=%d", groups), func(b *testing.B) {
			boxes := make([]mailbox, groups)
			runThroughput(b, groups, func(perGroup []int, wg *sync.WaitGroup) func(i int) {
				fs := make([]func(), groups)
				for i := range fs {
					n, want := 0, perGroup[i]
					fs[i] = func() {
						if n++; n == want {
							wg.Done()
						}
					}
				}
				return func(i int) { boxes[i].post(fs[i]) }
			})
		})
	}
	b.Run("Handoff", func(b *testing.B) {
		var a, callee mailbox
		reply := make(chan struct{}, 1)
		call := func() { reply <- struct{}{} }
		done := make(chan struct{})
		b.ReportAllocs()
		b.ResetTimer()
		a.post(func() {
			for range b.N {
				callee.post(call)
				<-reply // a goroutine per run may simply block
			}
			close(done)
		})
		<-done
	})
}
