package reminders

import (
	"fmt"
	"math"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// The schedule is the service's pure core: the reminders this silo owns and
// when each ticks next. It does no I/O, starts no goroutine and reads no
// clock; the time comes in as an argument. It is owned by the service's
// loop goroutine, and its methods may be called from it only.
//
// Each reminder is in one of three states:
//
//	waiting: in the heap, its next tick at due.
//	running: a tick was fired (popDue) and its done has not come; out of
//	         the heap. A change to the reminder only records the entry;
//	         done computes the next tick from it.
//	dropped: removed, or no longer owned, while running. It stays in the
//	         map, not counted as owned, until its done comes and forgets
//	         it, so that a reminder added back meanwhile does not tick
//	         beside its running tick: it turns back into a running one.
//
// A reminder with a period that is not positive cannot be scheduled: it is
// dropped like a removed one.
type schedule struct {
	byGrain map[grain.ID]map[string]*reminder
	heap    dueHeap
	owned   int // reminders waiting or running
}

// reminder is one reminder of the schedule.
type reminder struct {
	e       storage.ReminderEntry
	due     time.Time // the next tick, while waiting
	idx     int       // index in the heap; -1 when not in it
	running bool      // a tick is out: fired, its done not yet come
	tick    time.Time // the running tick's due time
	dropped bool      // removed while running: forget it when done comes
	seen    uint64    // the last range load that found it in the table
}

func newSchedule() *schedule {
	return &schedule{byGrain: make(map[grain.ID]map[string]*reminder)}
}

// get returns the reminder of grain id named name, dropped ones included,
// or nil.
func (s *schedule) get(id grain.ID, name string) *reminder { return s.byGrain[id][name] }

// upsert schedules e, a reminder read from the table at now: a new one
// ticks next at its first tick at or after now; a known one whose first
// tick or period changed takes its new schedule from now (or, while
// running, when its done comes); a known one with the same schedule keeps
// it. fresh says e was read because its grain just registered or changed
// it: then a first tick that came due since (the notice and the read take
// a moment; a due time of 0 is due at once) fires now, late, instead of
// being skipped as a tick missed before this silo owned the reminder
// would be. It reports whether e was scheduled: false when its period is
// not positive, in which case a known reminder of that name is removed.
func (s *schedule) upsert(e storage.ReminderEntry, now time.Time, fresh bool) bool {
	r := s.get(e.Grain, e.Name)
	if e.Period <= 0 {
		if r != nil {
			s.remove(r)
		}
		return false
	}
	if r == nil {
		r = &reminder{e: e, idx: -1, due: firstDue(e, now, fresh)}
		names := s.byGrain[e.Grain]
		if names == nil {
			names = make(map[string]*reminder, 1)
			s.byGrain[e.Grain] = names
		}
		names[e.Name] = r
		s.heap.push(r)
		s.owned++
		return true
	}
	if r.dropped {
		r.dropped = false
		s.owned++
	}
	sameFirst := r.e.FirstTick.Equal(e.FirstTick)
	same := sameFirst && r.e.Period == e.Period
	r.e = e
	if !same && !r.running {
		r.due = firstDue(e, now, fresh && !sameFirst) // a new period alone replays no tick
		s.heap.fix(r)
	}
	return true
}

// firstDue is when a reminder read at now ticks first: see upsert.
func firstDue(e storage.ReminderEntry, now time.Time, fresh bool) time.Time {
	if fresh && !e.FirstTick.After(now) && now.Sub(e.FirstTick) < e.Period {
		return e.FirstTick
	}
	return nextAtOrAfter(e.FirstTick, e.Period, now)
}

// remove unschedules r: at once when waiting; when running, its done will
// not schedule another tick.
func (s *schedule) remove(r *reminder) {
	if r.dropped {
		return
	}
	s.owned--
	if r.running {
		r.dropped = true
		return
	}
	s.heap.remove(r)
	s.forget(r)
}

// forget deletes r from the map.
func (s *schedule) forget(r *reminder) {
	names := s.byGrain[r.e.Grain]
	if names[r.e.Name] != r {
		panic(fmt.Sprintf("reminders: forgetting %s reminder %q, which the schedule does not hold", r.e.Grain, r.e.Name))
	}
	delete(names, r.e.Name)
	if len(names) == 0 {
		delete(s.byGrain, r.e.Grain)
	}
}

// popDue takes the reminder whose tick is earliest, if it is due at now,
// and makes it running; nil when none is due.
func (s *schedule) popDue(now time.Time) *reminder {
	r := s.heap.min()
	if r == nil || r.due.After(now) {
		return nil
	}
	s.heap.remove(r)
	r.running, r.tick = true, r.due
	return r
}

// done ends r's running tick, its grain call having ended at at, and
// schedules the next tick: the first of r's current schedule strictly after
// the tick and at or after at. It returns how many ticks of the schedule
// came due while the tick ran, which are skipped. A dropped r is forgotten
// instead.
func (s *schedule) done(r *reminder, at time.Time) (skipped uint64) {
	if !r.running {
		panic(fmt.Sprintf("reminders: done for %s reminder %q, which has no tick running", r.e.Grain, r.e.Name))
	}
	r.running = false
	if r.dropped {
		s.forget(r)
		return 0
	}
	r.due, skipped = nextAfterTick(r.e.FirstTick, r.e.Period, r.tick, at)
	s.heap.push(r)
	return skipped
}

// next returns when the earliest tick is due; ok is false when no reminder
// is waiting.
func (s *schedule) next() (due time.Time, ok bool) {
	if r := s.heap.min(); r != nil {
		return r.due, true
	}
	return time.Time{}, false
}

// each calls f for every reminder waiting or running, in no order. f may
// remove the reminder it is given.
func (s *schedule) each(f func(r *reminder)) {
	for _, names := range s.byGrain {
		for _, r := range names {
			if !r.dropped {
				f(r)
			}
		}
	}
}

// nextAtOrAfter returns the first tick of the schedule (first, period) at
// or after t: first when t is not after it, else first+k*period for the
// least k that is not before t. Ticks before t are skipped, not replayed.
// period must be positive.
func nextAtOrAfter(first time.Time, period time.Duration, t time.Time) time.Time {
	next := first
	for next.Before(t) {
		// One step but for spans past 292 years, where Sub saturates.
		late := t.Sub(next)
		k := late / period
		if late%period != 0 && k < math.MaxInt64/period {
			k++
		}
		next = next.Add(max(k, 1) * period)
	}
	return next
}

// nextAfterTick returns the tick to schedule after the tick due at tick
// ended at at: the first of the schedule (first, period) strictly after
// tick and at or after at; and how many ticks of the schedule lie between
// the two, skipped because they came due while the tick ran.
func nextAfterTick(first time.Time, period time.Duration, tick, at time.Time) (next time.Time, skipped uint64) {
	after := nextAtOrAfter(first, period, tick.Add(1))
	next = after
	if at.After(next) {
		next = nextAtOrAfter(first, period, at)
	}
	return next, uint64(next.Sub(after) / period)
}

// eachOf calls f for every reminder of grain id waiting or running, in no
// order. f may remove the reminder it is given.
func (s *schedule) eachOf(id grain.ID, f func(r *reminder)) {
	for _, r := range s.byGrain[id] {
		if !r.dropped {
			f(r)
		}
	}
}
