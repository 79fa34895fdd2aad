package scenario

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are kept from 1 ns to a minute, to two significant digits
// (1% resolution): enough for p99.9, small enough that every caller can
// have its own histogram.
const (
	minLatency = 1
	maxLatency = int64(time.Minute)
	sigFigs    = 2
)

// A Recorder collects latencies. It is not safe for concurrent use: each
// caller records into its own, and the harness merges them.
type Recorder struct{ h *hdrhistogram.Histogram }

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{h: hdrhistogram.New(minLatency, maxLatency, sigFigs)}
}

// Record adds one latency. Values beyond a minute count as a minute, and
// negative ones as zero.
func (r *Recorder) Record(d time.Duration) {
	v := min(max(int64(d), minLatency), maxLatency)
	_ = r.h.RecordValue(v) // in range by construction
}

// Count is how many latencies were recorded.
func (r *Recorder) Count() int64 { return r.h.TotalCount() }

// Quantile returns the latency at quantile q (0.5 for the median, 0.999 for
// p99.9).
func (r *Recorder) Quantile(q float64) time.Duration {
	return time.Duration(r.h.ValueAtQuantile(q * 100))
}

// Merge adds every latency of o to r.
func (r *Recorder) Merge(o *Recorder) { r.h.Merge(o.h) }

// Reset empties r.
func (r *Recorder) Reset() { r.h.Reset() }

// A SyncRecorder is a Recorder that many goroutines may record into at
// once, for latencies measured inside the system under test (timer ticks).
type SyncRecorder struct {
	mu sync.Mutex
	r  *Recorder
}

// NewSyncRecorder returns an empty SyncRecorder.
func NewSyncRecorder() *SyncRecorder { return &SyncRecorder{r: NewRecorder()} }

// Record adds one latency.
func (s *SyncRecorder) Record(d time.Duration) {
	s.mu.Lock()
	s.r.Record(d)
	s.mu.Unlock()
}

// take returns what was recorded since the last take, and starts afresh.
func (s *SyncRecorder) take() *Recorder {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.r
	s.r = NewRecorder()
	return r
}

// A worker is one caller's loop: it makes calls until stop is set,
// records each call's latency in rec, and returns how many ops it made.
type worker func(ctx context.Context, i int, rec *Recorder, stop *atomic.Bool) (int64, error)

// window is what one measured stretch of a workload produced.
type window struct {
	ops     int64
	elapsed time.Duration
	lat     *Recorder
	mallocs uint64
	bytes   uint64
	cpu     time.Duration
}

// measure runs workers copies of w for d, all started together, and
// then settle (when not nil) before the clock stops: for one-way
// messages, settle waits until the messages sent have been handled.
func measure(ctx context.Context, workers int, d time.Duration, w worker, settle func(context.Context) error) (window, error) {
	recs := make([]*Recorder, workers)
	for i := range recs {
		recs[i] = NewRecorder()
	}
	var stop atomic.Bool
	ops := make([]int64, workers)
	errs := make([]error, workers)

	// Every worker is running before the clock starts, so a measurement
	// of n callers has n callers from its first moment.
	var wg, ready sync.WaitGroup
	begin := make(chan struct{})
	ready.Add(workers)
	for i := range workers {
		wg.Go(func() {
			ready.Done()
			<-begin
			ops[i], errs[i] = w(ctx, i, recs[i], &stop)
		})
	}
	ready.Wait()
	start := snapshot()
	t0 := time.Now()
	close(begin)
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	wg.Wait()
	timer.Stop()
	var err error
	if settle != nil {
		err = settle(ctx)
	}
	elapsed := time.Since(t0)
	end := snapshot()

	win := window{elapsed: elapsed, lat: NewRecorder()}
	win.mallocs, win.bytes, win.cpu = end.diff(start)
	for i, r := range recs {
		win.lat.Merge(r)
		win.ops += ops[i]
		if err == nil && errs[i] != nil {
			err = fmt.Errorf("caller %d: %w", i, errs[i])
		}
	}
	return win, err
}

// warmThenMeasure runs w unmeasured for warmup, then measures it for d.
func warmThenMeasure(ctx context.Context, cfg Config, workers int, w worker, settle func(context.Context) error) (window, error) {
	if cfg.Warmup > 0 {
		if _, err := measure(ctx, workers, cfg.Warmup, w, settle); err != nil {
			return window{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	return measure(ctx, workers, cfg.Duration, w, settle)
}

// calls is the worker that makes one call at a time through c and times
// each: one clock read per call, the end of one call being the start of
// the next.
func calls(c Caller) worker {
	return func(ctx context.Context, i int, rec *Recorder, stop *atomic.Bool) (int64, error) {
		var n int64
		prev := time.Now()
		for !stop.Load() {
			if err := c.Call(ctx, i); err != nil {
				if errors.Is(err, errExhausted) {
					break
				}
				return n, err
			}
			now := time.Now()
			rec.Record(now.Sub(prev))
			prev = now
			n++
		}
		return n, nil
	}
}

// usage is a point-in-time reading of the process: allocations from the
// Go runtime and CPU time from the kernel.
type usage struct {
	mallocs, bytes uint64
	cpu            time.Duration
}

// snapshot reads the process's usage.
func snapshot() usage {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{mallocs: ms.Mallocs, bytes: ms.TotalAlloc, cpu: cpuTime()}
}

// diff returns what happened between u0 and u.
func (u usage) diff(u0 usage) (mallocs, bytes uint64, cpu time.Duration) {
	return u.mallocs - u0.mallocs, u.bytes - u0.bytes, u.cpu - u0.cpu
}

// liveMemory collects garbage twice (the second pass frees what
// finalizers of the first released) and returns the live heap plus the
// goroutine stacks in use: a system that keeps a goroutine per grain
// keeps its grains' memory in stacks as much as in the heap.
func liveMemory() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// cpuTime is the CPU time, user and system, the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
