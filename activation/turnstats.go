package activation

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Turn durations, sampled.
//
// Reading the clock around every turn would cost more than a short turn
// on some virtual machines (see monitor.check), so each worker times only
// about one turn in TurnSampleEvery: it counts down the turns it runs,
// from its own queue and inline alike, and times the one at which its
// countdown runs out, then draws the next gap at random between 1 and
// 2*TurnSampleEvery-1 turns. The per-turn cost is a decrement and a
// branch; random gaps keep a workload whose slow turns recur at a fixed
// period from always falling between the samples, or always on them.
//
// A sample is the time from the turn's start (Task.Run) to the end of
// its Task.Done, as read from Config.Clock. A sampled turn that waits
// (Exec.Wait, Exec.Blocking, or an inline turn below it that does) gives
// up its processor, so its wall time is not processor time: it is not
// recorded. Nor is a turn that panics. Samples are kept per processor, in
// exponential buckets of atomic counters, so workers never contend on
// them; Pool.Stats adds them up.

// TurnSampleEvery is the mean number of turns a worker runs per turn it
// times for Stats.TurnTime.
const TurnSampleEvery = 64

// turnBuckets is the number of turn-time buckets: upper bounds of
// 2^turnMinShift ns (256 ns) doubling up to 2^33 ns (about 8.6 s), and
// the overflow.
const (
	turnMinShift = 8
	turnBounds   = 26
	turnBuckets  = turnBounds + 1
)

// turnTimes is one processor's sampled turn durations. Written by the
// worker holding the processor; read by Stats from any goroutine.
type turnTimes struct {
	counts [turnBuckets]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

// turnBucket returns the bucket of a duration of d nanoseconds: the first
// whose upper bound is at least d.
func turnBucket(d int64) int {
	if d <= 1<<turnMinShift {
		return 0
	}
	return min(bits.Len64(uint64(d-1))-turnMinShift, turnBounds)
}

// observe records one sampled turn of d. The worker holding the
// processor only.
func (tt *turnTimes) observe(d time.Duration) {
	ns := max(int64(d), 0)
	tt.counts[turnBucket(ns)].Add(1)
	tt.sum.Add(ns)
}

// TurnHistogram is a snapshot of the sampled turn durations (see
// TurnSampleEvery): bucket i counts the samples d with Bounds[i-1] < d <=
// Bounds[i], and the last bucket, past Bounds, the overflow.
type TurnHistogram struct {
	// Bounds are the buckets' upper bounds, ascending: 256 ns doubling
	// up to about 8.6 s.
	Bounds []time.Duration
	// Counts are the buckets' counts: len(Bounds)+1, the last the
	// overflow.
	Counts []uint64
	// Count is the number of samples, and Sum their total. Count is not
	// the number of turns: about one turn in SampleEvery is sampled, and
	// sampled turns that waited or panicked are left out.
	Count uint64
	Sum   time.Duration
	// SampleEvery is the mean number of turns per sample.
	SampleEvery int
}

// newTurnHistogram returns an empty snapshot with the buckets' bounds.
func newTurnHistogram() TurnHistogram {
	h := TurnHistogram{
		Bounds:      make([]time.Duration, turnBounds),
		Counts:      make([]uint64, turnBuckets),
		SampleEvery: TurnSampleEvery,
	}
	for i := range h.Bounds {
		h.Bounds[i] = time.Duration(1) << (turnMinShift + i)
	}
	return h
}

// add adds one processor's samples to h. Any goroutine. A sample being
// recorded meanwhile may show in a bucket and not yet in Sum.
func (h *TurnHistogram) add(tt *turnTimes) {
	for i := range tt.counts {
		n := tt.counts[i].Load()
		h.Counts[i] += n
		h.Count += n
	}
	h.Sum += time.Duration(tt.sum.Load())
}

// nextSampleGap returns the number of turns until this worker's next
// sample: uniform in [1, 2*TurnSampleEvery-1], mean TurnSampleEvery.
// Owner only.
func (e *Exec) nextSampleGap() uint32 {
	return 1 + uint32(e.random()%(2*TurnSampleEvery-1))
}

// sampleTurn counts down one turn and reports whether this one is to be
// timed. Owner only.
func (e *Exec) sampleTurn() bool {
	e.sampleIn--
	if e.sampleIn != 0 {
		return false
	}
	e.sampleIn = e.nextSampleGap()
	return true
}

// endSample records a sampled turn that started at start, unless it
// waited: waits is e.waits at its start. Owner only.
func (e *Exec) endSample(start time.Time, waits uint64) {
	if e.waits != waits || e.p == nil {
		return
	}
	e.p.turnTime.observe(e.pool.now().Sub(start))
}
