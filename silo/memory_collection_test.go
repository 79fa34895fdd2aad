package silo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"
)

// The memory collector, driven through a fake heap reader on the fake
// clock: each test says what the last GC cycle found live, and when a new
// cycle ended, then moves the clock on by one memory interval and waits
// for the collector's round.

// fakeHeap is the heap the memory collector reads in these tests.
type fakeHeap struct {
	mu     sync.Mutex
	live   uint64
	cycles uint64
	reads  int
}

func (f *fakeHeap) read() local.HeapReading {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return local.HeapReading{Live: f.live, Cycles: f.cycles}
}

// gc is a GC cycle ending with live bytes live.
func (f *fakeHeap) gc(live uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = live
	f.cycles++
}

func (f *fakeHeap) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// memTarget is the heap target of these tests; overHeap is far over it,
// so a round seeks every activation, up to MaxPerRound.
const (
	memTarget = 1 << 20
	overHeap  = 1 << 40
	memIv     = time.Second
)

// memOpt configures a memory-collection harness.
type memOpt struct {
	maxPerRound int
	off         bool          // HeapTarget 0
	cfg         func(*Config) // after the memory settings
	register    map[string][]grain.RegisterOption
	before      func(s *Silo) // before Start: more grain types
	logger      *zap.Logger
}

// newMemHarness is newHarness (a fake clock, the probe types) with the
// memory collector on, reading heap, and whatever o adds before Start.
func newMemHarness(t *testing.T, heap *fakeHeap, o memOpt) *harness {
	t.Helper()
	return newHarness(t, harnessOpt{fake: true, register: o.register,
		cfg: func(cfg *Config) {
			cfg.MemoryCollection = MemoryCollectionConfig{HeapTarget: memTarget, Interval: memIv, MaxPerRound: 1000}
			if o.maxPerRound > 0 {
				cfg.MemoryCollection.MaxPerRound = o.maxPerRound
			}
			if o.off {
				cfg.MemoryCollection.HeapTarget = 0
			}
			if o.logger != nil {
				cfg.Logger = o.logger
			}
			if o.cfg != nil {
				o.cfg(cfg)
			}
		},
		before: func(s *Silo) {
			s.rt.Cfg.MemoryCollection.ReadHeap = heap.read
			if o.before != nil {
				o.before(s)
			}
		},
	})
}

// memRound moves the clock on to the next memory round and waits for it.
func memRound(h *harness) {
	h.t.Helper()
	want := h.clock.Now().Add(memIv)
	h.clock.Advance(memIv)
	h.waitCollected(want)
}

// callAt moves the clock on by d and calls probe key, so that it goes
// idle at that time.
func callAt(t *testing.T, h *harness, d time.Duration, key string) uint64 {
	t.Helper()
	h.clock.Advance(d)
	r, err := h.probe(key).Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Activation
}

// collectedOf lists which of keys of typ the collector took (their
// deactivation began, or they are gone).
func collectedOf(h *harness, typ string, keys ...string) []string {
	var out []string
	for _, k := range keys {
		if collected(h, typ, k) {
			out = append(out, k)
		}
	}
	return out
}

// waitEvents waits for every event of want, in any order: deactivations
// begun in one round run in an order the scheduler picks.
func waitEvents(h *harness, want ...string) {
	h.t.Helper()
	left := map[string]bool{}
	for _, w := range want {
		left[w] = true
	}
	testwait.Until(h.t, h.eventc, defaultTestTimeout, fmt.Sprintf("events %q", want), func(e string) bool {
		delete(left, e)
		return len(left) == 0
	})
}

// TestMemoryCollectionTakesLeastRecentlyUsedFirst: while the heap is over
// the target, each round collects up to MaxPerRound idle activations, the
// ones that went idle first, whatever order they were made in, with
// OnDeactivate told memory-pressure; a round acts only on a GC cycle
// newer than the last round that collected; once the heap is under the
// target nothing more is collected. Each collection is counted and each
// round logged; a call to a collected grain gets a new activation.
func TestMemoryCollectionTakesLeastRecentlyUsedFirst(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	core, logs := observer.New(zapcore.InfoLevel)
	h := newMemHarness(t, heap, memOpt{maxPerRound: 2, logger: zap.New(core)})
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	first := map[string]uint64{}
	for _, k := range keys {
		first[k] = callAt(t, h, 10*time.Millisecond, k)
	}
	lru := []string{"k3", "k1", "k5", "k0", "k4", "k2"} // used last in this order
	for _, k := range lru {
		callAt(t, h, 10*time.Millisecond, k)
	}

	heap.gc(overHeap)
	memRound(h)
	if got := collectedOf(h, probe.ProbeGrainType, keys...); !slices.Equal(got, []string{"k1", "k3"}) {
		t.Fatalf("first round collected %v, want the two least recently used [k1 k3]", got)
	}
	waitEvents(h, "deactivate probe.Probe/k3 memory-pressure", "deactivate probe.Probe/k1 memory-pressure")

	memRound(h) // no GC since: the reading predates the deactivations
	if got := collectedOf(h, probe.ProbeGrainType, keys...); len(got) != 2 {
		t.Fatalf("a round on a reading from before the last round collected: %v", got)
	}

	heap.gc(overHeap)
	memRound(h)
	if got := collectedOf(h, probe.ProbeGrainType, keys...); !slices.Equal(got, []string{"k0", "k1", "k3", "k5"}) {
		t.Fatalf("second collecting round left %v collected, want [k0 k1 k3 k5]", got)
	}

	heap.gc(memTarget) // at the target: not over it
	memRound(h)
	heap.gc(memTarget / 2)
	memRound(h)
	if got := collectedOf(h, probe.ProbeGrainType, keys...); len(got) != 4 {
		t.Fatalf("collected %v under the target", got)
	}
	if got := h.s.Stats().Overload.MemoryCollections; got != 4 {
		t.Fatalf("Overload.MemoryCollections = %d, want 4", got)
	}

	rounds := logs.FilterMessageSnippet("memory-collection target").All()
	if len(rounds) != 2 {
		t.Fatalf("logged %d rounds, want 2: %v", len(rounds), rounds)
	}
	for _, e := range rounds {
		f := e.ContextMap()
		if e.Level != zapcore.InfoLevel || f["collected"] != int64(2) || f["heap"] != uint64(overHeap) || f["target"] != uint64(memTarget) {
			t.Fatalf("round logged as %v %q %v, want info with collected 2, heap %d, target %d", e.Level, e.Message, f, uint64(overHeap), memTarget)
		}
	}

	h.waitEvent("deactivate probe.Probe/k5 memory-pressure")
	if again := callAt(t, h, 0, "k3"); again == first["k3"] {
		t.Fatalf("k3 answered by activation %d after it was collected", again)
	}
	if again := callAt(t, h, 0, "k2"); again != first["k2"] {
		t.Fatalf("k2, never collected, answered by activation %d, want %d", again, first["k2"])
	}
}

// TestMemoryCollectionTakesTheExcessShare: a round seeks the share of the
// activations that the heap's excess over the target is (the heap a
// quarter over the target, of ten activations: two), not MaxPerRound.
func TestMemoryCollectionTakesTheExcessShare(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	h := newMemHarness(t, heap, memOpt{})
	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprint("e", i))
		callAt(t, h, 10*time.Millisecond, keys[i])
	}
	heap.gc(memTarget + memTarget/4)
	memRound(h)
	if got := collectedOf(h, probe.ProbeGrainType, keys...); !slices.Equal(got, []string{"e0", "e1"}) {
		t.Fatalf("collected %v, want the two least recently used [e0 e1]", got)
	}
}

// TestMemoryCollectionNeverTakesBusyKeptOrDelayed: however far over the
// target the heap is and however many rounds pass, the collector leaves
// alone an activation running a request (with another queued behind it),
// one of a keep-alive type and one that DelayDeactivation keeps; it takes
// an idle one beside them. The held requests then finish on the
// activation they reached, and once idle it is collected in its turn.
func TestMemoryCollectionNeverTakesBusyKeptOrDelayed(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	h := newMemHarness(t, heap, memOpt{register: map[string][]grain.RegisterOption{
		probe.ReentrantProbeGrainType: {grain.WithKeepAlive()},
	}})
	h.script("delay", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		ctx.DelayDeactivation(time.Hour)
		return &probe.Reply{Activation: ctx.ActivationID()}, nil
	})
	hold := h.hold("busy")
	running := h.probe("busy").CallAsync(context.Background(), &probe.Request{Tag: "busy"}, grain.WithTimeout(time.Hour))
	h.waitEvent("busy start")
	queued := h.probe("busy").CallAsync(context.Background(), &probe.Request{}, grain.WithTimeout(time.Hour))
	testwait.For(t, defaultTestTimeout, "the second request queued at busy", func() bool {
		a := actOf(h, probe.ProbeGrainType, "busy")
		a.Mu.Lock()
		defer a.Mu.Unlock()
		return a.QueuedLocked() == 1
	})
	if _, err := probe.NewReentrantProbeRef(h.s, "kept").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.probe("delayed").Call(testCtx(t), &probe.Request{Tag: "delay"}); err != nil {
		t.Fatal(err)
	}
	callAt(t, h, 10*time.Millisecond, "idle")

	for range 3 {
		heap.gc(overHeap)
		memRound(h)
	}
	h.waitEvent("deactivate probe.Probe/idle memory-pressure")
	if got := collectedOf(h, probe.ProbeGrainType, "busy", "delayed"); len(got) > 0 {
		t.Fatalf("collected %v", got)
	}
	if collected(h, probe.ReentrantProbeGrainType, "kept") {
		t.Fatal("collected the keep-alive grain")
	}

	hold.open()
	for _, p := range []grain.Future[*probe.Reply]{running, queued} {
		if err := p.Wait(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
	heap.gc(overHeap)
	memRound(h)
	h.waitEvent("deactivate probe.Probe/busy memory-pressure")
	if got := h.s.Stats().Overload.MemoryCollections; got != 2 {
		t.Fatalf("Overload.MemoryCollections = %d, want 2 (idle, then busy once idle)", got)
	}
}

// TestMemoryCollectionTakesIdleStatelessWorkers: a stateless worker's
// idle activation is collected like any other.
func TestMemoryCollectionTakesIdleStatelessWorkers(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	h := newMemHarness(t, heap, memOpt{})
	if _, err := probe.NewWorkerProbeRef(h.s, "w").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	heap.gc(overHeap)
	memRound(h)
	h.waitEvent("deactivate probe.WorkerProbe/w memory-pressure")
}

// TestMemoryCollectionOffWithoutHeapTarget: with HeapTarget 0 the heap is
// never read and nothing is collected, however large it is.
func TestMemoryCollectionOffWithoutHeapTarget(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	h := newMemHarness(t, heap, memOpt{off: true, cfg: func(c *Config) { c.CollectionInterval = memIv }})
	callAt(t, h, 0, "k")
	for range 5 {
		heap.gc(overHeap)
		memRound(h) // the idle collector's looks, one interval apart
	}
	if collected(h, probe.ProbeGrainType, "k") || h.s.Stats().Overload.MemoryCollections != 0 {
		t.Fatal("collected with memory collection off")
	}
	if n := heap.readCount(); n != 0 {
		t.Fatalf("the heap was read %d times with memory collection off", n)
	}
}

// TestIdleCollectionGoesOnBesideMemoryCollection: with the memory
// collector on and the heap under the target, an idle activation is
// still collected for its age, with reason idle, at the idle collector's
// look; then, over the target, another is collected for memory.
func TestIdleCollectionGoesOnBesideMemoryCollection(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	h := newMemHarness(t, heap, memOpt{cfg: func(c *Config) {
		c.CollectionAge, c.CollectionInterval = 5*time.Second, 2*time.Second
	}})
	heap.gc(memTarget / 2)
	callAt(t, h, 0, "aged")
	for i := range 5 {
		memRound(h)
		if collected(h, probe.ProbeGrainType, "aged") {
			t.Fatalf("collected %v after its call, before its age", time.Duration(i+1)*memIv)
		}
	}
	callAt(t, h, 0, "fresh")
	memRound(h) // 6 s: the look at the grid point past the age
	h.waitEvent("deactivate probe.Probe/aged idle")
	if collected(h, probe.ProbeGrainType, "fresh") {
		t.Fatal("fresh collected under the target")
	}
	heap.gc(overHeap)
	memRound(h)
	h.waitEvent("deactivate probe.Probe/fresh memory-pressure")
	if got := h.s.Stats().Overload.MemoryCollections; got != 1 {
		t.Fatalf("Overload.MemoryCollections = %d, want 1: idle collection is not counted", got)
	}
}

// memRegister is a Register grain whose Set changes the value in memory
// only: OnDeactivate writes it, after waiting on block if set.
type memRegister struct {
	probe.UnimplementedRegisterGrain
	st      *grain.State[*probe.RegisterState]
	block   chan struct{}
	reasons chan string
}

func (g *memRegister) OnActivate(ctx grain.Context) error {
	g.st = registerState.Of(ctx)
	return nil
}

func (g *memRegister) Get(ctx grain.Context, _ *probe.RegisterOp) (*probe.RegisterReply, error) {
	return &probe.RegisterReply{Value: g.st.Value().Value, Activation: ctx.ActivationID()}, nil
}

func (g *memRegister) Set(ctx grain.Context, req *probe.RegisterOp) (*probe.RegisterReply, error) {
	g.st.Value().Value = req.Value
	return &probe.RegisterReply{Value: req.Value, Activation: ctx.ActivationID()}, nil
}

func (g *memRegister) OnDeactivate(ctx grain.Context, reason grain.DeactivationReason) error {
	g.reasons <- ctx.ID().Key + " " + reason.String()
	ctx.Blocking(func() { <-g.block })
	return g.st.Write(ctx)
}

// TestMemoryCollectionWritesStateAndReroutesCalls: a grain collected for
// memory runs OnDeactivate, which writes its state to the storage
// provider; a call that reaches it while it deactivates waits, then goes
// to a new activation, which reads the written state and answers.
func TestMemoryCollectionWritesStateAndReroutesCalls(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	store := storage.NewMemory(0)
	block, reasons := make(chan struct{}), make(chan string, 8)
	var once sync.Once
	unblock := func() { once.Do(func() { close(block) }) }
	h := newMemHarness(t, heap, memOpt{
		cfg: func(c *Config) { c.Storage = map[string]storage.Provider{grain.DefaultStorage: store} },
		before: func(s *Silo) {
			err := probe.RegisterRegisterGrain(s, func(grain.ID) probe.RegisterGrain {
				return &memRegister{block: block, reasons: reasons}
			}, grain.WithState(registerState))
			if err != nil {
				t.Fatal(err)
			}
		},
	})
	t.Cleanup(unblock) // registered after the harness's Stop, so it runs first
	ref := reg(h.s, "r")
	set, err := ref.Set(testCtx(t), &probe.RegisterOp{Value: 42})
	if err != nil {
		t.Fatal(err)
	}

	heap.gc(overHeap)
	memRound(h)
	if got := testwait.Recv(t, reasons, defaultTestTimeout, "OnDeactivate"); got != "r memory-pressure" {
		t.Fatalf("OnDeactivate: %q, want r memory-pressure", got)
	}
	get := ref.GetAsync(context.Background(), &probe.RegisterOp{}, grain.WithTimeout(time.Hour))
	testwait.For(t, defaultTestTimeout, "the call held by the deactivating activation", func() bool {
		a := localActivation(h.s, probe.RegisterGrainType, "r")
		if a == nil {
			return false
		}
		a.Mu.Lock()
		defer a.Mu.Unlock()
		return a.QueuedLocked() == 1
	})
	unblock()
	got, err := get.Await(testCtx(t))
	if err != nil {
		t.Fatalf("a call that reached a collected grain failed: %v", err)
	}
	if got.Activation == set.Activation || got.Value != 42 {
		t.Fatalf("after collection: activation %d (was %d), value %d: want a new activation reading 42", got.Activation, set.Activation, got.Value)
	}
	rec, err := store.ReadState(testCtx(t), grain.NewID(probe.RegisterGrainType, "r"), registerState.StateName())
	if err != nil {
		t.Fatal(err)
	}
	var st probe.RegisterState
	if err := proto.Unmarshal(rec.Data, &st); err != nil || st.Value != 42 {
		t.Fatalf("stored state %v (%v), want value 42", &st, err)
	}
	if n := h.s.Stats().Overload.MemoryCollections; n != 1 {
		t.Fatalf("Overload.MemoryCollections = %d, want 1", n)
	}
}

// TestMemoryCollectionRunsAGCWhenNoneComes: over the target, a round
// waits for a GC cycle after the last one before it collects again; when
// none comes on its own for five intervals (a silo that sheds load
// allocates next to nothing), the collector runs one and carries on.
func TestMemoryCollectionRunsAGCWhenNoneComes(t *testing.T) {
	t.Parallel()
	heap := &fakeHeap{}
	var runs atomic.Int32
	h := newMemHarness(t, heap, memOpt{maxPerRound: 1, before: func(s *Silo) {
		s.rt.Cfg.MemoryCollection.CollectGarbage = func() {
			runs.Add(1)
			heap.gc(overHeap)
		}
	}})
	keys := []string{"g0", "g1", "g2"}
	for _, k := range keys {
		callAt(t, h, 10*time.Millisecond, k)
	}
	heap.gc(overHeap)
	memRound(h)
	for round := 2; round <= 5; round++ {
		memRound(h)
		if got := collectedOf(h, probe.ProbeGrainType, keys...); !slices.Equal(got, []string{"g0"}) || runs.Load() != 0 {
			t.Fatalf("round %d without a GC cycle: collected %v, ran %d GCs; want [g0] and none", round, got, runs.Load())
		}
	}
	memRound(h)
	if got := collectedOf(h, probe.ProbeGrainType, keys...); !slices.Equal(got, []string{"g0", "g1"}) || runs.Load() != 1 {
		t.Fatalf("five intervals without a GC cycle: collected %v, ran %d GCs; want [g0 g1] and one", got, runs.Load())
	}
}
