package overload

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	window   = 5 * time.Second
	interval = time.Second // window / DefaultSamples
	cores    = 4
)

// rig is a Monitor on a fake clock whose CPU, heap and latency samplers
// report what the test feeds them. The samplers are atomics because the
// monitor's goroutine reads them in the test that starts it.
type rig struct {
	t                   *testing.T
	clock               *clockwork.FakeClock
	cpu                 atomic.Int64  // nanoseconds of CPU used so far
	heap                atomic.Uint64 // bytes
	m                   *Monitor
	logs                *observer.ObservedLogs
	cpuCalls, heapCalls atomic.Int64
	gcCycles, gcRuns    atomic.Uint64 // collections completed; those the monitor ran
	waited              atomic.Int64  // nanoseconds taken by the requests ended so far
	started, waitsCalls atomic.Uint64
}

func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	r := &rig{t: t, clock: clockwork.NewFakeClock()}
	core, logs := observer.New(zap.InfoLevel)
	r.logs = logs
	cfg.Clock = r.clock
	cfg.CPUTime = func() time.Duration { r.cpuCalls.Add(1); return time.Duration(r.cpu.Load()) }
	cfg.Cores = func() int { return cores }
	cfg.Heap = func() uint64 { r.heapCalls.Add(1); return r.heap.Load() }
	cfg.GCCycles = r.gcCycles.Load
	cfg.Latencies = func() (time.Duration, uint64) {
		r.waitsCalls.Add(1)
		return time.Duration(r.waited.Load()), r.started.Load()
	}
	cfg.CollectGarbage = func() { r.gcRuns.Add(1); r.gcCycles.Add(1) }
	cfg.Logger = zap.New(core)
	if cfg.Window == 0 {
		cfg.Window = window
	}
	if cfg.Hysteresis == 0 {
		cfg.Hysteresis = 0.9
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	m.sample() // the first sample, as Start takes it
	return r
}

// feed makes the next interval use cpu (a fraction of the cores) with a
// heap of heap bytes, then samples.
func (r *rig) feed(cpu float64, heap uint64) {
	r.load(cpu, heap)
	r.clock.Advance(interval)
	r.m.sample()
}

// load sets what the samplers report at the end of the next interval.
func (r *rig) load(cpu float64, heap uint64) {
	r.cpu.Add(int64(cpu * float64(interval) * cores))
	r.heap.Store(heap)
}

// feedLatencies makes n requests, which took total between them, end in
// the next interval, then samples.
func (r *rig) feedLatencies(n uint64, total time.Duration) {
	r.started.Add(n)
	r.waited.Add(int64(total))
	r.feed(0, 0)
}

// feedLatenciesWindow feeds a whole window of intervals like feedLatencies'.
func (r *rig) feedLatenciesWindow(n uint64, total time.Duration) {
	for range DefaultSamples {
		r.feedLatencies(n, total)
	}
}

// feedWindow feeds a whole window of one load.
func (r *rig) feedWindow(cpu float64, heap uint64) {
	for range DefaultSamples {
		r.feed(cpu, heap)
	}
}

func (r *rig) wantShedding(want bool, when string) {
	r.t.Helper()
	if got := r.m.Shedding(); got != want {
		ms, _ := r.m.Measures()
		r.t.Fatalf("%s: shedding %v, want %v (averages %+v)", when, got, want, ms)
	}
}

// transitions counts the start and stop log lines.
func (r *rig) transitions() (started, stopped int) {
	return r.logs.FilterMessageSnippet("load shedding started").Len(), r.logs.FilterMessageSnippet("load shedding stopped").Len()
}

func TestNoDecisionBeforeAWholeWindow(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.95})
	for i := range DefaultSamples - 1 {
		r.feed(1, 0)
		r.wantShedding(false, "after "+strconv.Itoa(i+1)+" of the window's intervals at full CPU")
	}
	if _, ok := r.m.Measures(); ok {
		t.Fatal("Measures reported averages before a whole window")
	}
	r.feed(1, 0)
	r.wantShedding(true, "after a whole window at full CPU")
}

func TestShedsWhenCPUAverageIsOverTheLimit(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.95})
	r.feedWindow(0.94, 0)
	r.wantShedding(false, "a window at 94% of the cores")
	if ms, _ := r.m.Measures(); ms.CPU < 0.939 || ms.CPU > 0.941 {
		t.Fatalf("CPU average %v, want 0.94", ms.CPU)
	}
	r.feedWindow(0.96, 0)
	r.wantShedding(true, "a window at 96% of the cores")
	if got, want := r.m.Reason(), "cpu 96% over limit 95%"; got != want {
		t.Fatalf("Reason %q, want %q", got, want)
	}
}

// TestCPUIsAveragedOverTheWindow: one interval of full use in a window
// of otherwise moderate use is not overload, while a whole window a
// little over the limit is.
func TestCPUIsAveragedOverTheWindow(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.95})
	r.feedWindow(0.9, 0)
	r.feed(1, 0) // the window: 0.9, 0.9, 0.9, 0.9, 1
	r.wantShedding(false, "one interval of full use among four at 90%")
	if ms, _ := r.m.Measures(); ms.CPU < 0.919 || ms.CPU > 0.921 {
		t.Fatalf("CPU average %v, want 0.92 over the window", ms.CPU)
	}
	r.feed(1, 0)
	r.feed(1, 0) // 0.9, 0.9, 1, 1, 1: 0.96
	r.wantShedding(true, "three intervals of full use among five")
}

// TestCPUAverageUsesTheTimeThatPassed: a sample the goroutine took late
// covers a longer interval, and the average divides by the time that
// passed, not by the nominal interval.
func TestCPUAverageUsesTheTimeThatPassed(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.95})
	for range DefaultSamples {
		r.cpu.Add(int64(0.5 * float64(2*interval) * cores)) // half the cores for two seconds
		r.clock.Advance(2 * interval)
		r.m.sample()
	}
	if ms, _ := r.m.Measures(); ms.CPU < 0.499 || ms.CPU > 0.501 {
		t.Fatalf("CPU average %v over intervals twice as long, want 0.5", ms.CPU)
	}
}

func TestStopsSheddingOnlyUnderHysteresisTimesTheLimit(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.95, Hysteresis: 0.9}) // stops under 85.5%
	r.feedWindow(0.97, 0)
	r.wantShedding(true, "a window at 97%")
	r.feedWindow(0.9, 0)
	r.wantShedding(true, "a window at 90%: under the limit, not under 85.5%")
	if got, want := r.m.Reason(), "cpu 90%, not yet under 85.5%"; got != want {
		t.Fatalf("Reason %q, want %q", got, want)
	}
	r.feedWindow(0.86, 0)
	r.wantShedding(true, "a window at 86%")
	r.feedWindow(0.85, 0)
	r.wantShedding(false, "a window at 85%")
	if got := r.m.Reason(); got != "" {
		t.Fatalf("Reason %q once shedding stopped, want none", got)
	}
	if started, stopped := r.transitions(); started != 1 || stopped != 1 {
		t.Fatalf("%d start and %d stop log lines, want one of each", started, stopped)
	}
}

// TestNoFlappingAtTheLimit: a load that swings either side of the limit
// from one interval to the next turns shedding on once and keeps it on,
// because the swings stay above the hysteresis floor.
func TestNoFlappingAtTheLimit(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.95, Hysteresis: 0.9})
	shedding := false
	changes := 0
	for i := range 40 {
		cpu := 0.93
		if i%2 == 0 {
			cpu = 0.98
		}
		r.feed(cpu, 0)
		if s := r.m.Shedding(); s != shedding {
			shedding = s
			changes++
		}
	}
	if changes != 1 || !shedding {
		t.Fatalf("shedding changed %d times and ends %v, want once, to on", changes, shedding)
	}
	if started, stopped := r.transitions(); started != 1 || stopped != 0 {
		t.Fatalf("%d start and %d stop log lines, want one start", started, stopped)
	}
}

// TestHysteresisOneStillHoldsAtTheLimit: with no band, a load exactly at
// the limit neither starts nor stops shedding.
func TestHysteresisOneStillHoldsAtTheLimit(t *testing.T) {
	r := newRig(t, Config{HeapLimit: 1000, Hysteresis: 1})
	r.feedWindow(0, 1000)
	r.wantShedding(false, "a heap exactly at the limit")
	r.feedWindow(0, 1001)
	r.wantShedding(true, "a heap over the limit")
	r.feedWindow(0, 1000)
	r.wantShedding(true, "a heap back at the limit")
	r.feedWindow(0, 999)
	r.wantShedding(false, "a heap under the limit")
}

func TestShedsForHeapAlone(t *testing.T) {
	const gib = 1 << 30
	r := newRig(t, Config{HeapLimit: gib})
	r.feedWindow(1, gib-1) // full CPU, which has no limit
	r.wantShedding(false, "full CPU with no CPU limit, heap under its limit")
	if n := r.cpuCalls.Load(); n != 0 {
		t.Fatalf("the CPU was sampled %d times with no CPU limit", n)
	}
	r.feedWindow(1, gib+gib/5)
	r.wantShedding(true, "a heap of 1.2 GiB")
	if got, want := r.m.Reason(), "heap 1.2 GiB over limit 1 GiB"; got != want {
		t.Fatalf("Reason %q, want %q", got, want)
	}
}

func TestShedsForCPUAlone(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.5})
	r.feedWindow(0.4, 1<<50) // a huge heap, which has no limit
	r.wantShedding(false, "a huge heap with no heap limit, CPU under its limit")
	if n := r.heapCalls.Load(); n != 0 {
		t.Fatalf("the heap was sampled %d times with no heap limit", n)
	}
	if n := r.waitsCalls.Load(); n != 0 {
		t.Fatalf("the latencies were sampled %d times with no latency limit", n)
	}
	r.feedWindow(0.6, 1<<50)
	r.wantShedding(true, "CPU over its limit")
}

// TestHeapIsAveragedOverTheWindow: the heap average is the mean of the
// window's samples, so one spike does not shed.
func TestHeapIsAveragedOverTheWindow(t *testing.T) {
	r := newRig(t, Config{HeapLimit: 1000})
	r.feedWindow(0, 800)
	r.feed(0, 1500) // 800, 800, 800, 800, 1500: 940
	r.wantShedding(false, "one sample over the limit")
	if ms, _ := r.m.Measures(); ms.Heap != 940 {
		t.Fatalf("heap average %d, want 940", ms.Heap)
	}
	r.feed(0, 1500) // 800, 800, 800, 1500, 1500: 1080
	r.wantShedding(true, "two samples over the limit")
}

// TestEveryMeasureMustBeCalmToStop: shedding that the CPU started goes
// on while the heap is in its band, and stops once both are under.
func TestEveryMeasureMustBeCalmToStop(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.9, HeapLimit: 1000, Hysteresis: 0.8})
	r.feedWindow(0.95, 850)
	r.wantShedding(true, "CPU over its limit")
	if got, want := r.m.Reason(), "cpu 95% over limit 90%, heap 850 B, not yet under 800 B"; got != want {
		t.Fatalf("Reason %q, want %q", got, want)
	}
	r.feedWindow(0.5, 850)
	r.wantShedding(true, "CPU calm, heap in its band")
	r.feedWindow(0.5, 790)
	r.wantShedding(false, "both under their floors")
}

// TestLatencyDoesNotShed: a latency over LatencyLimit raises no flag, for
// the Limiter acts on it instead; the window's mean is still measured.
func TestLatencyDoesNotShed(t *testing.T) {
	r := newRig(t, Config{LatencyLimit: 200 * time.Millisecond})
	r.feedLatenciesWindow(3, 1237*time.Millisecond) // 412.33ms each
	r.wantShedding(false, "a window of 412ms latencies")
	if ms, _ := r.m.Measures(); ms.Latency != 5*1237*time.Millisecond/15 {
		t.Fatalf("latency %v, want %v", ms.Latency, 5*1237*time.Millisecond/15)
	}
	if got := r.m.Reason(); got != "" {
		t.Fatalf("Reason %q, want none", got)
	}
}

// TestLatencyIsTheMeanPerRequest: the latency weighs every request that
// ended alike, not every interval, so one slow request among many quick
// ones counts for one request; the mean of the intervals' means would be
// 280ms.
func TestLatencyIsTheMeanPerRequest(t *testing.T) {
	r := newRig(t, Config{LatencyLimit: 200 * time.Millisecond})
	r.feedLatencies(1, time.Second)
	for range DefaultSamples - 1 {
		r.feedLatencies(9, 9*100*time.Millisecond)
	}
	if ms, _ := r.m.Measures(); ms.Latency != 4600*time.Millisecond/37 {
		t.Fatalf("latency %v, want %v", ms.Latency, 4600*time.Millisecond/37)
	}
}

// TestNoLatencyWhenNothingEnded: a window in which no request ended has
// no latency to report, so its latency is 0, even after a window of slow
// requests.
func TestNoLatencyWhenNothingEnded(t *testing.T) {
	r := newRig(t, Config{LatencyLimit: 200 * time.Millisecond})
	r.feedLatenciesWindow(0, 0)
	r.wantShedding(false, "a window in which nothing started")
	if ms, ok := r.m.Measures(); !ok || ms.Latency != 0 {
		t.Fatalf("latency %v (measured %v), want 0", ms.Latency, ok)
	}
	r.feedLatenciesWindow(4, 4*time.Second)
	if ms, _ := r.m.Measures(); ms.Latency != time.Second {
		t.Fatalf("latency %v, want 1s", ms.Latency)
	}
	r.feedLatenciesWindow(0, 0)
	if ms, _ := r.m.Measures(); ms.Latency != 0 {
		t.Fatalf("latency %v once nothing ended, want 0", ms.Latency)
	}
}

// TestSamplesOnItsClockUntilClose runs the monitor's goroutine: it
// samples each interval of its clock, raises the flag it was given, and
// on Close stops (goleak checks) and lowers the flag.
func TestSamplesOnItsClockUntilClose(t *testing.T) {
	clock := clockwork.NewFakeClock()
	var cpu atomic.Int64
	var flag atomic.Bool
	m, err := New(Config{
		CPULimit: 0.95, Window: window, Hysteresis: 0.9, Clock: clock, Flag: &flag,
		CPUTime: func() time.Duration { return time.Duration(cpu.Load()) },
		Cores:   func() int { return 1 },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.Start(context.Background())
	defer m.Close()
	for i := range DefaultSamples {
		if err := clock.BlockUntilContext(ctx, 1); err != nil { // the timer is set for the next sample
			t.Fatalf("the monitor did not wait for sample %d: %v", i+2, err)
		}
		if flag.Load() {
			t.Fatalf("shedding after %d intervals, before a whole window", i)
		}
		cpu.Add(int64(interval)) // the whole core
		clock.Advance(interval)
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if !flag.Load() || !m.Shedding() {
		t.Fatal("not shedding after a window at full CPU")
	}
	m.Close()
	if flag.Load() {
		t.Fatal("the flag is still up after Close")
	}
}

// TestStopsWhenItsContextEnds: the silo passes a context that ends when
// it closes, so a graceful stop ends the goroutine too.
func TestStopsWhenItsContextEnds(t *testing.T) {
	m, err := New(Config{HeapLimit: 1, Window: window, Hysteresis: 1, Clock: clockwork.NewFakeClock(), Heap: func() uint64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.Start(ctx)
	cancel()
	m.wg.Wait() // returns only once the goroutine has seen the context end
}

func TestNewRefusesAnUnusableConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no limit", Config{Window: window, Hysteresis: 0.9}, "none of"},
		{"negative latency limit", Config{LatencyLimit: -time.Millisecond, Window: window, Hysteresis: 0.9, Latencies: func() (time.Duration, uint64) { return 0, 0 }}, "LatencyLimit"},
		{"latency limit without Latencies", Config{LatencyLimit: time.Second, Window: window, Hysteresis: 0.9}, "Latencies"},
		{"negative floor", Config{LatencyLimit: time.Second, MinLimit: -1, Window: window, Hysteresis: 0.9, Latencies: func() (time.Duration, uint64) { return 0, 0 }}, "MinLimit"},
		{"negative CPU limit", Config{CPULimit: -1, Window: window, Hysteresis: 0.9}, "CPULimit"},
		{"no window", Config{CPULimit: 0.9, Hysteresis: 0.9}, "Window"},
		{"hysteresis over 1", Config{CPULimit: 0.9, Window: window, Hysteresis: 1.1}, "Hysteresis"},
		{"hysteresis 0", Config{CPULimit: 0.9, Window: window}, "Hysteresis"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New returned %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// TestDefaultSamplersMeasureThisProcess checks the real samplers against
// work this test does: CPU time grows while it spins, and the live heap
// counts what it keeps reachable across a collection.
func TestDefaultSamplersMeasureThisProcess(t *testing.T) {
	before := ProcessCPUTime()
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	if got := ProcessCPUTime() - before; got <= 0 {
		t.Fatalf("ProcessCPUTime grew by %v over 50 ms of spinning (%d loops)", got, x)
	}
	keep := make([]byte, 64<<20)
	runtime.GC()
	if got := LiveHeap(); got < 64<<20 {
		t.Fatalf("LiveHeap %d with 64 MiB kept live", got)
	}
	runtime.KeepAlive(keep)
}

// TestCollectsGarbageWhileShedForAStaleHeap: while the heap keeps the
// monitor shedding and no garbage collection completes, it runs one once a
// window, since the live heap it reads changes only then; it runs none
// while collections come on their own, or while it does not shed.
func TestCollectsGarbageWhileShedForAStaleHeap(t *testing.T) {
	const gib = 1 << 30
	r := newRig(t, Config{HeapLimit: gib})
	r.feedWindow(0, gib/2)
	r.feedWindow(0, gib/2)
	if n := r.gcRuns.Load(); n != 0 {
		t.Fatalf("ran %d collections while not shedding", n)
	}
	r.feedWindow(0, 2*gib)
	r.wantShedding(true, "a heap of 2 GiB")
	r.feedWindow(0, 2*gib) // no collection completes on its own
	if n := r.gcRuns.Load(); n != 1 {
		t.Fatalf("ran %d collections in a window without one, want 1", n)
	}
	r.feedWindow(0, 2*gib)
	if n := r.gcRuns.Load(); n != 2 {
		t.Fatalf("ran %d collections after two such windows, want 2", n)
	}
	for range 2 * DefaultSamples { // collections complete on their own
		r.gcCycles.Add(1)
		r.feed(0, 2*gib)
	}
	if n := r.gcRuns.Load(); n != 2 {
		t.Fatalf("ran %d collections though they came on their own, want still 2", n)
	}
}
