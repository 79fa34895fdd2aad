package activation

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// gatedGroup makes a group whose first turn holds the group (and a
// processor) until gate is closed, then fills the group's queue with
// more turns up to queued in all, gate included. Each turn after the gate
// adds one to ran. It returns the group once the gate turn is running.
func gatedGroup(t *testing.T, p *Pool, queued int, ran *atomic.Int32, done chan error) (g *Group, gate chan struct{}) {
	t.Helper()
	g = p.NewGroup("gated")
	gate = make(chan struct{})
	started := make(chan struct{})
	if err := g.Enqueue(turn("gate", func(*Exec) { close(started); <-gate }, done)); err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the gate turn to start")
	for range queued - 1 {
		if err := g.Enqueue(turn("filler", func(*Exec) { ran.Add(1) }, done)); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.Stats().QueueLen; n != queued {
		t.Fatalf("queue length = %d; want %d", n, queued)
	}
	return g, gate
}

// flowFixture is a pool with flow-control mark `mark` and a gated group
// holding mark turns: the setup of the EnqueueWait tests.
type flowFixture struct {
	p    *Pool
	g    *Group
	gate chan struct{}
	ran  *atomic.Int32
	done chan error
}

func newFlowFixture(t *testing.T, mark int) *flowFixture {
	t.Helper()
	f := &flowFixture{ran: new(atomic.Int32), done: make(chan error, 2*mark)}
	f.p = newTestPool(t, func(c *Config) { c.MaxQueuedTurns = mark })
	f.g, f.gate = gatedGroup(t, f.p, mark, f.ran, f.done)
	return f
}

// waitFeeder waits until an EnqueueWait caller waits for room in g.
func waitFeeder(t *testing.T, g *Group) {
	t.Helper()
	waitUntil(t, "a feeder to wait for room", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.roomc != nil
	})
}

// TestEnqueueWaitWaitsForDrain: a feeder that finds the group at the mark
// goes on only after the group drained to a quarter of it, and its turn
// then runs after the others.
func TestEnqueueWaitWaitsForDrain(t *testing.T) {
	const mark = 8
	f := newFlowFixture(t, mark)
	g, gate, ran, done := f.g, f.gate, f.ran, f.done

	ranAtReturn := make(chan int32, 1)
	last := make(chan int32, 1)
	go func() {
		err := g.EnqueueWait(context.Background(), turn("fed", func(*Exec) { last <- ran.Load() }, done))
		if err != nil {
			t.Error(err)
		}
		ranAtReturn <- ran.Load()
	}()
	waitFeeder(t, g)
	close(gate)
	got := recv(t, ranAtReturn, "EnqueueWait to return")
	// Draining to mark/4 = 2 queued turns means at least mark-2 of the
	// mark-1 fillers ran (the gate left first).
	if got < mark-2 {
		t.Errorf("EnqueueWait returned after %d fillers ran; want at least %d", got, mark-2)
	}
	if n := recv(t, last, "the fed turn to run"); n != mark-1 {
		t.Errorf("fed turn ran after %d fillers; want all %d before it", n, mark-1)
	}
	for range mark + 1 {
		if err := recv(t, done, "turns to finish"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEnqueueWaitContextEnds: a feeder whose context ends while the group
// is full gets the context's error, and its turn is not queued.
func TestEnqueueWaitContextEnds(t *testing.T) {
	const mark = 4
	f := newFlowFixture(t, mark)
	g, gate, done := f.g, f.gate, f.done
	defer close(gate)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- g.EnqueueWait(ctx, turn("never", func(*Exec) { t.Error("a turn whose EnqueueWait failed ran") }, done))
	}()
	waitFeeder(t, g)
	cancel()
	if err := recv(t, errc, "EnqueueWait to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("EnqueueWait error = %v; want context.Canceled", err)
	}
	if n := g.Stats().QueueLen; n != mark {
		t.Errorf("queue length = %d after a failed EnqueueWait; want %d", n, mark)
	}
}

// TestEnqueueWaitClose: Close wakes a waiting feeder with ErrClosed.
func TestEnqueueWaitClose(t *testing.T) {
	const mark = 4
	f := newFlowFixture(t, mark)
	p, g, gate, done := f.p, f.g, f.gate, f.done

	errc := make(chan error, 1)
	go func() {
		errc <- g.EnqueueWait(context.Background(), turn("never", nil, done))
	}()
	waitFeeder(t, g)
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	if err := recv(t, errc, "EnqueueWait to see Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("EnqueueWait error = %v; want ErrClosed", err)
	}
	close(gate) // Close waits for the running gate turn
	recv(t, closed, "Close to return")
	// The gate finished; the mark-1 queued fillers were dropped.
	for range mark {
		<-done
	}
	if err := g.EnqueueWait(context.Background(), turn("late", nil, nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("EnqueueWait after Close = %v; want ErrClosed", err)
	}
}

// TestEnqueueWaitOffAndNil: with MaxQueuedTurns 0 EnqueueWait never waits;
// a nil task is refused.
func TestEnqueueWaitOffAndNil(t *testing.T) {
	p := newTestPool(t, func(c *Config) { c.MaxQueuedTurns = 0 })
	var ran atomic.Int32
	const n = 5000
	done := make(chan error, n+1)
	g, gate := gatedGroup(t, p, 2, &ran, done)
	for range n - 2 {
		if err := g.EnqueueWait(context.Background(), turn("more", func(*Exec) { ran.Add(1) }, done)); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	for range n - 1 {
		if err := recv(t, done, "turns to finish"); err != nil {
			t.Fatal(err)
		}
	}
	if got := ran.Load(); got != n-1 {
		t.Errorf("ran %d turns; want %d", got, n-1)
	}
	if err := g.EnqueueWait(context.Background(), Turn{Name: "nil"}); !errors.Is(err, ErrNilTask) {
		t.Errorf("EnqueueWait(nil task) = %v; want ErrNilTask", err)
	}
}
