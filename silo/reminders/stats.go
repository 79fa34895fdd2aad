package reminders

import (
	"math"
	"slices"
	"time"
)

// Stats are a Service's counters, as Service.Stats returns them.
type Stats struct {
	// Owned is how many reminders are scheduled here.
	Owned int
	// Ticks is how many ticks were delivered (Fire called).
	Ticks uint64
	// Failures is how many ticks ended with an error from the grain's
	// call.
	Failures uint64
	// Skipped is how many ticks were skipped because the reminder's
	// previous tick still ran when they came due.
	Skipped uint64
	// Tardiness is how late ticks were delivered: the time Fire was
	// called minus the tick's due time.
	Tardiness Histogram
	// Loads is how many table reads were made (RangeReminders and
	// GrainReminders), LoadFailures how many of them failed. A read
	// cancelled by Stop counts in neither.
	Loads, LoadFailures uint64
}

// tardinessBounds are the upper bounds of Stats.Tardiness's buckets.
var tardinessBounds = []time.Duration{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute,
}

// Histogram counts durations in buckets: bucket i holds the durations d
// with Bounds[i-1] < d <= Bounds[i], and the last bucket, past Bounds,
// the overflow.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending.
	Bounds []time.Duration
	// Counts are the buckets' counts: len(Bounds)+1, the last the overflow.
	Counts []uint64
	// Count is the number of durations recorded, Sum their total and Max
	// the largest.
	Count    uint64
	Sum, Max time.Duration
}

func newHistogram(bounds []time.Duration) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
}

// observe records d.
func (h *Histogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(h.Bounds, d)
	h.Counts[i]++
	h.Count++
	h.Sum += d
	h.Max = max(h.Max, d)
}

// clone returns a copy of h that shares no memory with it.
func (h Histogram) clone() Histogram {
	h.Bounds = slices.Clone(h.Bounds)
	h.Counts = slices.Clone(h.Counts)
	return h
}

// Quantile returns the upper bound of the bucket that holds the q-quantile
// (0 <= q <= 1) of the recorded durations: Max when it is the overflow
// bucket, and 0 when nothing was recorded.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	if math.IsNaN(q) {
		q = 0
	}
	rank := uint64(math.Ceil(q * float64(h.Count)))
	rank = min(max(rank, 1), h.Count)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			if i < len(h.Bounds) {
				return h.Bounds[i]
			}
			break
		}
	}
	return h.Max
}
