package reminders

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

func TestNewValidates(t *testing.T) {
	table := newFakeTable()
	fire := func(storage.ReminderEntry, grain.TickStatus, func(error)) {}
	tests := []struct {
		name string
		cfg  Config
		want string // "" for no error
	}{
		{"defaults", Config{Table: table, Fire: fire}, ""},
		{"no table", Config{Fire: fire}, "reminders: config: Table: required"},
		{"no fire", Config{Table: table}, "reminders: config: Fire: required"},
		{"negative refresh", Config{Table: table, Fire: fire, RefreshInterval: -time.Second}, "reminders: config: RefreshInterval: "},
		{"negative retry", Config{Table: table, Fire: fire, RetryInterval: -time.Second}, "reminders: config: RetryInterval: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.want == "":
				if s.cfg.RefreshInterval != DefaultRefreshInterval || s.cfg.RetryInterval != DefaultRetryInterval || s.cfg.Clock == nil || s.cfg.Logger == nil {
					t.Errorf("defaults not filled in: %+v", s.cfg)
				}
				s.Stop() // never started
			case err == nil || !strings.HasPrefix(err.Error(), tt.want):
				t.Fatalf("New: error %v, want %q...", err, tt.want)
			}
		})
	}
}

// TestTicks: a reminder ticks at its first tick, then every period, with
// the right status, and its tardiness is recorded.
func TestTicks(t *testing.T) {
	h := newHarness(t, false, nil)
	e := h.table.put(entry("a", "r", 10, epoch.Add(10*time.Second), time.Minute))
	h.svc.SetRanges(all)
	h.wantOwned(1)

	h.advance(10*time.Second - 1)
	h.noTick()
	h.advance(1)
	h.expectTick(e, e.FirstTick).done(nil)
	for k := 1; k <= 3; k++ {
		h.advance(time.Minute - 1)
		h.noTick()
		h.advance(1)
		f := h.expectTick(e, e.FirstTick.Add(time.Duration(k)*time.Minute))
		if k == 2 {
			f.done(errors.New("grain failed"))
		} else {
			f.done(nil)
		}
	}
	// Delivered late: the clock jumps 7 s past the next tick.
	h.advance(time.Minute + 7*time.Second)
	h.expectTick(e, e.FirstTick.Add(4*time.Minute)).done(nil)
	h.settle()

	st := h.svc.Stats()
	if st.Ticks != 5 || st.Failures != 1 || st.Skipped != 0 || st.Owned != 1 {
		t.Errorf("Stats = %+v, want 5 ticks, 1 failure, none skipped, 1 owned", st)
	}
	tard := st.Tardiness
	if tard.Count != 5 || tard.Max != 7*time.Second || tard.Sum != 7*time.Second {
		t.Errorf("Tardiness = %+v, want 5 ticks, one 7 s late", tard)
	}
	if tard.Counts[0] != 4 || tard.Quantile(0.5) != time.Millisecond || tard.Quantile(1) != 10*time.Second {
		t.Errorf("Tardiness = %+v: want 4 on time and the median at most 1 ms, the max in (5 s, 10 s]", tard)
	}
	// The next tick is a period after the late one was due, not after it
	// was delivered.
	h.advance(time.Minute - 7*time.Second)
	h.expectTick(e, e.FirstTick.Add(5*time.Minute))
}

// TestSlowTickSkips: ticks that come due while the previous one runs are
// skipped and counted; the next is the first due after done.
func TestSlowTickSkips(t *testing.T) {
	h := newHarness(t, false, nil)
	e := h.table.put(entry("a", "r", 10, epoch.Add(time.Minute), time.Minute))
	h.svc.SetRanges(all)
	h.advance(time.Minute)
	f := h.expectTick(e, epoch.Add(time.Minute))

	h.advance(3*time.Minute + 30*time.Second) // 2, 3 and 4 min come due
	h.noTick()
	f.done(nil) // at 4 min 30 s
	h.settle()
	if st := h.svc.Stats(); st.Skipped != 3 {
		t.Errorf("Skipped = %d, want 3 (the ticks due at 2, 3 and 4 min)", st.Skipped)
	}
	h.advance(30*time.Second - 1)
	h.noTick()
	h.advance(1)
	f = h.expectTick(e, epoch.Add(5*time.Minute))

	// done exactly at a tick's due time: that tick is the next.
	h.advance(time.Minute)
	f.done(nil)
	h.expectTick(e, epoch.Add(6*time.Minute))
	if st := h.svc.Stats(); st.Skipped != 3 {
		t.Errorf("Skipped = %d, want still 3", st.Skipped)
	}
}

// TestAutoDone: done called before Fire returns is fine.
func TestAutoDone(t *testing.T) {
	h := newHarness(t, true, nil)
	e := h.table.put(entry("a", "r", 10, epoch, time.Minute))
	h.svc.SetRanges(all)
	h.expectTick(e, epoch)
	for k := 1; k <= 5; k++ {
		h.advance(time.Minute)
		h.expectTick(e, epoch.Add(time.Duration(k)*time.Minute))
	}
	if st := h.svc.Stats(); st.Ticks != 6 || st.Skipped != 0 {
		t.Errorf("Stats = %+v, want 6 ticks, none skipped", st)
	}
}

// TestFirstTickLongPast: a reminder loaded long after its first tick
// ticks next at its next period boundary; the missed ticks are not
// replayed.
func TestFirstTickLongPast(t *testing.T) {
	h := newHarness(t, false, nil)
	first := epoch.Add(-(10*time.Hour + 20*time.Minute))
	e := h.table.put(entry("a", "r", 10, first, time.Hour))
	h.svc.SetRanges(all)
	h.wantOwned(1)
	h.noTick()
	h.advance(40*time.Minute - 1)
	h.noTick()
	h.advance(1)
	h.expectTick(e, epoch.Add(40*time.Minute)).done(nil)
	h.advance(time.Hour)
	h.expectTick(e, epoch.Add(100*time.Minute))
	if st := h.svc.Stats(); st.Skipped != 0 {
		t.Errorf("Skipped = %d: ticks missed before the load are not counted", st.Skipped)
	}
}

// TestSetRanges: reminders moved away stop at once, newly owned ones are
// loaded, and one moved away while its tick runs is not rescheduled.
func TestSetRanges(t *testing.T) {
	h := newHarness(t, false, nil)
	low := storage.HashRange{Lo: 0, Hi: 1<<63 - 1}
	high := storage.HashRange{Lo: 1 << 63, Hi: ^uint64(0)}
	a := h.table.put(entry("a", "r", 10, epoch.Add(time.Minute), time.Minute))
	b := h.table.put(entry("b", "r", 1<<63+10, epoch.Add(2*time.Minute), time.Minute))

	h.svc.SetRanges([]storage.HashRange{low})
	h.wantOwned(1)
	h.advance(time.Minute)
	h.expectTick(a, epoch.Add(time.Minute)).done(nil)
	h.noTick()

	// a moves away, b comes.
	h.svc.SetRanges([]storage.HashRange{high})
	h.wantOwned(1)
	h.advance(time.Minute)
	f := h.expectTick(b, epoch.Add(2*time.Minute))
	h.noTick()

	// b moves away while its tick runs: done does not reschedule it.
	h.svc.SetRanges(nil)
	h.wantOwned(0)
	f.done(nil)
	h.advance(5*time.Minute + 30*time.Second)
	h.noTick()
	h.wantOwned(0)

	// Both come back: each ticks again, from its next period boundary.
	rangeReads, _ := h.table.reads()
	h.svc.SetRanges([]storage.HashRange{high, low})
	h.wantOwned(2)
	if n, _ := h.table.reads(); n != rangeReads+1 {
		t.Errorf("%d range reads for one SetRanges, want 1", n-rangeReads)
	}
	h.advance(30*time.Second - 1)
	h.noTick()
	h.advance(1)
	got := map[string]time.Time{}
	for range 2 {
		f := h.next()
		got[f.e.Grain.Key] = f.st.CurrentTick
	}
	want := epoch.Add(8 * time.Minute)
	if !got["a"].Equal(want) || !got["b"].Equal(want) {
		t.Errorf("ticks %v, want a and b at %v", got, want)
	}
}

// TestSetRangesLoadsOnlyNew: a range already owned is not read again when
// another is added.
func TestSetRangesLoadsOnlyNew(t *testing.T) {
	h := newHarness(t, false, nil)
	h.svc.SetRanges([]storage.HashRange{{Lo: 0, Hi: 99}})
	h.settle()
	h.svc.SetRanges([]storage.HashRange{{Lo: 0, Hi: 199}, {Lo: 1000, Hi: 1099}})
	h.settle()
	if n, _ := h.table.reads(); n != 2 {
		t.Fatalf("%d range reads, want 2", n)
	}
	if got, want := h.svc.Stats().Loads, uint64(2); got != want {
		t.Errorf("Loads = %d, want %d", got, want)
	}
}

// TestLoadRetry: a failed range read is retried after RetryInterval.
func TestLoadRetry(t *testing.T) {
	h := newHarness(t, false, nil)
	e := h.table.put(entry("a", "r", 10, epoch.Add(time.Hour), time.Hour))
	h.table.set(func(t *fakeTable) { t.failRange = 2 })
	h.svc.SetRanges(all)
	h.wantOwned(0)
	h.advance(testRetry - 1)
	h.wantOwned(0)
	h.advance(1) // fails again
	h.wantOwned(0)
	h.advance(testRetry)
	h.wantOwned(1)
	if st := h.svc.Stats(); st.Loads != 3 || st.LoadFailures != 2 {
		t.Errorf("Loads = %d, LoadFailures = %d, want 3 and 2", st.Loads, st.LoadFailures)
	}
	h.advance(time.Hour - 2*testRetry)
	h.expectTick(e, e.FirstTick)
}

// TestLoadRetryRangesChange: a new SetRanges retries a failed read at once.
func TestLoadRetryRangesChange(t *testing.T) {
	h := newHarness(t, false, nil)
	h.table.put(entry("a", "r", 10, epoch.Add(time.Hour), time.Hour))
	h.table.put(entry("b", "r", 1000, epoch.Add(time.Hour), time.Hour))
	h.table.set(func(t *fakeTable) { t.failRange = 1 })
	h.svc.SetRanges([]storage.HashRange{{Lo: 0, Hi: 99}})
	h.wantOwned(0)
	h.svc.SetRanges([]storage.HashRange{{Lo: 0, Hi: 99}, {Lo: 1000, Hi: 1000}})
	h.wantOwned(2)
	if n, _ := h.table.reads(); n != 2 {
		t.Errorf("%d range reads, want 2", n)
	}
}

// TestChanged: Changed adds, updates and removes a grain's reminders.
func TestChanged(t *testing.T) {
	h := newHarness(t, false, nil)
	h.svc.SetRanges([]storage.HashRange{{Lo: 0, Hi: 1000}})
	h.wantOwned(0)

	// Added.
	e := h.table.put(entry("a", "r", 10, epoch.Add(time.Minute), time.Minute))
	h.svc.Changed(e.Grain, e.Hash)
	h.wantOwned(1)
	h.advance(time.Minute)
	h.expectTick(e, epoch.Add(time.Minute)).done(nil)

	// A new ETag with the same schedule keeps it.
	e = h.table.put(e)
	h.svc.Changed(e.Grain, e.Hash)
	h.settle()
	h.advance(time.Minute)
	f := h.expectTick(e, epoch.Add(2*time.Minute))
	if f.e.ETag != e.ETag {
		t.Errorf("tick carries ETag %q, want %q", f.e.ETag, e.ETag)
	}
	f.done(nil)

	// A new period takes effect from now.
	e.Period = 10 * time.Minute
	e = h.table.put(e)
	h.svc.Changed(e.Grain, e.Hash)
	h.settle()
	h.advance(9 * time.Minute) // 11 min: the new schedule's first tick
	h.expectTick(e, epoch.Add(11*time.Minute)).done(nil)

	// A second reminder of the grain, and one of a grain not owned.
	e2 := h.table.put(entry("a", "s", 10, epoch.Add(15*time.Minute), time.Hour))
	far := h.table.put(entry("far", "r", 5000, epoch.Add(15*time.Minute), time.Minute))
	_, grainReads := h.table.reads()
	h.svc.Changed(e2.Grain, e2.Hash)
	h.svc.Changed(far.Grain, far.Hash)
	h.wantOwned(2)
	if _, n := h.table.reads(); n != grainReads+1 {
		t.Errorf("%d grain reads, want 1: the grain not owned is not read", n-grainReads)
	}

	// Removed.
	h.table.del(e.Grain, e.Name)
	h.svc.Changed(e.Grain, e.Hash)
	h.wantOwned(1)
	h.advance(4 * time.Minute)
	h.expectTick(e2, epoch.Add(15*time.Minute))
	h.advance(20 * time.Minute)
	h.noTick()
}

// TestChangedWhileRunning: a reminder changed while its tick runs takes
// its new schedule when done comes; one removed while its tick runs is not
// rescheduled, and one added back meanwhile does not tick beside it.
func TestChangedWhileRunning(t *testing.T) {
	h := newHarness(t, false, nil)
	e := h.table.put(entry("a", "r", 10, epoch.Add(time.Minute), time.Minute))
	h.svc.SetRanges(all)
	h.advance(time.Minute)
	f := h.expectTick(e, epoch.Add(time.Minute))

	e.Period = 10 * time.Minute
	e = h.table.put(e)
	h.svc.Changed(e.Grain, e.Hash)
	h.advance(30 * time.Second)
	h.noTick()
	f.done(nil) // at 1 min 30 s: the new schedule ticks next at 11 min
	h.advance(10*time.Minute - 30*time.Second - 1)
	h.noTick()
	h.advance(1)
	f = h.expectTick(e, epoch.Add(11*time.Minute))

	// Removed while running.
	h.table.del(e.Grain, e.Name)
	h.svc.Changed(e.Grain, e.Hash)
	h.wantOwned(0)
	f.done(nil)
	h.advance(time.Hour)
	h.noTick()

	// Added back while a tick of its earlier self runs.
	e = h.table.put(entry("a", "r", 10, h.clock.Now().Add(time.Minute), time.Minute))
	h.svc.Changed(e.Grain, e.Hash)
	h.advance(time.Minute)
	f = h.expectTick(e, e.FirstTick)
	h.table.del(e.Grain, e.Name)
	h.svc.Changed(e.Grain, e.Hash)
	h.wantOwned(0)
	e = h.table.put(e)
	h.svc.Changed(e.Grain, e.Hash)
	h.wantOwned(1)
	h.advance(5 * time.Minute)
	h.noTick()  // the earlier tick still runs
	f.done(nil) // exactly when the tick at 5 min is due: that one is next
	h.expectTick(e, e.FirstTick.Add(5*time.Minute))
	if st := h.svc.Stats(); st.Skipped != 4 {
		t.Errorf("Skipped = %d, want 4", st.Skipped)
	}
}

// TestChangedReadRetry: a failed grain read is retried after RetryInterval.
func TestChangedReadRetry(t *testing.T) {
	h := newHarness(t, false, nil)
	h.svc.SetRanges(all)
	h.settle()
	e := h.table.put(entry("a", "r", 10, epoch.Add(time.Hour), time.Hour))
	h.table.set(func(t *fakeTable) { t.failGrain = 1 })
	h.svc.Changed(e.Grain, e.Hash)
	h.wantOwned(0)
	h.advance(testRetry)
	h.wantOwned(1)
}

// TestRefresh: the periodic refresh picks up rows added and removed
// without a Changed.
func TestRefresh(t *testing.T) {
	h := newHarness(t, false, nil)
	h.svc.SetRanges(all)
	h.wantOwned(0)
	e := h.table.put(entry("a", "r", 10, epoch.Add(3*testRefresh), time.Hour))
	h.advance(testRefresh - 1)
	h.wantOwned(0)
	h.advance(1)
	h.wantOwned(1)
	h.table.del(e.Grain, e.Name)
	h.advance(testRefresh)
	h.wantOwned(0)
	h.advance(2 * testRefresh)
	h.noTick()
}

// TestStop: Stop waits, cancels a read in flight, fires nothing after it
// returns, and may be called again; a done after Stop is harmless.
func TestStop(t *testing.T) {
	h := newHarness(t, false, nil)
	e := h.table.put(entry("a", "r", 10, epoch.Add(time.Minute), time.Minute))
	h.svc.SetRanges(all)
	h.advance(time.Minute)
	f := h.expectTick(entry("a", "r", 10, e.FirstTick, e.Period), e.FirstTick)

	// A read blocks in the table until Stop cancels it.
	h.table.set(func(t *fakeTable) { t.block = make(chan struct{}) })
	h.svc.Changed(e.Grain, e.Hash)
	h.svc.Stop()
	h.svc.Stop()
	f.done(nil)
	h.clock.Advance(time.Hour)
	select {
	case f := <-h.fires:
		t.Fatalf("tick after Stop: %+v", f.st)
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.clock.BlockUntilContext(ctx, 1); err == nil {
		t.Errorf("the clock still has a timer after Stop")
	}
	if st := h.svc.Stats(); st.LoadFailures != 0 {
		t.Errorf("LoadFailures = %d: a read cancelled by Stop is not a failure", st.LoadFailures)
	}
	// Calls after Stop do nothing.
	h.svc.SetRanges(all)
	h.svc.Changed(e.Grain, e.Hash)
	h.svc.Start()
}

// TestStopBeforeStart: a service never started stops at once.
func TestStopBeforeStart(t *testing.T) {
	s, err := New(Config{Table: newFakeTable(), Fire: func(storage.ReminderEntry, grain.TickStatus, func(error)) {}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetRanges(all)
	s.Stop()
	s.Start()
	s.Stop()
}

// TestManyReminders: 100,000 reminders load quickly and are scheduled with
// one clock timer.
func TestManyReminders(t *testing.T) {
	const n = 100_000
	h := newHarness(t, true, nil)
	h.table.mu.Lock()
	for i := range n {
		// FirstTicks a millisecond apart, from 1 min on.
		h.table.rows[key{grain.NewID("test.G", itoa(i)), "r"}] = storage.ReminderEntry{
			Grain: grain.NewID("test.G", itoa(i)), Name: "r", Hash: uint64(i) * 184467440737095,
			FirstTick: epoch.Add(time.Minute + time.Duration(i)*time.Millisecond), Period: time.Hour, ETag: "1",
		}
	}
	h.table.mu.Unlock()
	start := time.Now()
	h.svc.SetRanges(all)
	h.wantOwned(n)
	// Generous under -race; the load takes well under a second without.
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("loading %d reminders took %v", n, d)
	}

	// One timer for them all: the clock has exactly one waiter.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Errorf("the clock has no timer")
	}
	if err := h.clock.BlockUntilContext(ctx, 2); err == nil {
		t.Errorf("the clock has more than one timer")
	}

	// The first ten come due in order.
	h.advance(time.Minute + 9*time.Millisecond)
	for i := range 10 {
		f := h.next()
		if want := epoch.Add(time.Minute + time.Duration(i)*time.Millisecond); !f.st.CurrentTick.Equal(want) {
			t.Fatalf("tick %d due %v, want %v", i, f.st.CurrentTick, want)
		}
	}
	h.noTick()
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestCrowdDueAtOnce: more ticks due at once than the loop fires in one
// turn are all fired, in turns.
func TestCrowdDueAtOnce(t *testing.T) {
	const n = 3*fireBatch + 7
	var fires atomic.Int64
	h := newHarness(t, false, func(c *Config) {
		c.Fire = func(_ storage.ReminderEntry, _ grain.TickStatus, done func(error)) {
			fires.Add(1)
			done(nil)
		}
	})
	for i := range n {
		h.table.put(entry(strconv.Itoa(i), "r", uint64(i), epoch.Add(time.Minute), time.Minute))
	}
	h.svc.SetRanges(all)
	h.wantOwned(n)
	for k := int64(1); k <= 2; k++ {
		h.advance(time.Minute)
		if got := fires.Load(); got != k*n {
			t.Fatalf("%d ticks fired, want %d", got, k*n)
		}
	}
	if st := h.svc.Stats(); st.Ticks != 2*n || st.Skipped != 0 || st.Tardiness.Max != 0 {
		t.Errorf("Stats: %d ticks, %d skipped, tardiness max %v; want %d, 0, 0", st.Ticks, st.Skipped, st.Tardiness.Max, 2*n)
	}
}

// TestDoneTwicePanics: done is called exactly once; a second call is a
// broken contract.
func TestDoneTwicePanics(t *testing.T) {
	h := newHarness(t, false, nil)
	e := h.table.put(entry("a", "r", 10, epoch, time.Minute))
	h.svc.SetRanges(all)
	f := h.expectTick(e, epoch)
	f.done(nil)
	defer func() {
		if recover() == nil {
			t.Errorf("a second done did not panic")
		}
	}()
	f.done(nil)
}
