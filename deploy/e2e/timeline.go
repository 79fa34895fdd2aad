package main

import (
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/status"
)

// bucket is one second of the run, counted from the timeline's start.
type bucket struct {
	ok     []int // successful calls that completed in the second, per worker
	failed int   // calls that failed in the second
	// lost, over and dups count the replies of the second that revealed a
	// forgotten Add, an Add counted twice, and a duplicate activation.
	lost, over, dups int
	errs             map[string]int    // failures by gRPC code
	examples         map[string]string // a failure's message, by gRPC code
	// activations is the most Counter activations the silos reported in
	// the second, summed over the silos that answered; -1 when none was
	// sampled.
	activations int
}

// timeline counts what happened to the calls second by second, so that a
// fault's effect and the cluster's recovery can be read off it. Its
// methods may be called from any goroutine.
type timeline struct {
	start   time.Time
	workers int

	mu      sync.Mutex
	buckets []bucket
}

func newTimeline(start time.Time, workers int) *timeline {
	return &timeline{start: start, workers: workers}
}

// index is the second t falls in; times before the start fall in 0.
func (tl *timeline) index(t time.Time) int {
	if t.Before(tl.start) {
		return 0
	}
	return int(t.Sub(tl.start) / time.Second)
}

// at returns the start of second i.
func (tl *timeline) at(i int) time.Time { return tl.start.Add(time.Duration(i) * time.Second) }

// bucketLocked returns second i's bucket, growing the timeline; mu held.
func (tl *timeline) bucketLocked(i int) *bucket {
	for len(tl.buckets) <= i {
		tl.buckets = append(tl.buckets, bucket{ok: make([]int, tl.workers), activations: -1})
	}
	return &tl.buckets[i]
}

// record counts a call of worker that completed at t: successful with
// what its reply revealed, or failed with err.
func (tl *timeline) record(worker int, t time.Time, err error, v verdict) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	b := tl.bucketLocked(tl.index(t))
	if err != nil {
		b.failed++
		if b.errs == nil {
			b.errs, b.examples = map[string]int{}, map[string]string{}
		}
		code := status.Code(err).String()
		b.errs[code]++
		if _, ok := b.examples[code]; !ok {
			b.examples[code] = err.Error()
		}
		return
	}
	b.ok[worker]++
	if v.lost {
		b.lost++
	}
	if v.over {
		b.over++
	}
	if v.duplicate {
		b.dups++
	}
}

// sample records the Counter activations the silos reported at t.
func (tl *timeline) sample(t time.Time, activations int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	b := tl.bucketLocked(tl.index(t))
	b.activations = max(b.activations, activations)
}

// cleanLocked reports whether second i was clean: no call failed, and
// every worker completed at least one call; mu held.
func (tl *timeline) cleanLocked(i int) bool {
	b := tl.bucketLocked(i)
	if b.failed > 0 {
		return false
	}
	for _, n := range b.ok {
		if n == 0 {
			return false
		}
	}
	return true
}

// windowStats sums a window of seconds: a fault's, from the second it was
// injected in to the next fault's.
type windowStats struct {
	Calls, Failed          int
	Lost, Over, Duplicates int
	// Recovered says whether the window ends with a clean second, and
	// Recovery is the time from the window's start to the start of the
	// first clean second after its last unclean one (0 when every second
	// was clean).
	Recovered bool
	Recovery  time.Duration
	// PeakActivations is the most Counter activations sampled in the
	// window (-1: none sampled).
	PeakActivations int
	// TopCode is the gRPC code of the most frequent failures, TopCount
	// their count, and TopExample the message of the first of them.
	TopCode    string
	TopCount   int
	TopExample string
}

// window sums seconds [from, to).
func (tl *timeline) window(from, to int) windowStats {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	w := windowStats{PeakActivations: -1, Recovered: true}
	errs, examples := map[string]int{}, map[string]string{}
	lastUnclean := -1
	for i := from; i < to; i++ {
		b := tl.bucketLocked(i)
		for _, n := range b.ok {
			w.Calls += n
		}
		w.Calls += b.failed
		w.Failed += b.failed
		w.Lost += b.lost
		w.Over += b.over
		w.Duplicates += b.dups
		w.PeakActivations = max(w.PeakActivations, b.activations)
		for code, n := range b.errs {
			errs[code] += n
			if _, ok := examples[code]; !ok {
				examples[code] = b.examples[code]
			}
		}
		if !tl.cleanLocked(i) {
			lastUnclean = i
		}
	}
	switch {
	case lastUnclean == to-1:
		w.Recovered = false
		w.Recovery = time.Duration(to-from) * time.Second
	case lastUnclean >= 0:
		w.Recovery = time.Duration(lastUnclean+1-from) * time.Second
	}
	for _, code := range slices.Sorted(maps.Keys(errs)) {
		if errs[code] > w.TopCount {
			w.TopCode, w.TopCount, w.TopExample = code, errs[code], examples[code]
		}
	}
	return w
}
