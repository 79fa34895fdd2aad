package reminders

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

func TestNextAtOrAfter(t *testing.T) {
	f := epoch
	const p = time.Minute
	tests := []struct {
		now  time.Duration // from f
		want time.Duration // from f
	}{
		{-time.Hour, 0},
		{0, 0},
		{1, p},
		{p - 1, p},
		{p, p},
		{p + 1, 2 * p},
		{10*time.Hour + 20*time.Minute + 1, 10*time.Hour + 21*time.Minute},
	}
	for _, tt := range tests {
		if got := nextAtOrAfter(f, p, f.Add(tt.now)); !got.Equal(f.Add(tt.want)) {
			t.Errorf("nextAtOrAfter(f, 1m, f%+v) = f%+v, want f%+v", tt.now, got.Sub(f), tt.want)
		}
	}
	// Spans past what a Duration holds.
	far := f.AddDate(500, 0, 0)
	if got := nextAtOrAfter(f, 24*time.Hour, far); got.Before(far) || !got.Before(far.Add(24*time.Hour)) {
		t.Errorf("nextAtOrAfter 500 years on = %v, want the first day boundary at or after %v", got, far)
	}
}

func TestNextAfterTick(t *testing.T) {
	f := epoch
	const p = time.Minute
	tests := []struct {
		name     string
		tick, at time.Duration // from f
		next     time.Duration // from f
		skipped  uint64
		first    time.Duration // the schedule's first tick, from f
		period   time.Duration
	}{
		{name: "quick", tick: 0, at: time.Second, next: p},
		{name: "done at the next tick", tick: 0, at: p, next: p},
		{name: "just past it", tick: 0, at: p + 1, next: 2 * p, skipped: 1},
		{name: "slow", tick: p, at: 4*p + 30*time.Second, next: 5 * p, skipped: 3},
		{name: "done before the tick", tick: p, at: 0, next: 2 * p},
		{name: "new period", tick: p, at: p + 30*time.Second, next: 10 * p, period: 10 * p},
		{name: "new first tick ahead", tick: p, at: 2 * p, next: time.Hour, first: time.Hour},
		{name: "new schedule, slow", tick: p, at: 3*p + 1, next: 210 * time.Second, first: 90 * time.Second, period: p / 2, skipped: 4},
	}
	for _, tt := range tests {
		first, period := f.Add(tt.first), tt.period
		if period == 0 {
			period = p
		}
		next, skipped := nextAfterTick(first, period, f.Add(tt.tick), f.Add(tt.at))
		if !next.Equal(f.Add(tt.next)) || skipped != tt.skipped {
			t.Errorf("%s: nextAfterTick = f+%v, %d skipped; want f+%v, %d", tt.name, next.Sub(f), skipped, tt.next, tt.skipped)
		}
	}
}

// TestHeap checks the heap against a sorted list under random pushes,
// removals and changes.
func TestHeap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var h dueHeap
	var in []*reminder
	check := func() {
		t.Helper()
		for i, r := range h {
			if r.idx != i {
				t.Fatalf("h[%d].idx = %d", i, r.idx)
			}
			if c := 2*i + 1; c < len(h) && h.less(c, i) || c+1 < len(h) && h.less(c+1, i) {
				t.Fatalf("heap order broken at %d", i)
			}
		}
		if len(h) != len(in) {
			t.Fatalf("heap holds %d, want %d", len(h), len(in))
		}
	}
	for range 5000 {
		switch op := rnd.IntN(4); {
		case op <= 1 || len(in) == 0:
			r := &reminder{idx: -1, due: epoch.Add(time.Duration(rnd.IntN(1000)))}
			h.push(r)
			in = append(in, r)
		case op == 2:
			i := rnd.IntN(len(in))
			h.remove(in[i])
			h.remove(in[i]) // a second remove does nothing
			in = slices.Delete(in, i, i+1)
		default:
			r := in[rnd.IntN(len(in))]
			r.due = epoch.Add(time.Duration(rnd.IntN(1000)))
			h.fix(r)
		}
		check()
		if len(in) > 0 {
			least := slices.MinFunc(in, func(a, b *reminder) int { return a.due.Compare(b.due) })
			if !h.min().due.Equal(least.due) {
				t.Fatalf("min due %v, want %v", h.min().due, least.due)
			}
		}
	}
}

// TestSchedule drives the pure core directly: owned counts, dropping a
// running reminder and adding it back.
func TestSchedule(t *testing.T) {
	s := newSchedule()
	id := grain.NewID("test.G", "a")
	e := storage.ReminderEntry{Grain: id, Name: "r", FirstTick: epoch.Add(time.Minute), Period: time.Minute, ETag: "1"}
	if !s.upsert(e, epoch, false) || s.owned != 1 {
		t.Fatalf("upsert: owned %d", s.owned)
	}
	bad := e
	bad.Name, bad.Period = "bad", 0
	if s.upsert(bad, epoch, false) || s.owned != 1 || s.get(id, "bad") != nil {
		t.Fatalf("a reminder with period 0 was scheduled")
	}
	if due, ok := s.next(); !ok || !due.Equal(e.FirstTick) {
		t.Fatalf("next = %v, %v", due, ok)
	}
	if r := s.popDue(epoch.Add(time.Minute - 1)); r != nil {
		t.Fatalf("popDue before due returned %+v", r)
	}
	r := s.popDue(epoch.Add(time.Minute))
	if r == nil || !r.running {
		t.Fatalf("popDue at due returned %+v", r)
	}
	if _, ok := s.next(); ok {
		t.Fatalf("a running reminder is in the heap")
	}
	s.remove(r)
	if s.owned != 0 || !r.dropped || s.get(id, "r") != r {
		t.Fatalf("remove while running: owned %d, dropped %v", s.owned, r.dropped)
	}
	s.upsert(e, epoch.Add(2*time.Minute), false) // back, while the tick runs
	if s.owned != 1 || r.dropped {
		t.Fatalf("added back: owned %d, dropped %v", s.owned, r.dropped)
	}
	if sk := s.done(r, epoch.Add(2*time.Minute+1)); sk != 1 {
		t.Errorf("done skipped %d, want 1", sk)
	}
	if due, _ := s.next(); !due.Equal(epoch.Add(3 * time.Minute)) {
		t.Errorf("next = %v, want 3 min", due)
	}
	r = s.popDue(epoch.Add(3 * time.Minute))
	s.remove(r)
	s.done(r, epoch.Add(4*time.Minute))
	if s.owned != 0 || len(s.byGrain) != 0 || len(s.heap) != 0 {
		t.Errorf("after removal and done: owned %d, %d grains, heap %d", s.owned, len(s.byGrain), len(s.heap))
	}
}
