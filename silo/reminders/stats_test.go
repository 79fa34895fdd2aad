package reminders

import (
	"math"
	"testing"
	"time"
)

func TestHistogramQuantile(t *testing.T) {
	h := newHistogram([]time.Duration{time.Millisecond, time.Second})
	if got := h.Quantile(0.5); got != 0 {
		t.Errorf("empty: Quantile(0.5) = %v, want 0", got)
	}
	for _, d := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, time.Second, 3 * time.Second} {
		h.observe(d)
	}
	if h.Count != 5 || h.Max != 3*time.Second || h.Sum != 4*time.Second+3*time.Millisecond {
		t.Fatalf("histogram %+v", h)
	}
	if want := []uint64{2, 2, 1}; h.Counts[0] != want[0] || h.Counts[1] != want[1] || h.Counts[2] != want[2] {
		t.Fatalf("Counts = %v, want %v", h.Counts, want)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{
		{0, time.Millisecond}, {0.4, time.Millisecond}, {0.41, time.Second},
		{0.8, time.Second}, {0.81, 3 * time.Second}, {1, 3 * time.Second},
		{-1, time.Millisecond}, {2, 3 * time.Second}, {math.NaN(), time.Millisecond},
	} {
		if got := h.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	c := h.clone()
	c.Counts[0] = 99
	if h.Counts[0] == 99 {
		t.Errorf("clone shares Counts")
	}
}
