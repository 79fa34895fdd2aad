package silo

import (
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/overload"
	"github.com/jonboulle/clockwork"
)

// This file holds the views of a silo's runtime that package
// silo/granarytest needs to run silos on a fake clock and to tell when
// the work a clock event started is done. They are for that package:
// other code should not use them, and they change with the runtime.

// TestHooks are a silo's hooks for package silo/granarytest; see
// Silo.TestHooks.
type TestHooks struct{ s *Silo }

// TestHooks returns the silo's hooks for package silo/granarytest. Not
// for other code.
func (s *Silo) TestHooks() TestHooks { return TestHooks{s} }

// CollectorCaughtUp reports whether the idle collector has made every
// look due by now, a time of the silo's clock, and asked the grains it
// found idle to deactivate; true when it has no type to look at, and
// false until it starts. Any goroutine after Start.
func (h TestHooks) CollectorCaughtUp(now time.Time) bool { return h.s.rt.CollectorCaughtUp(now) }

// TimersSwept reports whether the grain-timer wheel has collected every
// grain timer due by now, a time of the silo's clock, and queued its
// tick: the wheel's clock timer is set for later, or for nothing, or the
// wheel has stopped. Any goroutine after Start.
func (h TestHooks) TimersSwept(now time.Time) bool {
	w := &h.s.rt.TimerWheel
	w.ArmMu.Lock()
	defer w.ArmMu.Unlock()
	return w.Halted || time.Duration(w.Armed.Load()) > now.Sub(h.s.rt.Epoch)
}

// SetOverload sets the silo's overload counters, whether it sheds load
// and, when not 0, its concurrency limit, to o: Stats().Overload reports
// them from then on, plus whatever the silo counts itself. It lets the
// tests of what shows those counters (metrics, the admin API, the
// dashboard) make a silo look overloaded on cue. Any goroutine.
func (h TestHooks) SetOverload(o OverloadStats) {
	c := &h.s.rt.Overload
	c.QueueWarnings.Store(o.QueueWarnings)
	c.QueueRefusals.Store(o.QueueRefusals)
	c.WaitRefusals.Store(o.WaitRefusals)
	c.LimitRefusals.Store(o.LimitRefusals)
	c.Shed.Store(o.Shed)
	c.MemoryCollections.Store(o.MemoryCollections)
	c.AbandonedTurns.Store(o.AbandonedTurns)
	c.Shedding.Store(o.Shedding)
	h.s.hookLimit.Store(o.ConcurrencyLimit)
}

// Holds reports whether the silo's catalog holds an activation of id
// (for a stateless worker, any of its activations), whatever the
// directory says. Any goroutine.
func (h TestHooks) Holds(id grain.ID) bool { return len(h.s.localActivations(id)) > 0 }

// sampleLoadWith has the load-shedding monitor sample cpu, cores and heap
// on clock instead of this process on the real clock, so that a test
// decides when the silo sheds. For this package's tests, between New and
// Start, with LoadShedding.Enabled.
func (s *Silo) sampleLoadWith(clock clockwork.Clock, cpu func() time.Duration, cores func() int, heap func() uint64) {
	c := s.shed.Config()
	c.Clock, c.CPUTime, c.Cores, c.Heap = clock, cpu, cores, heap
	mon, err := overload.New(c)
	if err != nil {
		panic(err) // c passed New once already
	}
	s.shed = mon
	s.rt.Cfg.Limiter = mon.Limiter()
}
