package silo

import (
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
)

// testReminderPeriod is the period of the reminders in these tests: far
// below the production minimum, which tests lower to it.
const testReminderPeriod = 40 * time.Millisecond

func withReminders(m *storage.Memory) func(*Config) {
	return func(c *Config) {
		memoryStore(m)(c)
		c.Reminders = &RemindersConfig{MinPeriod: time.Millisecond, RefreshInterval: 200 * time.Millisecond, RetryInterval: 20 * time.Millisecond}
	}
}

func remind(t *testing.T, c grain.Caller, key, name string, due, period time.Duration) *probe.RegisterReply {
	t.Helper()
	r, err := reg(c, key).Remind(testCtx(t), &probe.RegisterOp{Name: name, DueMs: due.Milliseconds(), PeriodMs: period.Milliseconds()})
	if err != nil {
		t.Fatalf("Remind %s/%s: %v", key, name, err)
	}
	return r
}

func TestReminderFiresOnSchedule(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	s := newStateSilo(t, w, withReminders(storage.NewMemory(0)))
	before := time.Now()
	r := remind(t, s, "a", "r", 2*testReminderPeriod, testReminderPeriod)
	if len(r.Reminders) != 1 || r.Reminders[0] != "r/"+testReminderPeriod.String() {
		t.Fatalf("Reminders() = %v", r.Reminders)
	}
	ticks := w.waitTicks(t, "a", "r", 4)
	first := ticks[0].st.FirstTick
	if first.Before(before.Add(2*testReminderPeriod)) || ticks[0].at.Before(first) {
		t.Fatalf("first tick due %v, delivered %v; registered at %v with due %v", first, ticks[0].at, before, 2*testReminderPeriod)
	}
	for i, tk := range ticks {
		if !tk.st.FirstTick.Equal(first) || tk.st.Period != testReminderPeriod {
			t.Fatalf("tick %d status %+v: first tick or period changed", i, tk.st)
		}
		if off := tk.st.CurrentTick.Sub(first); off%testReminderPeriod != 0 {
			t.Fatalf("tick %d due %v after the first: not a whole number of periods", i, off)
		}
		if i > 0 && !tk.st.CurrentTick.After(ticks[i-1].st.CurrentTick) {
			t.Fatalf("tick %d due %v, not after tick %d at %v", i, tk.st.CurrentTick, i-1, ticks[i-1].st.CurrentTick)
		}
		if tk.at.Before(tk.st.CurrentTick) {
			t.Fatalf("tick %d delivered at %v, before it was due at %v", i, tk.at, tk.st.CurrentTick)
		}
	}
	st := s.Stats().Reminders
	if st == nil || st.Owned != 1 || st.Ticks < 4 || st.Tardiness.Count < 4 {
		t.Fatalf("reminder stats %+v: want 1 owned, at least 4 ticks with their tardiness", st)
	}
}

// A reminder wakes its grain when it is not active, and stops when it is
// unregistered.
func TestReminderActivatesAndUnregisters(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	s := newStateSilo(t, w, withReminders(storage.NewMemory(0)))
	remind(t, s, "sleepy", "wake", time.Hour, testReminderPeriod) // registers, then changes the schedule below
	remind(t, s, "sleepy", "wake", testReminderPeriod, testReminderPeriod)
	deactivate(t, s, "sleepy")
	w.drainTicks()
	w.waitTicks(t, "sleepy", "wake", 1)
	if n := w.activationsOf("sleepy"); n < 2 {
		t.Fatalf("%d activations: the tick did not activate the grain again", n)
	}
	if _, err := reg(s, "sleepy").Remind(testCtx(t), &probe.RegisterOp{Name: "wake", Remove: true}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "the reminder to be dropped", func() bool { return s.Stats().Reminders.Owned == 0 })
	w.drainTicks() // one may have been on its way
	select {
	case tk := <-w.ticks:
		t.Fatalf("tick %+v after the reminder was removed and dropped", tk)
	case <-time.After(5 * testReminderPeriod):
	}
}

func TestReminderSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := newRegisterWorld()
	cfg := func(c *Config) {
		c.DataDir = dir
		c.Reminders = &RemindersConfig{MinPeriod: time.Millisecond}
	}
	s, err := startStateSilo(t, w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	remind(t, s, "kept", "r", time.Hour, testReminderPeriod) // first due long after the restart...
	remind(t, s, "kept", "r", 3*testReminderPeriod, testReminderPeriod)
	stopSilo(t, s)
	w.drainTicks()
	s2 := newStateSilo(t, w, cfg) // ...but the update was stored
	w.waitTicks(t, "kept", "r", 2)
	if st := s2.Stats().Reminders; st.Owned != 1 {
		t.Fatalf("restarted silo owns %d reminders, want 1", st.Owned)
	}
}

// A tick that falls due while no silo runs fires as soon as the restarted
// silo takes calls: not while it starts, where the call would fail and the
// tick be lost until the next period.
func TestReminderDueAtRestart(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	m := storage.NewMemory(0)
	w := newRegisterWorld()
	cfg := func(c *Config) {
		withReminders(m)(c)
		c.Clock = clock
	}
	s, err := startStateSilo(t, w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	remind(t, s, "due", "r", time.Hour, 24*time.Hour)
	stopSilo(t, s)
	clock.Advance(time.Hour) // the tick is due now, and no silo runs
	s2 := newStateSilo(t, w, cfg)
	tk := w.waitTicks(t, "due", "r", 1)[0]
	if !tk.st.CurrentTick.Equal(tk.st.FirstTick) {
		t.Fatalf("tick %+v: want the first", tk.st)
	}
	if st := s2.Stats().Reminders; st.Failures != 0 {
		t.Fatalf("%d ticks failed", st.Failures)
	}
}

// notRemindable registers reminders without implementing Remindable.
type notRemindable struct {
	probe.UnimplementedRegisterGrain
}

func (notRemindable) Remind(ctx grain.Context, req *probe.RegisterOp) (*probe.RegisterReply, error) {
	_, err := ctx.RegisterReminder(req.Name, 0, time.Duration(req.PeriodMs)*time.Millisecond)
	return &probe.RegisterReply{}, err
}

func TestReminderErrors(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	off := newStateSilo(t, w, memoryStore(storage.NewMemory(0)))
	_, err := reg(off, "a").Remind(testCtx(t), &probe.RegisterOp{Name: "r", PeriodMs: 1000})
	wantCode(t, err, codes.FailedPrecondition, "a reminder on a silo without the service")

	on := newStateSilo(t, w, func(c *Config) {
		withReminders(storage.NewMemory(0))(c)
		c.Reminders.MinPeriod = 0 // the default minute
		c.Name = "on"
	})
	_, err = reg(on, "a").Remind(testCtx(t), &probe.RegisterOp{Name: "r", PeriodMs: 1000})
	wantCode(t, err, codes.InvalidArgument, "a period below the minimum")
	if !strings.Contains(err.Error(), "MinPeriod") {
		t.Fatalf("error %q does not name MinPeriod", err)
	}
	_, err = reg(on, "a").Remind(testCtx(t), &probe.RegisterOp{Name: "r", DueMs: -5, PeriodMs: 60_000})
	wantCode(t, err, codes.InvalidArgument, "a negative due time")

	plain, err := New(func() Config {
		c := DefaultConfig()
		withReminders(storage.NewMemory(0))(&c)
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.RegisterRegisterGrain(plain, func(grain.ID) probe.RegisterGrain { return notRemindable{} }); err != nil {
		t.Fatal(err)
	}
	if err := plain.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer stopSilo(t, plain)
	_, err = reg(plain, "a").Remind(testCtx(t), &probe.RegisterOp{Name: "r", PeriodMs: 1000})
	wantCode(t, err, codes.FailedPrecondition, "a reminder of a grain that is not Remindable")

	bad := DefaultConfig()
	bad.Reminders = &RemindersConfig{MinPeriod: -time.Second}
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "Reminders.MinPeriod") {
		t.Fatalf("negative MinPeriod: %v, want an error naming it", err)
	}
	noTable := DefaultConfig()
	noTable.Reminders = &RemindersConfig{}
	s, _ := New(noTable)
	if err := s.Start(testCtx(t)); err == nil || !strings.Contains(err.Error(), "Reminders.Table") {
		t.Fatalf("reminders without a table: %v, want an error naming Reminders.Table", err)
	}
}

// In a cluster each reminder fires from the silo that owns its grain's
// ring position; when that silo is killed, a survivor takes the position
// and the reminder goes on firing.
func TestReminderOwnerKilled(t *testing.T) {
	t.Parallel()
	w := newRegisterWorld()
	m := storage.NewMemory(0)
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{
		tweak:    withReminders(m),
		register: func(s *Silo, name string) { w.register(t, s, name) },
	})
	// Keys owned by each silo, so the one killed owns one.
	owners := map[string]string{}
	ring := ringOf(tc.silo("a"))
	for _, key := range keys("k", 200) {
		if len(owners) == 3 {
			break
		}
		owner := ring.OwnerOf(grain.NewID(probe.RegisterGrainType, key))
		if _, ok := owners[owner]; !ok {
			owners[owner] = key
		}
	}
	victim := tc.silo("b").Member()
	key := owners[victim]
	remind(t, tc.silo("a"), key, "r", 0, testReminderPeriod)
	w.waitTicks(t, key, "r", 2)
	if n := tc.silo("b").Stats().Reminders.Owned; n != 1 {
		t.Fatalf("the owner of %s owns %d reminders, want 1", key, n)
	}
	tc.kill("b")
	testwait.For(t, defaultTestTimeout, "the survivors to drop b from the ring", func() bool {
		return !onRing(tc.silo("a"), victim) && !onRing(tc.silo("c"), victim)
	})
	killed := time.Now()
	w.drainTicks()
	ticks := w.waitTicks(t, key, "r", 3)
	if last := ticks[len(ticks)-1]; last.at.Before(killed) || last.silo == "b" {
		t.Fatalf("tick %+v after the kill", last)
	}
	newOwner := directory.Position(grain.NewID(probe.RegisterGrainType, key))
	owner := ringOf(tc.silo("a")).Owner(newOwner)
	var ownerSilo *Silo
	for _, s := range tc.live() {
		if s.Member() == owner {
			ownerSilo = s
		}
	}
	if ownerSilo == nil || ownerSilo.Stats().Reminders.Owned != 1 {
		t.Fatalf("the new owner %s does not own the reminder", owner)
	}
}
