package overload

import (
	"math"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultMinLimit is the floor of a Limiter's limit when Config.MinLimit
// is zero.
const DefaultMinLimit = 16

// unlimited is a Limiter's limit until the latency first runs over its
// target: no request count reaches it.
const unlimited = math.MaxInt64 / 2

// Shrinking the limit. A cut scales the requests in progress by
// target/latency (Little's law: at a fixed rate of service, the requests
// in progress grow with their latency), but never by less than
// minScale, since the latency of one interval is a noisy estimate; and
// it waits for the requests admitted under the last cut to end, one
// latency later, before it cuts again, or it would cut for latency it
// has already acted on.
const minScale = 0.25

// Growing the limit: while the limit is reached and the latency is under
// growBelow times the target, it grows by a tenth each sample, or by a
// quarter while the latency is under half the target.
const (
	growBelow = 0.9
	growBy    = 10
	growFast  = 4
)

// A Limiter bounds how many new requests from outside the silo are in
// progress at once, and adapts the bound so that their mean latency stays
// under a target: a silo admits as many as it serves in time, and refuses
// only the rest. A flag that refuses everything while the latency is
// high would let the queues drain and then admit a flood, over and over;
// the limit admits a steady share instead.
//
// The limit starts unbounded: a silo whose latency never runs over the
// target refuses nothing. When a sample's mean latency is over the
// target while at least the floor's number of requests were in
// progress, the limit falls to those requests scaled by target/latency;
// while the limit is reached and the latency is well under the target,
// it grows by a tenth a sample, or a quarter while the latency is under
// half the target. It never falls below the floor, so a latency that
// load did not cause (a failover that makes activations again, a slow
// dependency) slows a silo's intake but does not stop it, and a slow
// request at a light load sets no limit at all. After a window of
// samples in which requests ended, the limit was not reached and the
// latency stayed under growBelow times the target, the limit is lifted;
// a sample in which nothing ended does not count, either way.
//
// Acquire and Release may be called from any goroutine: Acquire costs an
// atomic add and two loads, and a compare-and-swap when the count of
// requests in progress reaches a new peak (another add when it refuses);
// Release, one atomic add. The Monitor adjusts the limit
// on its goroutine, from the latencies it samples.
type Limiter struct {
	inFlight atomic.Int64
	limit    atomic.Int64
	// peak is the most requests in progress since the last sample: a
	// limit that was reached in between may grow.
	peak atomic.Int64

	target time.Duration
	floor  int64
	log    *zap.Logger
	// liftAfter is how many calm samples in a row lift the limit.
	liftAfter int

	// holdUntil: no cut before then, for the requests admitted under the
	// last cut have not all ended. calm counts the samples in a row in
	// which requests ended, the limit was not reached and the latency was
	// under growBelow times the target, not counting those in which
	// nothing ended. Monitor's goroutine only.
	holdUntil time.Time
	calm      int
}

func newLimiter(target time.Duration, floor, liftAfter int, log *zap.Logger) *Limiter {
	l := &Limiter{target: target, floor: int64(floor), liftAfter: liftAfter, log: log}
	l.limit.Store(unlimited)
	return l
}

// Acquire takes a place for a new request, and reports false when the
// limit is reached: the request must be refused. A true must be matched
// by one Release when the request ends.
func (l *Limiter) Acquire() bool {
	n := l.inFlight.Add(1)
	if n > l.limit.Load() {
		l.inFlight.Add(-1)
		return false
	}
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	return true
}

// Release gives back a place Acquire took.
func (l *Limiter) Release() { l.inFlight.Add(-1) }

// InFlight is how many requests hold a place now.
func (l *Limiter) InFlight() int64 { return l.inFlight.Load() }

// Limit is the most requests that may be in progress at once, and false
// while the latency has never run over the target and nothing is
// limited.
func (l *Limiter) Limit() (int64, bool) {
	n := l.limit.Load()
	return n, n < unlimited
}

// Target is the mean latency the limit keeps the requests under.
func (l *Limiter) Target() time.Duration { return l.target }

// adjust moves the limit after a sample at now in which ended requests
// ended with mean latency mean. Monitor's goroutine only.
func (l *Limiter) adjust(now time.Time, mean time.Duration, ended uint64) {
	peak := l.peak.Swap(l.inFlight.Load())
	if ended == 0 {
		// Nothing ended: no news of the latency, neither calm nor not. A
		// silo whose gateway sheds for its heap ends nothing, and lifting
		// its limit then would let a flood in when it takes requests
		// again. A stall is for the queue wait limit and the calls'
		// deadlines.
		return
	}
	lim := l.limit.Load()
	fast := float64(mean) <= growBelow*float64(l.target)
	if lim < unlimited && peak < lim && fast {
		if l.calm++; l.calm >= l.liftAfter {
			l.limit.Store(unlimited)
			l.calm = 0
			l.log.Info("stopped limiting the new requests in progress: their latency is under its target",
				zap.Int64("limit_was", lim), zap.Duration("latency", mean), zap.Duration("target", l.target))
		}
		return
	}
	l.calm = 0
	switch {
	case mean > l.target:
		if now.Before(l.holdUntil) || peak < l.floor {
			// The last cut has not shown yet, or the latency is not
			// the load's: fewer than the floor were in progress.
			return
		}
		scale := max(minScale, float64(l.target)/float64(mean))
		n := max(l.floor, int64(float64(min(peak, lim))*scale))
		if n >= lim {
			return
		}
		l.limit.Store(n)
		l.holdUntil = now.Add(mean)
		fields := []zap.Field{zap.Int64("limit", n), zap.Int64("in_flight", peak),
			zap.Duration("latency", mean), zap.Duration("target", l.target)}
		if lim == unlimited {
			l.log.Warn("limiting the new requests in progress: their latency is over its target", fields...)
		} else {
			l.log.Debug("lowered the limit of new requests in progress", fields...)
		}
	case lim < unlimited && peak >= lim && fast:
		step := lim / growBy
		if 2*mean < l.target {
			step = lim / growFast
		}
		n := lim + max(1, step)
		l.limit.Store(n)
		l.log.Debug("raised the limit of new requests in progress", zap.Int64("limit", n),
			zap.Duration("latency", mean), zap.Duration("target", l.target))
	}
}
