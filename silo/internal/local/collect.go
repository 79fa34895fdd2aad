package local

import (
	"fmt"
	"math"
	"time"

	"github.com/granaryio/granary/directory"
)

// collect is the idle collector: it looks at each grain type once per
// the type's collection interval and deactivates the activations that
// have been idle for the type's collection age. Owned by Start; stopped
// by BeginStop.
//
// The bound it keeps: an activation that went idle at t (its activation
// or its last active turn ended; see IdleNow) is collected at the first
// look at or after t+age, and looks at a type are one interval apart, so
// it lives between age and age+interval of idleness, plus the time the
// collector's wake-up and the deactivate turn take to be scheduled. The
// idle time comes from the timeout wheel's coarse clock, so the lower
// bound also gives way by as much as the wheel's sweeper runs late (a
// pause of the whole process, say), which is small next to any age.
//
// Looks are scheduled on a fixed grid per type (the collector's start
// plus whole intervals), with one clock timer set for the earliest, which
// fires at or after it: every look happens at or after its grid point,
// and the grid does not drift by the time each look takes. A look that comes late (a loaded machine, or a fake
// clock moved by several intervals) moves its type to the next grid point
// after it. Types that are keep-alive are never looked at.
//
// The memory collector's rounds (memcollect.go), when MemoryCollection is
// on, are one more entry of the same schedule, on a grid of their own
// interval: one goroutine and one clock timer serve both, the test hook
// Collected and CollectorCaughtUp cover both, and a memory round never
// runs at the same time as an idle look.
func (s *Runtime) collect() {
	defer close(s.collDone)
	defer s.collNext.Store(math.MaxInt64)
	start := s.Clock.Now()
	var sched []collectSchedule
	var mem *memCollector
	if mc := s.Cfg.MemoryCollection; mc.HeapTarget > 0 {
		mem = newMemCollector(mc)
		sched = append(sched, collectSchedule{iv: mc.Interval, next: start.Add(mc.Interval)})
	}
	for _, t := range s.Types {
		if t.Interval <= 0 && !t.Opts.KeepAlive {
			// The silo's config validation refuses it; a grid of no
			// interval would never advance.
			panic(fmt.Sprintf("local: grain type %s has collection interval %v", t.Desc.Type, t.Interval))
		}
		if !t.Opts.KeepAlive {
			sched = append(sched, collectSchedule{typ: t, iv: t.Interval, next: start.Add(t.Interval)})
		}
	}
	if len(sched) == 0 { // nothing to collect, ever
		s.collNext.Store(math.MaxInt64)
		if s.Collected != nil {
			s.Collected(start)
		}
		<-s.collStop
		return
	}
	timer := s.Clock.NewTimer(earliest(sched).Sub(start))
	defer timer.Stop()
	s.collNext.Store(int64(earliest(sched).Sub(s.Epoch)))
	if s.Collected != nil {
		s.Collected(start)
	}
	due := make([]*GrainType, 0, len(sched))
	for {
		select {
		case <-s.collStop:
			return
		case <-timer.Chan():
		}
		now := s.Clock.Now()
		due = due[:0]
		memDue := false
		for i := range sched {
			if sc := &sched[i]; !now.Before(sc.next) {
				if sc.typ == nil {
					memDue = true
				} else {
					due = append(due, sc.typ)
				}
				sc.advance(now)
			}
		}
		// Re-armed before the look and before Collected: a test that moves
		// a fake clock on once told finds the timer set.
		timer.Reset(earliest(sched).Sub(now))
		if len(due) > 0 {
			s.collectIdle(now, due)
		}
		if memDue {
			s.collectMemory(mem, now)
		}
		s.collNext.Store(int64(earliest(sched).Sub(s.Epoch)))
		if s.Collected != nil {
			s.Collected(now)
		}
	}
}

// collectSchedule is when the collector next looks at a type, or makes
// its next memory round (typ nil). Collector only.
type collectSchedule struct {
	typ  *GrainType
	iv   time.Duration // the grid's step: the type's interval, or the memory round's
	next time.Time
}

// interval is the schedule's step.
func (sc *collectSchedule) interval() time.Duration {
	if sc.iv > 0 {
		return sc.iv
	}
	return sc.typ.Interval
}

// advance moves the schedule past now, to the next point of its grid.
func (sc *collectSchedule) advance(now time.Time) {
	iv := sc.interval()
	sc.next = sc.next.Add(iv)
	if late := now.Sub(sc.next); late >= 0 {
		sc.next = sc.next.Add((late/iv + 1) * iv)
	}
}

// earliest is the time of the next look at any type.
func earliest(sched []collectSchedule) time.Time {
	e := sched[0].next
	for _, sc := range sched[1:] {
		if sc.next.Before(e) {
			e = sc.next
		}
	}
	return e
}

// collectIdle shows the activations of the due types to their lifecycle
// (IdleTick), which collects those that stayed idle for their type's age
// and are not kept by DelayDeactivation. An activation is busy, and never
// collected, while a request or tick runs or waits. Collector only.
func (s *Runtime) collectIdle(now time.Time, due []*GrainType) {
	at := now.Sub(s.Epoch)
	look := func(a *Activation) bool {
		a.Mu.Lock()
		a.unlockDo(nil, a.life.IdleTick(at, a.typ.Age, a.busyLocked()), nil, directory.Entry{})
		return true
	}
	for _, t := range due {
		t.Acts.each(look)
		t.Sets.Range(func(_, v any) bool {
			for _, a := range v.(*WorkerSet).Snapshot() {
				look(a)
			}
			return true
		})
	}
}

// busyLocked reports whether anything runs or waits at the activation: a
// request running or queued in the gate, a request or timer tick in its
// queue, or an interleaving tick running. Collection, by age or for
// memory, passes a busy activation by. It is read under Mu in the same
// critical section as the lifecycle event that would begin the
// deactivation, so a request that arrives after it is offered to a
// lifecycle that is already Deactivating, which holds it and reroutes it
// to the next activation. Mu held.
func (a *Activation) busyLocked() bool {
	return !a.gate.Idle() || a.ticksRunning > 0 || a.QueuedLocked() > 0
}
