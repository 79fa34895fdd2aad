package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// silosWatch is what the soak needs of a watcher: sampling from start to
// stop. *watcher is the real one.
type silosWatch interface {
	start(ctx context.Context)
	stop(ctx context.Context) ([]siloWatch, error)
}

// overloadResult is everything the soak found.
type overloadResult struct {
	Config overloadConfig
	// Err is what cut the soak short, if anything.
	Err error
	// Capacity is the calls a second the closed-loop burst was served;
	// Offered is the rate the open loop offered, Factor times it, with
	// MaxInFlight calls in flight at most.
	Capacity    float64
	Offered     float64
	MaxInFlight int
	// Burst and Overload are the calls of the two stages; Loop is what
	// the open loop sent.
	Burst, Overload stageStats
	Loop            loopCounts
	// Sched is how long the generator's own goroutines waited to run
	// during the overload.
	Sched schedDelays
	// Recovery is the window of the modest load after the drop, which
	// RecoveryLoad made at RecoveryRate calls a second at most.
	Recovery     windowStats
	RecoveryLoad loadConfig
	RecoveryRate float64
	// Final is the read of every counter the soak and the modest load
	// acknowledged an Add to, against their ledgers.
	Final finalCheck
	// Silos are the memory and metrics of each silo; MemErr is the last
	// failure of a memory sample.
	Silos  []siloWatch
	MemErr error
	// MemoryMethod says how memory was read, for the report.
	MemoryMethod string
}

// readConcurrency is how many reads the final read of the soak's keys
// makes at once. The soak acknowledges some two hundred thousand Adds to
// new keys, and a read of one activates it again (a read and a write of
// the database, some 50 ms on a busy machine): 16 at once took longer
// than the soak itself. A read refused because a silo sheds is tried
// again after readPause, the delay the silos' refusals ask for.
//
// readBudget bounds the whole read: a cluster that serves normally reads
// them in a minute or two, and one that keeps refusing (a silo that sheds
// for its heap long after the load dropped did) would otherwise hold the
// run for hours. The keys left unread fail the run.
//
// soakGOGC is the test process's GOGC during the overload.
const (
	soakGOGC        = 400
	readConcurrency = 64
	readPause       = time.Second
	readAttempts    = 10
	readBudget      = 4 * time.Minute
)

// runOverload makes the soak against add: the burst, the overload, the
// drop to a modest load and its recovery, then the final read. w samples
// the silos from before the burst to the end of the recovery.
func runOverload(ctx context.Context, cfg overloadConfig, add adder, clock clockwork.Clock, w silosWatch, logf func(string, ...any)) *overloadResult {
	res := &overloadResult{Config: cfg}
	s := newSoak(cfg, add, clock)
	w.start(ctx)
	watching := true
	stopWatch := func() {
		if watching {
			watching = false
			res.Silos, res.MemErr = w.stop(context.WithoutCancel(ctx))
		}
	}
	defer stopWatch()

	logf("overload: measuring the capacity: %d workers without pause for %v, measured over the last %v",
		cfg.CapacityWorkers, cfg.CapacityWarmup+cfg.CapacityMeasure, cfg.CapacityMeasure)
	burst := s.capacity(ctx)
	res.Burst = burst.stats()
	res.Capacity = float64(res.Burst.Measured) / cfg.CapacityMeasure.Seconds()
	if ctx.Err() != nil {
		res.Err = ctx.Err()
		return res
	}
	if res.Capacity == 0 {
		res.Err = errors.New("the capacity burst was served no call: there is no capacity to double")
		return res
	}
	res.Offered = cfg.Factor * res.Capacity
	res.MaxInFlight = cfg.maxInFlight(res.Offered)
	logf("overload: capacity %.0f calls/s; offering %.0f calls/s for %v, %.0f%% to %s, the rest to new keys, at most %d in flight",
		res.Capacity, res.Offered, cfg.Duration, 100*cfg.HotShare, s.hotKey(), res.MaxInFlight)
	// The generator keeps a ledger entry per key it calls, over a
	// million in the overload: with Go's default GOGC its collector
	// marks them ever more often, on the cores the calls need.
	gcWas := debug.SetGCPercent(soakGOGC)
	defer debug.SetGCPercent(gcWas) // also when the run ends early
	schedBefore := readSched()
	st, loop, sent := s.overload(ctx, res.Offered)
	res.Loop = sent

	// The load drops now: the modest load starts at once, on a timeline
	// of its own whose second 0 begins here, while the calls of the
	// overload still in flight end.
	res.RecoveryLoad = loadConfig{Workers: cfg.RecoveryWorkers, Counters: 64, Prefix: cfg.Prefix + "-after",
		CallTimeout: cfg.CallTimeout, Pace: cfg.recoveryPace(res.Capacity)}
	res.RecoveryRate = float64(cfg.RecoveryWorkers) / res.RecoveryLoad.Pace.Seconds()
	gen, err := newGenerator(res.RecoveryLoad, add, clock)
	if err != nil {
		loop.wait()
		res.Overload = st.stats()
		res.Err = err
		return res
	}
	logf("overload: the load drops to %d workers at %.0f calls/s at most; watching for %v", cfg.RecoveryWorkers, res.RecoveryRate, cfg.RecoveryWatch)
	gen.start(ctx)
	loop.wait()
	res.Overload = st.stats()
	res.Sched = readSched().delaysSince(schedBefore)
	select {
	case <-ctx.Done():
	case <-clock.After(gen.tl.at(int(cfg.RecoveryWatch / time.Second)).Sub(clock.Now())):
	}
	gen.stop()
	stopWatch()
	if ctx.Err() != nil {
		res.Err = ctx.Err()
		return res
	}
	res.Recovery = gen.tl.window(0, int(cfg.RecoveryWatch/time.Second))

	keys := s.ledger.acknowledged()
	logf("overload: reading back the %d counters the soak acknowledged an Add to, and the modest load's %d, within %v",
		len(keys), res.RecoveryLoad.Counters, readBudget)
	readCtx, cancel := context.WithTimeout(ctx, readBudget)
	defer cancel()
	res.Final = gen.readAll(readCtx, 10)
	read, errs := readKeys(readCtx, add, clock, keys, cfg.CallTimeout, readConcurrency, readAttempts)
	res.Final.merge(s.ledger.finalOf(keys, read, errs))
	if ctx.Err() != nil {
		res.Err = ctx.Err()
	}
	return res
}

// readKeys reads the counts of keys with an Add of 0, conc at a time,
// trying each until it answers or attempts run out, waiting readPause
// after each failure.
func readKeys(ctx context.Context, add adder, clock clockwork.Clock, keys []string, timeout time.Duration, conc, attempts int) (map[string]int64, map[string]error) {
	counts := make(map[string]int64, len(keys))
	errs := map[string]error{}
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for key := range work {
				var err error
				for a := 0; a < attempts && ctx.Err() == nil; a++ {
					callCtx, cancel := context.WithTimeout(ctx, timeout)
					var r addReply
					r, err = add(callCtx, key, 0)
					cancel()
					if err == nil {
						mu.Lock()
						counts[key] = r.Value
						mu.Unlock()
						break
					}
					select {
					case <-ctx.Done():
					case <-clock.After(readPause):
					}
				}
				if err == nil {
					continue
				}
				mu.Lock()
				errs[key] = err
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		select {
		case work <- k:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	for _, k := range keys {
		if _, ok := counts[k]; !ok && errs[k] == nil {
			errs[k] = fmt.Errorf("not read before the read-back ended: %w", ctx.Err())
		}
	}
	return counts, errs
}

// merge adds g's figures to f's.
func (f *finalCheck) merge(g finalCheck) {
	f.Counters += g.Counters
	f.Acked += g.Acked
	f.Sent += g.Sent
	f.Final += g.Final
	f.LostCounters += g.LostCounters
	f.LostAdds += g.LostAdds
	f.OverCounters += g.OverCounters
	f.Unread = append(f.Unread, g.Unread...)
}

// minSentShare is the least share of the calls due that the open loop
// must have sent for the soak to count: below it, what was offered was
// not the rate claimed.
const minSentShare = 0.9

// evaluate checks the soak's assertions, calling fail for each that
// failed.
func (r *overloadResult) evaluate(fail func(format string, args ...any)) {
	c := r.Config
	if r.Err != nil {
		fail("overload: the soak stopped early: %v", r.Err)
	}
	for _, s := range []struct {
		name string
		st   stageStats
	}{{"capacity burst", r.Burst}, {"overload", r.Overload}} {
		if n := s.st.Failed(); n > 0 {
			fail("overload: %s: %d calls ended neither served nor refused with ResourceExhausted (DeadlineExceeded %d, Unavailable %d, other %d), such as %s",
				s.name, n, s.st.Outcomes[outDeadline], s.st.Outcomes[outUnavailable], s.st.Outcomes[outOther], oneLine(firstExample(s.st), 200))
		}
		if s.st.Lost > 0 {
			fail("overload: %s: %d replies carried a count below an acknowledged one: acknowledged Adds were forgotten", s.name, s.st.Lost)
		}
		if s.st.Over > 0 {
			fail("overload: %s: %d replies carried a count above the Adds sent: an Add was counted twice", s.name, s.st.Over)
		}
	}
	if r.Err != nil && r.Offered == 0 {
		return // the overload never ran: nothing more to judge
	}
	o := r.Overload
	switch {
	case o.Outcomes[outOK] == 0:
		fail("overload: no call was admitted")
	case o.P99 > c.P99Bound:
		fail("overload: the admitted calls' p99 latency %v is over the %v bound", o.P99, c.P99Bound)
	}
	if o.Refused() == 0 && o.Failed() == 0 {
		fail("overload: no call was refused: the cluster served %.0f calls/s, so the measured capacity of %.0f was no capacity, and the soak overloaded nothing", r.Offered, r.Capacity)
	}
	if due := r.Loop.Scheduled; due > 0 && float64(r.Loop.Sent) < minSentShare*float64(due) {
		fail("overload: the load generator sent %d of the %d calls due (%d were due while %d were in flight): it did not offer the rate claimed",
			r.Loop.Sent, due, r.Loop.NotSent, r.MaxInFlight)
	}
	for _, w := range r.Silos {
		switch {
		case w.MemSamples == 0:
			fail("overload: %s: no memory sample (%v)", w.Service, r.MemErr)
		case w.MemMax > c.RSSBound:
			fail("overload: %s used %s of memory, over the %s bound", w.Service, formatBytes(w.MemMax), formatBytes(c.RSSBound))
		}
	}
	if r.Err != nil {
		return
	}
	switch {
	case !r.Recovery.Recovered:
		fail("overload: calls were still failing or stalled %v after the load dropped", r.Recovery.Recovery)
	case r.Recovery.Recovery > c.RecoveryBound:
		fail("overload: the cluster served normally again %v after the load dropped, over the %v bound", r.Recovery.Recovery, c.RecoveryBound)
	}
	if r.Recovery.Lost > 0 || r.Recovery.Over > 0 {
		fail("overload: after the drop, %d replies revealed forgotten Adds and %d Adds counted twice", r.Recovery.Lost, r.Recovery.Over)
	}
	f := r.Final
	if f.LostCounters > 0 {
		fail("overload: final read: %d counters lost %d acknowledged Adds", f.LostCounters, f.LostAdds)
	}
	if f.OverCounters > 0 {
		fail("overload: final read: %d counters exceed the Adds sent to them", f.OverCounters)
	}
	if len(f.Unread) > 0 {
		fail("overload: final read: %d counters could not be read, the first: %s", len(f.Unread), f.Unread[0])
	}
}

// firstExample is the message of a failure of s, the first outcome's
// that has one.
func firstExample(s stageStats) string {
	for _, o := range []outcome{outDeadline, outUnavailable, outOther} {
		if e := s.Examples[o]; e != "" {
			return e
		}
	}
	return "none recorded"
}

// formatBytes renders a size in MiB.
func formatBytes(n uint64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
