package overload

import (
	"strconv"
	"testing"
	"time"
)

// holdPlaces takes n places in the limiter, failing the test when one is
// refused.
func holdPlaces(t *testing.T, l *Limiter, n int) {
	t.Helper()
	for i := range n {
		if !l.Acquire() {
			t.Fatalf("place %d of %d refused under limit %v", i+1, n, limitOf(l))
		}
	}
}

// limitOf is the limiter's limit, or "none".
func limitOf(l *Limiter) string {
	if n, ok := l.Limit(); ok {
		return strconv.FormatInt(n, 10)
	}
	return "none"
}

func wantLimit(t *testing.T, l *Limiter, want string, when string) {
	t.Helper()
	if got := limitOf(l); got != want {
		t.Fatalf("%s: limit %s, want %s", when, got, want)
	}
}

// releasePlaces gives back n places.
func releasePlaces(l *Limiter, n int) {
	for range n {
		l.Release()
	}
}

// placesFree takes places until one is refused, gives them back, and
// returns how many it took.
func placesFree(l *Limiter) int {
	n := 0
	for l.Acquire() {
		n++
		if n > 1_000_000 {
			return n
		}
	}
	for range n {
		l.Release()
	}
	return n
}

// cutTo200 is a limiter of target 100ms cut to 200 by 400 requests in
// progress, which it still holds, at 200ms.
func cutTo200(t *testing.T) (*rig, *Limiter) {
	t.Helper()
	r := newRig(t, Config{LatencyLimit: 100 * time.Millisecond})
	l := r.m.Limiter()
	holdPlaces(t, l, 400)
	r.feedLatencies(10, 10*200*time.Millisecond)
	wantLimit(t, l, "200", "400 in progress at 200ms, twice the target")
	return r, l
}

func TestLimiterLimitsNothingWhileTheLatencyIsUnderItsTarget(t *testing.T) {
	r := newRig(t, Config{LatencyLimit: 100 * time.Millisecond})
	l := r.m.Limiter()
	holdPlaces(t, l, 5000)
	r.feedLatenciesWindow(100, 100*99*time.Millisecond)
	wantLimit(t, l, "none", "a window of 99ms latencies with 5000 requests in progress")
	if got := l.InFlight(); got != 5000 {
		t.Fatalf("InFlight %d, want 5000", got)
	}
}

// TestLimiterCutsInProportionToTheLatency: an interval whose requests
// took twice the target halves the requests in progress (Little's law),
// and the limit then refuses what is past it.
func TestLimiterCutsInProportionToTheLatency(t *testing.T) {
	r, l := cutTo200(t)
	if l.Acquire() {
		t.Fatal("a place was free with 400 in progress under a limit of 200")
	}
	releasePlaces(l, 201)
	if n := placesFree(l); n != 1 {
		t.Fatalf("%d places free with 199 in progress under a limit of 200, want 1", n)
	}
	if n := r.logs.FilterMessageSnippet("limiting the new requests in progress").Len(); n != 1 {
		t.Fatalf("%d warnings that the limiter started, want 1", n)
	}
}

// TestLimiterCutsAQuarterAtMost: one interval's latency is a noisy
// estimate, so a latency ten times the target cuts to a quarter, not a
// tenth.
func TestLimiterCutsAQuarterAtMost(t *testing.T) {
	r := newRig(t, Config{LatencyLimit: 100 * time.Millisecond})
	l := r.m.Limiter()
	holdPlaces(t, l, 400)
	r.feedLatencies(10, 10*time.Second)
	wantLimit(t, l, "100", "400 in progress at ten times the target")
}

// TestLimiterWaitsOneLatencyBeforeCuttingAgain: the requests admitted
// under a cut end one latency later; until then, the latency still
// tells of the requests admitted before it, and the limit holds.
func TestLimiterWaitsOneLatencyBeforeCuttingAgain(t *testing.T) {
	r := newRig(t, Config{LatencyLimit: 500 * time.Millisecond}) // intervals of 1s
	l := r.m.Limiter()
	holdPlaces(t, l, 400)
	r.feedLatencies(10, 10*2500*time.Millisecond)
	wantLimit(t, l, "100", "400 in progress at 2.5s")
	r.feedLatencies(10, 10*2500*time.Millisecond)
	r.feedLatencies(10, 10*2500*time.Millisecond)
	wantLimit(t, l, "100", "2s after the cut, within its 2.5s latency")
	r.feedLatencies(10, 10*4*time.Second)
	// The peak since the last sample is the 400 still held: the cut is
	// from the limit, which the requests in progress do not pass.
	wantLimit(t, l, "25", "3s after the cut, past its 2.5s latency")
}

// TestLimiterGrowsWhileReachedAndFast: a limit reached while the latency
// is under 90% of the target grows by a tenth a sample, and by a quarter
// while it is under half the target.
func TestLimiterGrowsWhileReachedAndFast(t *testing.T) {
	for _, tc := range []struct {
		latency time.Duration
		want    string
	}{{80 * time.Millisecond, "220"}, {40 * time.Millisecond, "250"}} {
		r, l := cutTo200(t)
		releasePlaces(l, 200)
		r.feedLatencies(10, 10*tc.latency)
		wantLimit(t, l, tc.want, "the limit reached at "+tc.latency.String())
	}
}

// TestLimiterHoldsNearTheTargetOrWhenNotReached: a latency near the
// target, or a limit not reached, holds the limit where it is.
func TestLimiterHoldsNearTheTargetOrWhenNotReached(t *testing.T) {
	r, l := cutTo200(t)
	releasePlaces(l, 200)
	r.feedLatencies(10, 10*95*time.Millisecond)
	wantLimit(t, l, "200", "the limit reached at 95ms, near the target")
	releasePlaces(l, 100)
	r.feedLatencies(10, 10*50*time.Millisecond) // the 200 of the last sample reached it
	wantLimit(t, l, "220", "the limit reached at 50ms")
	r.feedLatencies(10, 10*50*time.Millisecond)
	wantLimit(t, l, "220", "100 in progress under a limit of 220 at 50ms")
}

// TestLimiterIgnoresIntervalsWithNothingEnded: an interval in which no
// request ended tells nothing of the latency, and neither cuts nor grows
// the limit.
func TestLimiterIgnoresIntervalsWithNothingEnded(t *testing.T) {
	r, l := cutTo200(t)
	for range DefaultSamples * 2 {
		r.feedLatencies(0, 0)
	}
	wantLimit(t, l, "200", "intervals in which nothing ended")
}

func TestNoLimiterWithoutALatencyLimit(t *testing.T) {
	r := newRig(t, Config{CPULimit: 0.9})
	if r.m.Limiter() != nil {
		t.Fatal("a monitor without LatencyLimit made a Limiter")
	}
}

// TestLimiterFloor: requests slower than the target while fewer than the
// floor are in progress are not the load's doing, and set no limit; with
// more, the limit never falls below the floor.
func TestLimiterFloor(t *testing.T) {
	r := newRig(t, Config{LatencyLimit: 100 * time.Millisecond, MinLimit: 16})
	l := r.m.Limiter()
	holdPlaces(t, l, 15)
	r.feedLatencies(3, 3*time.Second)
	wantLimit(t, l, "none", "15 in progress at ten times the target, floor 16")
	holdPlaces(t, l, 5)
	r.feedLatencies(3, 3*time.Second)
	wantLimit(t, l, "16", "20 in progress at ten times the target, floor 16")
	releasePlaces(l, 20)
	if n := placesFree(l); n != 16 {
		t.Fatalf("%d places free under the floor of 16, want 16", n)
	}
}

// TestLimiterLiftsTheLimitAfterACalmWindow: a window of samples in which
// requests ended, the limit was not reached and the latency was well
// under the target lifts the limit; a sample that reaches it starts the
// count again, and one in which nothing ended does not count.
func TestLimiterLiftsTheLimitAfterACalmWindow(t *testing.T) {
	r, l := cutTo200(t)
	releasePlaces(l, 300)
	calm := func(n int) {
		for range n {
			r.feedLatencies(10, 10*50*time.Millisecond)
		}
	}
	r.feedLatencies(0, 0) // the next peak is the 100 left, under the limit
	calm(DefaultSamples - 1)
	wantLimit(t, l, "200", "a window but one of calm samples")
	holdPlaces(t, l, 100)
	r.feedLatencies(10, 10*95*time.Millisecond)
	wantLimit(t, l, "200", "the limit reached at 95ms")
	releasePlaces(l, 100)
	r.feedLatencies(0, 0)
	calm(DefaultSamples - 1)
	wantLimit(t, l, "200", "a window but one of calm samples after the limit was reached")
	for range DefaultSamples {
		r.feedLatencies(0, 0)
	}
	wantLimit(t, l, "200", "samples in which nothing ended")
	calm(1)
	wantLimit(t, l, "none", "a window of calm samples")
	if n := r.logs.FilterMessageSnippet("stopped limiting").Len(); n != 1 {
		t.Fatalf("%d logs that the limit was lifted, want 1", n)
	}
}
