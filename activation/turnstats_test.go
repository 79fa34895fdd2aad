package activation

import (
	"testing"
	"time"
)

func TestTurnBucket(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-5, 0},
		{0, 0},
		{1, 0},
		{256, 0},
		{257, 1},
		{512, 1},
		{513, 2},
		{3 * time.Microsecond, 4}, // 3000 ns <= 4096 ns
		{4096, 4},
		{4097, 5},
		{1 << 33, turnBounds - 1},
		{1<<33 + 1, turnBounds},
		{time.Hour, turnBounds},
	} {
		if got := turnBucket(max(int64(tc.d), 0)); got != tc.want {
			t.Errorf("turnBucket(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	h := newTurnHistogram()
	if len(h.Bounds) != turnBounds || len(h.Counts) != turnBuckets || h.SampleEvery != TurnSampleEvery {
		t.Fatalf("histogram shape: %d bounds, %d counts, every %d", len(h.Bounds), len(h.Counts), h.SampleEvery)
	}
	for i, b := range h.Bounds {
		if turnBucket(int64(b)) != i || turnBucket(int64(b)+1) != i+1 {
			t.Errorf("bound %d (%v) is not the top of bucket %d", i, b, i)
		}
	}
}

func TestSampleGap(t *testing.T) {
	e := newExec(nil)
	var sum uint64
	const n = 100_000
	for range n {
		g := e.nextSampleGap()
		if g < 1 || g > 2*TurnSampleEvery-1 {
			t.Fatalf("gap %d out of [1, %d]", g, 2*TurnSampleEvery-1)
		}
		sum += uint64(g)
	}
	if mean := float64(sum) / n; mean < TurnSampleEvery-2 || mean > TurnSampleEvery+2 {
		t.Fatalf("mean gap %.2f, want about %d", mean, TurnSampleEvery)
	}
}

// quietConfig keeps the monitor from preempting or detaching the tests'
// turns, which advance a fake clock.
func quietConfig(c *Config) {
	c.QuantumTime = time.Hour
	c.HandOnAfter = time.Hour
	c.LongTurnWarning = time.Hour
	c.MonitorInterval = time.Hour
}

// runTurns enqueues n turns running run on g and waits for them all.
func runTurns(t *testing.T, g *Group, n int, run func(e *Exec)) {
	t.Helper()
	done := make(chan error, n)
	for range n {
		if err := g.Enqueue(turn("t", run, done)); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := recv(t, done, "a turn"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTurnTimeSampled(t *testing.T) {
	clock := newFakeClock()
	p := newTestPool(t, func(c *Config) {
		quietConfig(c)
		c.Clock = clock
		c.Processors = 2
	})
	const n = 64 * 50
	const took = 3 * time.Microsecond
	runTurns(t, p.NewGroup("g"), n, func(*Exec) { clock.Advance(took) })

	h := p.Stats().TurnTime
	// A worker samples at gaps of at most 2*TurnSampleEvery-1 turns; the
	// group's turns may be shared by a few workers.
	if minimum := uint64(n/(2*TurnSampleEvery-1)) / 2; h.Count < minimum || h.Count > n {
		t.Fatalf("%d samples of %d turns; want %d to %d", h.Count, n, minimum, n)
	}
	want := turnBucket(int64(took))
	for i, c := range h.Counts {
		if i != want && c != 0 {
			t.Errorf("bucket %d (<= %v) has %d samples; every turn took %v", i, h.Bounds[min(i, len(h.Bounds)-1)], c, took)
		}
	}
	if h.Counts[want] != h.Count {
		t.Errorf("bucket %d has %d samples of %d", want, h.Counts[want], h.Count)
	}
	if h.Sum != time.Duration(h.Count)*took {
		t.Errorf("sum %v over %d samples of %v", h.Sum, h.Count, took)
	}
}

func TestTurnTimeSkipsWaitedTurns(t *testing.T) {
	clock := newFakeClock()
	p := newTestPool(t, func(c *Config) {
		quietConfig(c)
		c.Clock = clock
	})
	runTurns(t, p.NewGroup("g"), 64*20, func(e *Exec) {
		e.Blocking(func() { clock.Advance(time.Millisecond) })
	})
	if h := p.Stats().TurnTime; h.Count != 0 {
		t.Fatalf("%d samples of turns that all waited; want none", h.Count)
	}
}

func TestTurnTimeSamplesInlineTurns(t *testing.T) {
	clock := newFakeClock()
	p := newTestPool(t, func(c *Config) {
		quietConfig(c)
		c.Clock = clock
	})
	const outer, inner = 100 * time.Microsecond, 3 * time.Microsecond
	callee := p.NewGroup("callee")
	inlined := 0
	runTurns(t, p.NewGroup("caller"), 64*40, func(e *Exec) {
		clock.Advance(outer)
		if e.TryRun(callee, Turn{Name: "inner", Task: &fn{run: func(*Exec) { clock.Advance(inner) }}}) {
			inlined++
		}
	})
	if inlined == 0 {
		t.Fatal("no turn ran inline")
	}
	h := p.Stats().TurnTime
	if h.Counts[turnBucket(int64(inner))] == 0 {
		t.Fatalf("no sample of an inline turn (%v) among %d: %v", inner, h.Count, h.Counts)
	}
	if h.Counts[turnBucket(int64(outer+inner))] == 0 {
		t.Fatalf("no sample of a calling turn (%v) among %d: %v", outer+inner, h.Count, h.Counts)
	}
}
