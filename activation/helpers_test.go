package activation

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/testwait"
	"go.uber.org/goleak"
)

// defaultTestTimeout bounds every wait in the tests. Tests never sleep to
// synchronise; they wait on channels with this bound and fail when it ends.
const defaultTestTimeout = 20 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newTestPool starts a pool with the default config changed by mutate and
// closes it when the test ends.
func newTestPool(t testing.TB, mutate func(*Config)) *Pool {
	t.Helper()
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// fn is a test task built from closures.
type fn struct {
	run  func(e *Exec)
	done func(e *Exec, err error)
}

func (f *fn) Run(e *Exec) {
	if f.run != nil {
		f.run(e)
	}
}

func (f *fn) Done(e *Exec, err error) {
	if f.done != nil {
		f.done(e, err)
	}
}

// turn returns a turn running run whose Done sends its error on done.
func turn(name string, run func(e *Exec), done chan<- error) Turn {
	return Turn{Name: name, Task: &fn{run: run, done: func(_ *Exec, err error) {
		if done != nil {
			done <- err
		}
	}}}
}

// recv waits for one value from c, failing the test after defaultTestTimeout.
func recv[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	return testwait.Recv(t, c, defaultTestTimeout, what)
}

// waitUntil polls cond until it holds, failing the test after
// defaultTestTimeout. It is for conditions with no channel to wait on.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, defaultTestTimeout, what, cond)
}

// exclusive checks that code regions of one group never overlap and counts
// how many regions of the whole pool run at once.
type exclusive struct {
	busy atomic.Int32
	bad  atomic.Int32
}

func (x *exclusive) enter(pool *concurrency) {
	if !x.busy.CompareAndSwap(0, 1) {
		x.bad.Add(1)
	}
	pool.enter()
}

func (x *exclusive) leave(pool *concurrency) {
	pool.leave()
	x.busy.Store(0)
}

// concurrency tracks the most regions running at once.
type concurrency struct {
	cur, max atomic.Int32
}

func (c *concurrency) enter() {
	n := c.cur.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.cur.Add(-1) }
