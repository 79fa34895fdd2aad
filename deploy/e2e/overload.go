package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/granaryio/granary/internal/refusal"
	"github.com/jonboulle/clockwork"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The overload soak drives the cluster past what it can serve and checks
// that it protects itself: it measures the calls a second the cluster
// serves (a closed-loop burst), offers Factor times that for Duration on
// a schedule that does not wait for replies (open loop), then drops to a
// modest load and measures how soon every call succeeds again. The calls
// mix one hot counter, which an activation's queue limit must guard, with
// a stream of keys never called before, each a new activation, which
// memory collection must keep from filling the silos' memory.

// overloadConfig shapes the soak.
type overloadConfig struct {
	// Duration is how long the open-loop overload runs. Default 2m.
	Duration time.Duration
	// Factor times the measured capacity is the rate offered. Default 2.
	Factor float64
	// HotShare is the share of calls that go to the one hot counter; the
	// rest go to keys never called before. Default 0.2.
	HotShare float64
	// CapacityWorkers call one call at a time each, without pause, for
	// CapacityWarmup and then CapacityMeasure, each to a new key; the
	// calls served in the second span, a second, are the capacity. There
	// must be enough of them to saturate the cluster, or the burst
	// measures their own latency: 64 workers measured 950 calls/s at
	// 67 ms a call, and the cluster then served the overload's 1500 new
	// keys a second at twice that without shedding them. Defaults 256,
	// 5s, 10s.
	CapacityWorkers int
	CapacityWarmup  time.Duration
	CapacityMeasure time.Duration
	// MaxInFlight bounds the calls the open loop has started and not yet
	// seen end; a call due when the bound is reached is not sent, and
	// counted as such. Default (0): the offered rate times CallTimeout,
	// which is what is in flight when every call takes its whole timeout,
	// so the bound cannot hide a queue shorter than the timeout: such a
	// queue ends calls with DeadlineExceeded first.
	MaxInFlight int
	// CallTimeout bounds each call, as in the chaos load.
	CallTimeout time.Duration
	// Tick is how often the open loop starts the calls that fell due.
	// Default 5ms.
	Tick time.Duration
	// P99Bound bounds the 99th percentile latency of the calls the
	// cluster admitted (those that succeeded) during the overload.
	P99Bound time.Duration
	// RSSBound bounds every silo's memory, sampled once a second from
	// the burst to the end of the recovery.
	RSSBound uint64
	// RecoveryBound bounds the time from the drop of the load until every
	// worker of the modest load succeeds again, second after second.
	// Default 10s.
	RecoveryBound time.Duration
	// RecoveryWatch is how long the modest load is watched; it must
	// exceed RecoveryBound. Default 20s.
	RecoveryWatch time.Duration
	// RecoveryWorkers call at RecoveryShare of the capacity, in all,
	// after the drop. Defaults 8 and 0.2.
	RecoveryWorkers int
	RecoveryShare   float64
	// Prefix starts every key of the soak.
	Prefix string
}

// The soak's default bounds.
//
// The p99 bound is half the chaos load's 2 s call timeout: a silo that
// admits more than it can serve makes its callers wait out their timeout,
// and one that protects itself answers the calls it admits with half of
// it to spare. Under the silos' latency limit, the tail is the hot
// counter's queue, the turns themselves (writes to a database the soak
// keeps busy) and the client, which shares the
// machine's cores with the three silos and PostgreSQL and starts its own
// calls late (the report gives by how much).
//
// The memory bound comes from a measured silo: with 14,000 Counter
// activations and 42 MiB of live heap it used 53 MiB (process RSS 75
// MiB). Memory collection holds the live heap near its 32 MiB target, so
// a silo should stay near 50 MiB; 128 MiB leaves more than twice that
// for the collector's headroom and bursts, and is less than a silo whose
// live heap reached the 64 MiB load-shedding limit would use (twice that
// with GOGC's headroom), so the bound fails a run in which memory
// collection did not keep up.
const (
	defaultP99Bound = time.Second
	defaultRSSBound = 128 << 20
)

func (c *overloadConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Duration, 2*time.Minute)
	def(&c.CapacityWarmup, 5*time.Second)
	def(&c.CapacityMeasure, 10*time.Second)
	def(&c.CallTimeout, 2*time.Second)
	def(&c.Tick, 5*time.Millisecond)
	def(&c.RecoveryBound, 10*time.Second)
	def(&c.RecoveryWatch, 20*time.Second)
	if c.Factor == 0 {
		c.Factor = 2
	}
	if c.HotShare == 0 {
		c.HotShare = 0.2
	}
	if c.CapacityWorkers == 0 {
		c.CapacityWorkers = 256
	}
	if c.RecoveryWorkers == 0 {
		c.RecoveryWorkers = 8
	}
	if c.RecoveryShare == 0 {
		c.RecoveryShare = 0.2
	}
}

func (c *overloadConfig) validate() error {
	switch {
	case c.Duration <= 0 || c.CapacityWarmup < 0 || c.CapacityMeasure <= 0 || c.CallTimeout <= 0 || c.Tick <= 0:
		return fmt.Errorf("overload: durations must be positive: duration %v, capacity warm-up %v and measure %v, call timeout %v, tick %v",
			c.Duration, c.CapacityWarmup, c.CapacityMeasure, c.CallTimeout, c.Tick)
	case c.Factor <= 1:
		return fmt.Errorf("overload: factor %v: want above 1, or the load is no overload", c.Factor)
	case c.HotShare < 0 || c.HotShare > 1:
		return fmt.Errorf("overload: hot share %v: want 0 to 1", c.HotShare)
	case c.CapacityWorkers < 1 || c.RecoveryWorkers < 1 || c.MaxInFlight < 0:
		return fmt.Errorf("overload: capacity workers %d and recovery workers %d must be at least 1, max in flight %d not negative",
			c.CapacityWorkers, c.RecoveryWorkers, c.MaxInFlight)
	case c.RecoveryShare <= 0 || c.RecoveryShare >= 1:
		return fmt.Errorf("overload: recovery share %v: want a share of the capacity between 0 and 1", c.RecoveryShare)
	case c.P99Bound <= 0 || c.P99Bound >= c.CallTimeout:
		return fmt.Errorf("overload: p99 bound %v: want positive and under the call timeout %v", c.P99Bound, c.CallTimeout)
	case c.RSSBound == 0:
		return errors.New("overload: the memory bound is 0")
	case c.RecoveryBound <= 0 || c.RecoveryWatch <= c.RecoveryBound:
		return fmt.Errorf("overload: recovery watch %v must exceed the recovery bound %v, or the watch could end before the cluster recovers",
			c.RecoveryWatch, c.RecoveryBound)
	case c.Prefix == "":
		return errors.New("overload: the key prefix is empty")
	}
	return nil
}

// maxInFlight is the open loop's bound at rate calls a second.
func (c *overloadConfig) maxInFlight(rate float64) int {
	if c.MaxInFlight > 0 {
		return c.MaxInFlight
	}
	return max(1, int(math.Ceil(rate*c.CallTimeout.Seconds())))
}

// recoveryPace is the pace of each recovery worker that holds the modest
// load to RecoveryShare of capacity. It is at most 250ms, so every worker
// completes a call in every second it is served, which the recovery rule
// asks of a clean second, even when the capacity is tiny.
func (c *overloadConfig) recoveryPace(capacity float64) time.Duration {
	const most = 250 * time.Millisecond
	rate := c.RecoveryShare * capacity
	if rate <= 0 {
		return most
	}
	return min(most, time.Duration(float64(c.RecoveryWorkers)/rate*float64(time.Second)))
}

// pacer is the open loop's schedule: call k is due at start + k/rate,
// for the calls due before end.
type pacer struct {
	start time.Time
	rate  float64 // calls a second
	total int64   // calls due before the end
}

func newPacer(start time.Time, rate float64, d time.Duration) pacer {
	// The epsilon keeps float rounding from adding or dropping the call
	// that falls due exactly at the end.
	return pacer{start: start, rate: rate, total: max(0, int64(math.Ceil(d.Seconds()*rate-1e-9)))}
}

// dueBy is how many calls are due by now: those with k/rate ≤ now-start,
// at most total.
func (p pacer) dueBy(now time.Time) int64 {
	el := now.Sub(p.start)
	if el < 0 {
		return 0
	}
	return min(p.total, int64(math.Floor(el.Seconds()*p.rate+1e-9))+1)
}

// at is when call k is due.
func (p pacer) at(k int64) time.Time {
	return p.start.Add(time.Duration(float64(k) / p.rate * float64(time.Second)))
}

// hotCall says whether call k of the mix goes to the hot counter: share
// of every run of calls does, spread evenly (with share 0.2, every fifth
// call). The share is taken to a millionth so that the arithmetic is
// exact.
func hotCall(k int64, share float64) bool {
	m := int64(math.Round(share * 1e6))
	return (k+1)*m/1e6 > k*m/1e6
}

// outcome classifies how a call ended.
type outcome int

const (
	outOK          outcome = iota
	outShed                // ResourceExhausted with the OVERLOADED ErrorInfo: a silo shedding load
	outRefused             // any other ResourceExhausted: an activation's queue at its hard limit
	outDeadline            // DeadlineExceeded: the call waited out its timeout somewhere
	outUnavailable         // Unavailable: no silo or gateway could take it
	outOther               // any other error
	numOutcomes
)

// String names the outcome as the report does.
func (o outcome) String() string {
	return [...]string{"OK", "ResourceExhausted (shed)", "ResourceExhausted (queue limit)", "DeadlineExceeded", "Unavailable", "other"}[o]
}

// classify says how a call that returned err ended. A context deadline
// the client reports as such is DeadlineExceeded too: either way the
// call waited out its timeout.
func classify(err error) outcome {
	if err == nil {
		return outOK
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return outDeadline
	}
	st, ok := status.FromError(err)
	if !ok {
		return outOther
	}
	switch st.Code() {
	case codes.ResourceExhausted:
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == refusal.Overloaded {
				return outShed
			}
		}
		return outRefused
	case codes.DeadlineExceeded:
		return outDeadline
	case codes.Unavailable:
		return outUnavailable
	}
	return outOther
}

// Latencies are recorded in microseconds, from 1µs to a minute, to three
// significant figures.
const (
	latencyMin     = 1
	latencyMax     = int64(time.Minute / time.Microsecond)
	latencySigFigs = 3
)

// stage counts the calls of one stage of the soak (the capacity burst,
// the overload). Its methods may be called from any goroutine.
type stage struct {
	// from and to bound the completions counted as measured: the
	// capacity burst leaves out its warm-up.
	from, to time.Time

	mu       sync.Mutex
	outcomes [numOutcomes]int64
	examples [numOutcomes]string
	lost     int64
	over     int64
	// hotDeadline counts the calls to the hot counter that timed out:
	// the queue of one activation, or the cluster's.
	hotDeadline int64
	dups        int64
	measured    int64 // successful calls that completed in [from, to)
	latency     *hdrhistogram.Histogram
	// hotLatency is the successful calls to the hot counter's alone: they
	// wait in its activation's queue, which the others do not, so a p99
	// over its bound can be told to be the hot counter's or the cluster's.
	hotLatency *hdrhistogram.Histogram
	lag        *hdrhistogram.Histogram // how late the open loop started calls
}

func newStage(from, to time.Time) *stage {
	h := func() *hdrhistogram.Histogram { return hdrhistogram.New(latencyMin, latencyMax, latencySigFigs) }
	return &stage{from: from, to: to, latency: h(), hotLatency: h(), lag: h()}
}

// record counts a call that ended at end after took, with err, and what
// its reply revealed; hot says it went to the hot counter.
func (s *stage) record(end time.Time, took time.Duration, hot bool, err error, v verdict) {
	o := classify(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcomes[o]++
	if err != nil {
		if hot && o == outDeadline {
			s.hotDeadline++
		}
		if s.examples[o] == "" {
			s.examples[o] = err.Error()
		}
		return
	}
	us := min(latencyMax, max(latencyMin, took.Microseconds()))
	_ = s.latency.RecordValue(us)
	if hot {
		_ = s.hotLatency.RecordValue(us)
	}
	if !end.Before(s.from) && end.Before(s.to) {
		s.measured++
	}
	if v.lost {
		s.lost++
	}
	if v.over {
		s.over++
	}
	if v.duplicate {
		s.dups++
	}
}

// started records that the open loop started a call late by lag.
func (s *stage) started(lag time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.lag.RecordValue(min(latencyMax, max(latencyMin, lag.Microseconds())))
}

// stageStats are a stage's figures, for the verdict and the report.
type stageStats struct {
	Outcomes [numOutcomes]int64
	Examples [numOutcomes]string
	// Lost, Over and Duplicates count the replies that revealed a
	// forgotten Add, an Add counted twice, and a duplicate activation.
	Lost, Over, Duplicates int64
	// Measured counts the successful calls that completed in the
	// measured span.
	Measured int64
	// P50, P99 and Max are the successful calls' latencies; HotP99 is
	// the p99 of those to the hot counter, and HotOK their count.
	P50, P99, Max time.Duration
	HotP99        time.Duration
	HotOK         int64
	// HotDeadline counts the calls to the hot counter that timed out.
	HotDeadline int64
	// LagP99 and LagMax say how late the open loop started its calls.
	LagP99, LagMax time.Duration
}

// Calls counts the calls that ended, whatever their outcome.
func (s stageStats) Calls() int64 {
	var n int64
	for _, c := range s.Outcomes {
		n += c
	}
	return n
}

// Refused counts the calls the cluster refused with ResourceExhausted.
func (s stageStats) Refused() int64 { return s.Outcomes[outShed] + s.Outcomes[outRefused] }

// Failed counts the calls that ended with neither success nor
// ResourceExhausted: each one a failure of the soak.
func (s stageStats) Failed() int64 {
	return s.Outcomes[outDeadline] + s.Outcomes[outUnavailable] + s.Outcomes[outOther]
}

func (s *stage) stats() stageStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	st := stageStats{Outcomes: s.outcomes, Examples: s.examples, Lost: s.lost, Over: s.over, Duplicates: s.dups, Measured: s.measured, HotDeadline: s.hotDeadline}
	if s.latency.TotalCount() > 0 {
		st.P50, st.P99, st.Max = us(s.latency.ValueAtQuantile(50)), us(s.latency.ValueAtQuantile(99)), us(s.latency.Max())
	}
	if st.HotOK = s.hotLatency.TotalCount(); st.HotOK > 0 {
		st.HotP99 = us(s.hotLatency.ValueAtQuantile(99))
	}
	if s.lag.TotalCount() > 0 {
		st.LagP99, st.LagMax = us(s.lag.ValueAtQuantile(99)), us(s.lag.Max())
	}
	return st
}

// openLoop starts calls on a schedule whether or not earlier ones have
// returned, at most maxInFlight at once: a call that falls due while
// that many are in flight is not sent. It wakes every tick and starts
// every call that fell due since, so a tick it was late for is made up
// for at the next.
type openLoop struct {
	clock       clockwork.Clock
	tick        time.Duration
	maxInFlight int
	// call makes call k, due at due, on a goroutine of its own.
	call func(k int64, due time.Time)

	wg sync.WaitGroup
}

// loopCounts are what an open loop did.
type loopCounts struct {
	Scheduled int64 // calls that fell due
	Sent      int64 // calls started
	NotSent   int64 // calls not started because MaxInFlight were in flight
	MaxSeen   int   // the most calls in flight at once
}

// schedule starts p's calls until all have fallen due or ctx ends, and
// returns without waiting for those in flight: wait does.
func (o *openLoop) schedule(ctx context.Context, p pacer) loopCounts {
	sem := make(chan struct{}, o.maxInFlight)
	var c loopCounts
	tk := o.clock.NewTicker(o.tick)
	defer tk.Stop()
	for c.Scheduled < p.total {
		select {
		case <-ctx.Done():
			return c
		case <-tk.Chan():
		}
		for due := p.dueBy(o.clock.Now()); c.Scheduled < due; c.Scheduled++ {
			select {
			case sem <- struct{}{}:
			default:
				c.NotSent++
				continue
			}
			c.Sent++
			c.MaxSeen = max(c.MaxSeen, len(sem))
			k := c.Scheduled
			o.wg.Go(func() {
				defer func() { <-sem }()
				o.call(k, p.at(k))
			})
		}
	}
	return c
}

// wait waits for every call schedule started.
func (o *openLoop) wait() { o.wg.Wait() }

// soak makes the soak's calls: the mix of the hot counter and new keys,
// each an Add of 1 recorded in the soak's open ledger.
type soak struct {
	cfg    overloadConfig
	add    adder
	clock  clockwork.Clock
	ledger *ledger
	next   atomic.Int64 // the number of the next call, over all stages
}

func newSoak(cfg overloadConfig, add adder, clock clockwork.Clock) *soak {
	return &soak{cfg: cfg, add: add, clock: clock, ledger: newOpenLedger()}
}

// hotKey is the one counter HotShare of the calls go to.
func (s *soak) hotKey() string { return s.cfg.Prefix + "-hot" }

// nextKey is the counter of the next call: with mixed, the hot one for
// HotShare of the calls and a key of its own for the others; without, a
// key of its own.
func (s *soak) nextKey(mixed bool) (key string, hot bool) {
	k := s.next.Add(1) - 1
	if mixed && hotCall(k, s.cfg.HotShare) {
		return s.hotKey(), true
	}
	return fmt.Sprintf("%s-new-%08d", s.cfg.Prefix, k), false
}

// call makes the next call, of the mix or to a new key only, and records
// it in st. ctx is the run's: a stage's end never cancels a call, only
// its timeout ends it.
func (s *soak) call(ctx context.Context, st *stage, mixed bool) {
	key, hot := s.nextKey(mixed)
	began := s.clock.Now()
	tk := s.ledger.send(key, began)
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	r, err := s.add(callCtx, key, 1)
	cancel()
	end := s.clock.Now()
	var v verdict
	if err == nil {
		v = s.ledger.ack(tk, r, end)
	}
	st.record(end, end.Sub(began), hot, err, v)
}

// capacity runs the closed-loop burst: CapacityWorkers call one call at a
// time each, without pause, for the warm-up and the measure. It returns
// the stage, whose Measured calls over CapacityMeasure are the capacity.
// A worker starts no call after the burst's end, and the calls in flight
// then are waited for.
//
// Every call of the burst goes to a new key. With the hot counter in the
// mix, a closed loop measures the hot counter instead of the cluster:
// one activation serves it one call at a time, so the workers convoy
// behind it, and the burst is served about five times the hot counter's
// rate (at a share of 0.2), however much more the silos could do. New
// keys are also the dearer calls (an activation, a read and a write of
// the database, against a write alone), so the capacity is the cluster's
// for its costlier work, and twice it is twice that.
func (s *soak) capacity(ctx context.Context) *stage {
	start := s.clock.Now()
	from := start.Add(s.cfg.CapacityWarmup)
	end := from.Add(s.cfg.CapacityMeasure)
	st := newStage(from, end)
	var wg sync.WaitGroup
	for range s.cfg.CapacityWorkers {
		wg.Go(func() {
			for ctx.Err() == nil && s.clock.Now().Before(end) {
				s.call(ctx, st, false)
			}
		})
	}
	wg.Wait()
	return st
}

// overload offers rate calls a second for Duration, open loop. It returns
// once the last call has fallen due, with the loop to wait on for the
// calls still in flight: the load drops then.
func (s *soak) overload(ctx context.Context, rate float64) (*stage, *openLoop, loopCounts) {
	start := s.clock.Now()
	p := newPacer(start, rate, s.cfg.Duration)
	st := newStage(start, start.Add(s.cfg.Duration))
	o := &openLoop{clock: s.clock, tick: s.cfg.Tick, maxInFlight: s.cfg.maxInFlight(rate), call: func(k int64, due time.Time) {
		st.started(s.clock.Now().Sub(due))
		s.call(ctx, st, true)
	}}
	return st, o, o.schedule(ctx, p)
}
