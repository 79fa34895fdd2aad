package main

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

func TestSchedDelaysAreTheSpansOwn(t *testing.T) {
	buckets := []float64{0, 0.001, 0.01, 0.1, math.Inf(1)}
	snap := func(counts ...uint64) schedSnapshot {
		return schedSnapshot{h: &metrics.Float64Histogram{Counts: counts, Buckets: buckets}}
	}
	// Before the span: one delay of over 100ms, which is not the span's.
	before := snap(10, 0, 0, 1)
	d := snap(10+998, 1, 1, 1).delaysSince(before)
	if !d.Known || d.P999 != 10*time.Millisecond || d.Max != 100*time.Millisecond {
		t.Fatalf("delays %+v, want p99.9 10ms (the 999th of 1000) and max 100ms", d)
	}
	if d := snap(10, 0, 0, 1).delaysSince(before); !d.Known || d.Max != 0 {
		t.Fatalf("delays %+v over a span with none, want known and zero", d)
	}
	if d := readSched().delaysSince(schedSnapshot{}); d.Known {
		t.Fatalf("delays %+v without a first reading, want unknown", d)
	}
}
