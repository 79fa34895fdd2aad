package local

import (
	"cmp"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"time"

	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/directory"
	"go.uber.org/zap"
)

// The memory collector sheds idle activations while the Go heap is over a
// target, as Orleans 9 sheds activations under memory pressure. It runs
// as rounds of the idle collector's goroutine (collect), on a grid of its
// own interval. A round:
//
//  1. reads the heap: the bytes the last completed GC cycle marked live
//     (/gc/heap/live:bytes), and how many cycles have completed;
//  2. does nothing if the heap is at or under the target, or if no GC
//     cycle has completed since the last round that scanned: until one
//     does, the reading predates that round's deactivations, and acting
//     on it would collect again for memory already being given back (and
//     a round that found nothing would find the same heap);
//  3. otherwise takes the share of the catalog the excess is, as Orleans
//     does (n - n*target/heap of the n activations, at least one), at
//     most MaxPerRound, from the idle activations least recently used:
//     one scan of the catalog picks the oldest by the time each went idle
//     (lifecycle.Machine.IdleSince) into a bounded heap, and each chosen
//     one is then collected by its lifecycle (PressureTick) under its
//     lock, after the same busy check the idle collector makes.
//
// Why the live heap, not the heap's objects now
// (/memory/classes/heap/objects:bytes): the latter counts garbage not yet
// collected, which between cycles grows to about GOGC percent of the live
// heap and falls back at each cycle. A target on it would shed
// activations on every upswing of that sawtooth with the retained memory
// well under the target; the live heap is what activations actually keep,
// and it changes only when a cycle ends, which is what step 2 relies on.
//
// Why the collector waits for a cycle rather than forcing one at once
// (runtime.GC): a forced collection blocks the collector for a whole mark,
// costs CPU on a silo that is already pressed, and comes too early anyway,
// since the deactivations it would measure run afterwards on the scheduler
// (OnDeactivate, and what it writes). Cycles come on their own as the silo
// allocates, which a silo whose heap grows does. A silo that sheds load
// refuses new work and may allocate next to nothing while its heap stays
// over the target, so after staleRounds intervals without a cycle the
// collector runs one. FreeOSMemory would return pages to the OS, which
// does not change the live heap the target is about. A cycle that was
// already marking while a round's activations deactivated still counts
// them; the next round may then take up to one round's worth more than
// needed, bounded by MaxPerRound.
//
// The hot path pays nothing for any of this: the idle time the choice
// reads is the one TurnDone records for idle collection already, and no
// least-recently-used list is kept per call. The scan takes each
// activation's lock once and reads its lifecycle, reading the busy state
// only of those old enough to be kept; it is bound by cache misses, about
// 0.2 µs an activation at 100 000 and 0.5 µs at a million
// (BenchmarkMemoryCollectionScan: half a second for a million), and it
// runs only while the heap is over the target, at most once per GC cycle
// and per interval, on the collector's goroutine.

// MemoryCollectionConfig is the silo's MemoryCollection, and the heap
// reader tests drive it with.
type MemoryCollectionConfig struct {
	HeapTarget  uint64 // 0: off
	Interval    time.Duration
	MaxPerRound int
	// ReadHeap, when set, replaces the reading of runtime/metrics, and
	// CollectGarbage runtime.GC. Tests only. Called on the collector's
	// goroutine.
	ReadHeap       func() HeapReading
	CollectGarbage func()
}

// staleRounds is how many intervals the collector waits, over its target,
// for a GC cycle to come on its own before it runs one.
const staleRounds = 5

// HeapReading is one reading of the Go heap.
type HeapReading struct {
	// Live is the heap, in bytes, the last completed GC cycle found live.
	Live uint64
	// Cycles is how many GC cycles have completed; Live changes only
	// when it moves.
	Cycles uint64
}

// The runtime/metrics names the collector reads.
const (
	heapLiveMetric = "/gc/heap/live:bytes"
	gcCyclesMetric = "/gc/cycles/total:gc-cycles"
)

// metricsHeapReader reads the heap from runtime/metrics, reusing its
// samples: one goroutine only. A metric this Go does not have reads 0,
// which leaves the collector idle rather than failing the silo.
func metricsHeapReader() func() HeapReading {
	samples := []metrics.Sample{{Name: heapLiveMetric}, {Name: gcCyclesMetric}}
	value := func(v metrics.Value) uint64 {
		if v.Kind() != metrics.KindUint64 {
			return 0
		}
		return v.Uint64()
	}
	return func() HeapReading {
		metrics.Read(samples)
		return HeapReading{Live: value(samples[0].Value), Cycles: value(samples[1].Value)}
	}
}

// memCollector is the memory collector's state, between rounds.
// Collector only.
type memCollector struct {
	cfg  MemoryCollectionConfig
	read func() HeapReading
	// scanned: a round scanned the catalog; the next acts only on a
	// reading of a cycle after cyclesAfter, the count read when that
	// round ended.
	scanned     bool
	cyclesAfter uint64
	scannedAt   time.Time
	// emptyNoted: a round over the target found nothing to collect and
	// said so; the next such round stays quiet until one collects or the
	// heap falls under the target.
	emptyNoted bool
	chosen     []lruCandidate // reused between rounds; emptied after each
}

func newMemCollector(cfg MemoryCollectionConfig) *memCollector {
	if cfg.Interval <= 0 || cfg.MaxPerRound < 1 {
		// The silo's config validation refuses them.
		panic("local: memory collection needs a positive interval and MaxPerRound")
	}
	mc := &memCollector{cfg: cfg, read: cfg.ReadHeap}
	if mc.read == nil {
		mc.read = metricsHeapReader()
	}
	if mc.cfg.CollectGarbage == nil {
		mc.cfg.CollectGarbage = runtime.GC
	}
	return mc
}

// collectMemory is one memory round at now. Collector only.
func (s *Runtime) collectMemory(mc *memCollector, now time.Time) {
	h := mc.read()
	target := mc.cfg.HeapTarget
	if h.Live <= target {
		mc.emptyNoted = false
		return
	}
	if mc.scanned && h.Cycles <= mc.cyclesAfter {
		// The reading does not reflect the last round yet. A silo that
		// refuses new work (it sheds load) may allocate too little for a
		// cycle to come for minutes: after staleRounds intervals, run one.
		if now.Sub(mc.scannedAt) < staleRounds*mc.cfg.Interval {
			return
		}
		mc.cfg.CollectGarbage()
		if h = mc.read(); h.Cycles <= mc.cyclesAfter {
			return
		}
		if h.Live <= target {
			mc.emptyNoted = false
			return
		}
	}
	acts := s.Live.Load()
	want := min(surplus(acts, h.Live, target), mc.cfg.MaxPerRound)
	at := now.Sub(s.Epoch)
	mc.chosen = s.leastRecentlyUsed(at, want, mc.chosen[:0])
	n := 0
	for _, c := range mc.chosen {
		if c.a.collectForMemory(at, c.since) {
			n++
		}
	}
	// The collector must not keep the chosen activations reachable: that
	// would keep their memory from the very cycle it waits for.
	clear(mc.chosen)
	mc.chosen = mc.chosen[:0]
	mc.scanned, mc.cyclesAfter, mc.scannedAt = true, mc.read().Cycles, now
	if n == 0 {
		if !mc.emptyNoted {
			s.Log.Info("heap over the memory-collection target, but no idle activation to collect",
				zap.Uint64("heap", h.Live), zap.Uint64("target", target), zap.Int64("activations", acts))
		}
		mc.emptyNoted = true
		return
	}
	s.Overload.MemoryCollections.Add(uint64(n))
	mc.emptyNoted = false
	s.Log.Info("heap over the memory-collection target: collected idle activations, least recently used first",
		zap.Int("collected", n), zap.Int("sought", want), zap.Uint64("heap", h.Live), zap.Uint64("target", target),
		zap.Int64("activations", acts))
}

// surplus is how many of acts activations to collect to bring heap bytes
// down to target, assuming each takes an equal share of the heap: the
// activations beyond acts*target/heap, and at least one while heap is over
// target. The share overstates what an activation holds (the heap holds
// other things), so the estimate errs towards collecting too few, and the
// next round takes more.
func surplus(acts int64, heap, target uint64) int {
	if acts <= 0 || heap <= target {
		return 0
	}
	keep := math.Floor(float64(acts) * (float64(target) / float64(heap)))
	return int(max(float64(acts)-keep, 1))
}

// lruCandidate is an activation the memory collector chose, and the idle
// time it chose it by.
type lruCandidate struct {
	a     *Activation
	since time.Duration
}

// leastRecentlyUsed appends to buf (empty) the idle activations at most n
// in number that went idle first, oldest first: those the lifecycle lets
// collection take (IdleSince) and not busy, of every type that is not
// keep-alive, stateless workers included. It keeps the n oldest seen so
// far in a max-heap on the idle time, so it costs O(m log n) for m
// activations and allocates nothing once buf has room for n. Collector
// only.
func (s *Runtime) leastRecentlyUsed(at time.Duration, n int, buf []lruCandidate) []lruCandidate {
	h := buf[:0]
	if n <= 0 {
		return h
	}
	look := func(a *Activation) bool {
		a.Mu.Lock()
		since, ok := a.life.IdleSince(at)
		// The busy check reads other cache lines of the activation than
		// its lock and lifecycle: asked only of one that would be kept,
		// which once the heap is full is a small part of the catalog.
		ok = ok && (len(h) < n || since < h[0].since) && !a.busyLocked()
		a.Mu.Unlock()
		switch {
		case !ok:
		case len(h) < n:
			h = append(h, lruCandidate{a, since})
			lruUp(h, len(h)-1)
		default:
			h[0] = lruCandidate{a, since}
			lruDown(h, 0)
		}
		return true
	}
	for _, t := range s.Types {
		if t.Opts.KeepAlive {
			continue
		}
		t.Acts.each(look)
		t.Sets.Range(func(_, v any) bool {
			for _, a := range v.(*WorkerSet).Snapshot() {
				look(a)
			}
			return true
		})
	}
	slices.SortFunc(h, func(x, y lruCandidate) int { return cmp.Compare(x.since, y.since) })
	return h
}

// lruUp and lruDown keep h a max-heap on since: h[0] is the most recently
// used of those kept, the first to give way to an older one.
func lruUp(h []lruCandidate, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].since >= h[i].since {
			return
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func lruDown(h []lruCandidate, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && h[r].since > h[l].since {
			c = r
		}
		if h[i].since >= h[c].since {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// collectForMemory collects the activation for memory pressure if it is
// still as the collector chose it, idle since since: the busy check and
// the lifecycle's decision are made under one hold of Mu, as collectIdle
// makes them, so a request that arrives after it is held by a lifecycle
// already Deactivating and rerouted to a new activation, never lost. It
// reports whether the deactivation began.
func (a *Activation) collectForMemory(at, since time.Duration) bool {
	a.Mu.Lock()
	r := a.life.PressureTick(at, since, a.busyLocked())
	a.unlockDo(nil, r, nil, directory.Entry{})
	return r.Has(lifecycle.BeginDeactivate)
}
