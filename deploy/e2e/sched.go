package main

import (
	"math"
	"runtime/metrics"
	"time"
)

// The test process's own delays. On one machine the load generator
// shares its cores with the cluster it loads, and a goroutine of its
// that waits to run reads a reply late: a call the cluster answered in
// time can time out in the generator. The Go runtime's histogram of the
// time runnable goroutines waited for a processor, read before and after
// the overload, says how long the generator itself held its calls up.
const schedLatencies = "/sched/latencies:seconds"

// schedSnapshot is the runtime's histogram of scheduling delays so far.
type schedSnapshot struct{ h *metrics.Float64Histogram }

func readSched() schedSnapshot {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedSnapshot{}
	}
	return schedSnapshot{h: s[0].Value.Float64Histogram()}
}

// schedDelays are the generator's scheduling delays over a span: the
// 99.9th percentile and the most, by the upper bound of the histogram's
// bucket; Known is false when the runtime does not export them.
type schedDelays struct {
	P999, Max time.Duration
	Known     bool
}

// delaysSince returns the delays recorded between before and s.
func (s schedSnapshot) delaysSince(before schedSnapshot) schedDelays {
	if s.h == nil || before.h == nil || len(s.h.Counts) != len(before.h.Counts) {
		return schedDelays{}
	}
	counts := make([]uint64, len(s.h.Counts))
	var total uint64
	for i := range counts {
		counts[i] = s.h.Counts[i] - before.h.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return schedDelays{Known: true}
	}
	upper := func(i int) time.Duration {
		b := s.h.Buckets[i+1]
		if math.IsInf(b, 1) {
			b = s.h.Buckets[i]
		}
		return time.Duration(b * float64(time.Second))
	}
	d := schedDelays{Known: true}
	var seen uint64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		seen += c
		if d.P999 == 0 && float64(seen) >= 0.999*float64(total) {
			d.P999 = upper(i)
		}
		d.Max = upper(i)
	}
	return d
}
