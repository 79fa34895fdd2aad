package activation

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// spinUntil holds its processor in a loop that calls no scheduler
// function, as grain code stuck in a computation does.
//
//go:noinline
func spinUntil(stop *atomic.Bool) {
	for !stop.Load() {
	}
}

// blockOn holds its processor blocked on a channel, as grain code that
// ignores its context does.
//
//go:noinline
func blockOn(c chan struct{}) { <-c }

// TestCloseAbandonsTurnsThatNeverEnd: with CloseTimeout set, Close returns
// even though one turn spins, one blocks on a channel and one waits for an
// event nobody signals; each is reported with its group, turn, age and
// stack, and once they do end, the pool discards them quietly.
func TestCloseAbandonsTurnsThatNeverEnd(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	cfg := DefaultConfig()
	cfg.Processors = 2
	cfg.CloseTimeout = 200 * time.Millisecond
	cfg.Logger = zap.New(core)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	block := make(chan struct{})
	var ev Event
	started := make(chan string, 3)
	done := make(chan error, 3)
	mustEnqueue(t, p.NewGroup("spinner"), turn("Spin", func(*Exec) { started <- "spin"; spinUntil(&stop) }, done))
	mustEnqueue(t, p.NewGroup("blocker"), turn("Block", func(*Exec) { started <- "block"; blockOn(block) }, done))
	mustEnqueue(t, p.NewGroup("waiter"), turn("Wait", func(e *Exec) { started <- "wait"; e.Wait(&ev) }, done))
	for range 3 {
		recv(t, started, "the turns to start")
	}

	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	recv(t, closed, "Close to return despite the stuck turns")

	got := map[string]AbandonedTurn{}
	for _, a := range p.Abandoned() {
		got[a.Group] = a
	}
	for group, want := range map[string]struct{ turn, frame string }{
		"spinner": {"Spin", "activation.spinUntil"},
		"blocker": {"Block", "activation.blockOn"},
		"waiter":  {"Wait", "activation.(*Exec).Wait"},
	} {
		a, ok := got[group]
		switch {
		case !ok:
			t.Errorf("group %s was not reported abandoned; got %+v", group, p.Abandoned())
		case a.Turn != want.turn:
			t.Errorf("group %s: turn %q, want %q", group, a.Turn, want.turn)
		case a.Running < cfg.CloseTimeout:
			t.Errorf("group %s: running %v, want at least the close timeout %v", group, a.Running, cfg.CloseTimeout)
		case !strings.Contains(a.Stack, want.frame):
			t.Errorf("group %s: the stack does not show %s:\n%s", group, want.frame, a.Stack)
		}
	}
	if !got["waiter"].Waiting || got["spinner"].Waiting {
		t.Errorf("waiting flags: waiter %v, spinner %v; want true, false", got["waiter"].Waiting, got["spinner"].Waiting)
	}
	if n := logs.FilterMessageSnippet("abandoned").Len(); n != 3 {
		t.Errorf("logged %d abandoned turns, want 3", n)
	}
	// A second Close returns at once with the same outcome.
	p.Close()

	// The abandoned turns end late; the pool takes their outcomes and
	// their goroutines exit (the package's goleak check).
	stop.Store(true)
	close(block)
	ev.Signal()
	for range 3 {
		if err := recv(t, done, "an abandoned turn's Done"); err != nil && err != ErrClosed {
			t.Errorf("an abandoned turn ended with %v", err)
		}
	}
	waitUntil(t, "the abandoned goroutines to exit", func() bool { return p.Stats().Workers == 0 })
}

// TestCloseWithoutTimeoutWaitsForTurns: CloseTimeout 0 keeps Close
// waiting for a running turn, and nothing is abandoned.
func TestCloseWithoutTimeoutWaitsForTurns(t *testing.T) {
	p := newTestPool(t, nil)
	release := make(chan struct{})
	started := make(chan string, 1)
	mustEnqueue(t, p.NewGroup("g"), turn("Slow", func(*Exec) { started <- "slow"; <-release }, nil))
	recv(t, started, "the turn to start")
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	waitUntil(t, "Close to begin", p.closed.Load)
	select {
	case <-closed:
		t.Fatal("Close returned while a turn ran and CloseTimeout was 0")
	default:
	}
	close(release)
	recv(t, closed, "Close to return once the turn ended")
	if a := p.Abandoned(); len(a) != 0 {
		t.Fatalf("abandoned %+v, want none", a)
	}
}

func mustEnqueue(t *testing.T, g *Group, tr Turn) {
	t.Helper()
	if err := g.Enqueue(tr); err != nil {
		t.Fatal(err)
	}
}
