package local

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// scanRuntime is a runtime that is never opened, whose catalog the test
// fills with activations made Active by hand: enough for the memory
// collector's choice, which reads only the catalog and each activation's
// lifecycle and busy state under its lock.
func scanRuntime() *Runtime {
	return New(Config{Clock: clockwork.NewFakeClock(), Logger: zap.NewNop()})
}

// addType registers a type named name on s, keep-alive if asked.
func addType(s *Runtime, name string, keepAlive bool) *GrainType {
	t := &GrainType{Desc: &grain.ServiceDesc{Type: name}, Opts: grain.TypeOptions{KeepAlive: keepAlive}}
	s.Types[name] = t
	return t
}

// addIdle puts an Active activation of t in the catalog, idle since
// since.
func addIdle(s *Runtime, t *GrainType, key string, since time.Duration) *Activation {
	a := &Activation{s: s, typ: t, ID: grain.NewID(t.Desc.Type, key), ActID: s.NextActID.Add(1)}
	a.life.Registered()
	a.life.ActivateDone(false, since)
	if _, loaded := t.Acts.loadOrStore(key, a); loaded {
		panic("duplicate key " + key)
	}
	s.Live.Add(1)
	return a
}

// TestLeastRecentlyUsedPicksTheOldestIdle: the memory collector's scan
// returns, oldest first, the n activations that went idle first among
// those it may take; it passes by busy ones, ones kept by
// DelayDeactivation, ones with a deactivation pending, and every
// activation of a keep-alive type, however long idle.
func TestLeastRecentlyUsedPicksTheOldestIdle(t *testing.T) {
	t.Parallel()
	s := scanRuntime()
	plain, kept := addType(s, "t.Plain", false), addType(s, "t.Kept", true)
	at := 10 * time.Hour
	rng := rand.New(rand.NewPCG(1, 2))
	var eligible []time.Duration
	for i := range 500 {
		since := time.Duration(rng.IntN(int(at/time.Millisecond))) * time.Millisecond
		a := addIdle(s, plain, fmt.Sprint(i), since)
		switch i % 5 {
		case 0:
			a.ticksRunning = 1 // busy: an interleaving tick runs
		case 1:
			a.life.DelayDeactivation(at-time.Minute, time.Hour) // kept past at
		case 2:
			a.life.Deactivate(grain.DeactivateRequested, false) // pending
		default:
			eligible = append(eligible, since)
		}
		addIdle(s, kept, fmt.Sprint(i), since/2) // older than all, but keep-alive
	}
	slices.Sort(eligible)
	for _, n := range []int{1, 7, 100, len(eligible), len(eligible) + 50} {
		got := s.leastRecentlyUsed(at, n, nil)
		var since []time.Duration
		for _, c := range got {
			since = append(since, c.since)
		}
		want := eligible[:min(n, len(eligible))]
		if !slices.Equal(since, want) {
			t.Fatalf("n=%d: chose idle times %v, want %v", n, since, want)
		}
		for _, c := range got {
			if c.a.typ != plain {
				t.Fatalf("n=%d: chose %s of a keep-alive type", n, c.a.ID)
			}
			c.a.Mu.Lock()
			busy, pending := c.a.busyLocked(), c.a.DeactivationPending()
			c.a.Mu.Unlock()
			if busy || pending {
				t.Fatalf("n=%d: chose %s: busy=%t pending=%t", n, c.a.ID, busy, pending)
			}
		}
	}
}

// TestSurplusIsTheExcessShare: a round seeks the share of the
// activations that the heap's excess over the target is, at least one
// while over the target, none at or under it.
func TestSurplusIsTheExcessShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		acts         int64
		heap, target uint64
		want         int
	}{
		{acts: 1000, heap: 2000, target: 1000, want: 500},
		{acts: 1000, heap: 1250, target: 1000, want: 200},
		{acts: 10, heap: 1000, target: 900, want: 1},
		{acts: 1000, heap: 1001, target: 1000, want: 1}, // just over: one
		{acts: 1000, heap: 1000, target: 1000, want: 0},
		{acts: 1000, heap: 500, target: 1000, want: 0},
		{acts: 0, heap: 2000, target: 1000, want: 0},
		{acts: 3, heap: 1 << 40, target: 1, want: 3},
	} {
		if got := surplus(tc.acts, tc.heap, tc.target); got != tc.want {
			t.Errorf("surplus(%d activations, heap %d, target %d) = %d, want %d", tc.acts, tc.heap, tc.target, got, tc.want)
		}
	}
}

// TestMetricsHeapReaderReadsTheLiveHeap: the default reader reads
// runtime/metrics' live heap and GC count; after a forced GC both are
// non-zero and the count has moved.
func TestMetricsHeapReaderReadsTheLiveHeap(t *testing.T) {
	read := metricsHeapReader()
	before := read()
	keep := make([]byte, 8<<20)
	runtime.GC()
	after := read()
	if after.Cycles <= before.Cycles {
		t.Fatalf("GC cycles %d after a GC, were %d", after.Cycles, before.Cycles)
	}
	if after.Live < uint64(len(keep)) {
		t.Fatalf("live heap %d bytes with %d bytes kept", after.Live, len(keep))
	}
	keep[0] = 1
}

// BenchmarkMemoryCollectionScan measures a memory round's choice: one
// scan of a catalog of m idle activations, with random idle times,
// keeping the 1000 least recently used. It reports the cost per
// activation scanned.
func BenchmarkMemoryCollectionScan(b *testing.B) {
	for _, m := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("activations=%d", m), func(b *testing.B) {
			s := scanRuntime()
			typ := addType(s, "t.Plain", false)
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range m {
				addIdle(s, typ, fmt.Sprint(i), time.Duration(rng.Int64N(int64(time.Hour))))
			}
			at := time.Hour
			buf := make([]lruCandidate, 0, 1000)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				buf = s.leastRecentlyUsed(at, 1000, buf[:0])
				if len(buf) != 1000 {
					b.Fatalf("chose %d", len(buf))
				}
				clear(buf)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(m), "ns/activation")
		})
	}
}

// TestCollectForMemoryRechecksUnderLock: between the scan that chose an
// activation and the collector taking it, a request or a timer tick may be
// queued, a turn may end, or DelayDeactivation may be called; the
// collector then leaves the activation, deciding under the lock that also
// orders the request's arrival, so a request never reaches an activation
// the collector takes after it. The one left unchanged is taken.
func TestCollectForMemoryRechecksUnderLock(t *testing.T) {
	t.Parallel()
	s := scanRuntime()
	// A closed scheduler: a deactivate turn cannot be queued, so a
	// collection ends the activation at once (Deactivated), which the
	// test sees without running grain code.
	pool, err := activation.New(activation.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	typ := addType(s, "t.Plain", false)
	at := time.Hour
	add := func(key string, since time.Duration) *Activation {
		a := addIdle(s, typ, key, since)
		a.group = pool.NewGroupOf(a)
		return a
	}
	request := add("request", time.Minute)
	tick := add("tick", 2*time.Minute)
	used := add("used", 3*time.Minute)
	delayed := add("delayed", 4*time.Minute)
	untouched := add("untouched", 5*time.Minute)
	chosen := s.leastRecentlyUsed(at, 5, nil)
	if len(chosen) != 5 {
		t.Fatalf("chose %d of 5 idle activations", len(chosen))
	}

	request.Mu.Lock()
	rc := s.NewCall(1) // a request arrived and was queued; routed again, it fails
	rc.ID, rc.Method = grain.NewID("t.Elsewhere", "k"), &grain.MethodDesc{Name: "M"}
	request.appendLocked(rc)
	request.Mu.Unlock()
	tick.Mu.Lock()
	tc := s.NewCall(1)
	tc.tick = &grainTimer{a: tick}
	tick.appendLocked(tc) // a timer tick was queued
	tick.Mu.Unlock()
	used.Mu.Lock()
	used.life.TurnDone(true, true, false, at-time.Second) // a request ran and ended
	used.Mu.Unlock()
	delayed.Mu.Lock()
	delayed.life.DelayDeactivation(at-time.Second, time.Minute)
	delayed.Mu.Unlock()

	for _, c := range chosen {
		took := c.a.collectForMemory(at, c.since)
		if want := c.a == untouched; took != want {
			t.Errorf("%s: collected=%t, want %t", c.a.ID, took, want)
		}
	}
	for _, a := range []*Activation{request, tick, used, delayed} {
		a.Mu.Lock()
		state, pending := a.Lifecycle(), a.DeactivationPending()
		a.Mu.Unlock()
		if state != lifecycle.Active || pending {
			t.Errorf("%s is %s, pending=%t; want active and nothing pending", a.ID, state, pending)
		}
	}
	if _, ok := typ.Acts.Load("untouched"); ok {
		t.Error("the collected activation is still in the catalog")
	}
}
