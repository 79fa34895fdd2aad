package local

import (
	"time"

	"github.com/granaryio/granary/grain"
)

// collect is the idle collector: on each tick it deactivates activations
// that have been idle for their type's collection age. Owned by Start;
// stopped by beginStop.
func (s *Runtime) collect() {
	defer close(s.collDone)
	tick := s.Cfg.CollectionInterval
	for _, t := range s.Types {
		tick = min(tick, t.Interval)
	}
	ticker := s.Clock.NewTicker(tick)
	defer ticker.Stop()
	next := map[*GrainType]time.Time{}
	start := s.Clock.Now()
	for _, t := range s.Types {
		next[t] = start.Add(t.Interval)
	}
	if s.Collected != nil {
		s.Collected(start)
	}
	for {
		select {
		case <-s.collStop:
			return
		case <-ticker.Chan():
			now := s.Clock.Now()
			due := map[*GrainType]bool{}
			for t, at := range next {
				if !now.Before(at) {
					due[t] = true
					next[t] = now.Add(t.Interval)
				}
			}
			if len(due) > 0 {
				s.collectIdle(now, due)
			}
			if s.Collected != nil {
				s.Collected(now)
			}
		}
	}
}

// collectIdle deactivates the idle activations of the due types. An
// activation is idle when no request or tick runs or waits; it is
// collected once it has stayed idle, with no request between two checks,
// for its type's age.
func (s *Runtime) collectIdle(now time.Time, due map[*GrainType]bool) {
	s.ForEachActivation(func(a *ActivationRec) {
		if !due[a.typ] {
			return
		}
		a.Mu.Lock()
		switch {
		case a.State != Valid || a.DeactPending || !a.gate.Idle() || a.ticksRunning > 0 || a.QueuedLocked() > 0:
			a.Mu.Unlock()
			return
		case a.touched:
			a.touched, a.idleSince = false, now
			a.Mu.Unlock()
			return
		case now.Sub(a.idleSince) < a.typ.Age:
			a.Mu.Unlock()
			return
		}
		a.DeactPending, a.deactivate = true, grain.DeactivateIdle
		a.beginDeactivationLocked()
		a.Mu.Unlock()
		a.queueDeactivation(nil)
	})
}
