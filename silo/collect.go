package silo

import (
	"time"

	"github.com/granaryio/granary/grain"
)

// collect is the idle collector: on each tick it deactivates activations
// that have been idle for their type's collection age. Owned by Start;
// stopped by beginStop.
func (s *Runtime) collect() {
	defer close(s.collDone)
	tick := s.cfg.CollectionInterval
	for _, t := range s.types {
		tick = min(tick, t.interval)
	}
	ticker := s.clock.NewTicker(tick)
	defer ticker.Stop()
	next := map[*grainType]time.Time{}
	start := s.clock.Now()
	for _, t := range s.types {
		next[t] = start.Add(t.interval)
	}
	if s.collected != nil {
		s.collected(start)
	}
	for {
		select {
		case <-s.collStop:
			return
		case <-ticker.Chan():
			now := s.clock.Now()
			due := map[*grainType]bool{}
			for t, at := range next {
				if !now.Before(at) {
					due[t] = true
					next[t] = now.Add(t.interval)
				}
			}
			if len(due) > 0 {
				s.collectIdle(now, due)
			}
			if s.collected != nil {
				s.collected(now)
			}
		}
	}
}

// collectIdle deactivates the idle activations of the due types. An
// activation is idle when no request or tick runs or waits; it is
// collected once it has stayed idle, with no request between two checks,
// for its type's age.
func (s *Runtime) collectIdle(now time.Time, due map[*grainType]bool) {
	s.forEachActivation(func(a *activationRec) {
		if !due[a.typ] {
			return
		}
		a.mu.Lock()
		switch {
		case a.state != valid || a.deactPending || !a.gate.Idle() || a.ticksRunning > 0 || a.queuedLocked() > 0:
			a.mu.Unlock()
			return
		case a.touched:
			a.touched, a.idleSince = false, now
			a.mu.Unlock()
			return
		case now.Sub(a.idleSince) < a.typ.age:
			a.mu.Unlock()
			return
		}
		a.deactPending, a.deactivate = true, grain.DeactivateIdle
		a.beginDeactivationLocked()
		a.mu.Unlock()
		a.queueDeactivation(nil)
	})
}
