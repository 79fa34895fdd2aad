package local

import (
	"time"

	"github.com/granaryio/granary/directory"
)

// collect is the idle collector: on each tick it deactivates activations
// that have been idle for their type's collection age. Owned by Start;
// stopped by BeginStop.
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

// collectIdle shows the activations of the due types to their lifecycle
// (IdleTick), which collects those that stayed idle for their type's age.
// An activation is busy, and never collected, while a request or tick
// runs or waits.
func (s *Runtime) collectIdle(now time.Time, due map[*GrainType]bool) {
	at := now.Sub(s.Epoch)
	s.ForEachActivation(func(a *Activation) {
		if !due[a.typ] {
			return
		}
		a.Mu.Lock()
		busy := !a.gate.Idle() || a.ticksRunning > 0 || a.QueuedLocked() > 0
		a.unlockDo(nil, a.life.IdleTick(at, a.typ.Age, busy), nil, directory.Entry{})
	})
}
