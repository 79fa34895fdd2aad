package silo

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
)

// wheelTick is a timer tick as a test saw it: the timer, and the silo's
// time (since the test's start) when it ran.
type wheelTick struct {
	name string
	at   time.Duration
}

// wheelTimer is a timer for registerWheelTimers to register.
type wheelTimer struct {
	name        string
	due, period time.Duration
}

// wheelHarness is a fake-clock harness for timer tests that move the
// clock by minutes: no idle collection, and a coarse call-timeout sweep,
// whose fake ticker the clock would otherwise expire every 10 ms of a
// jump.
type wheelHarness struct {
	*harness
	start time.Time
	ticks chan wheelTick

	mu     sync.Mutex
	timers map[string]grain.Timer
}

func newWheelHarness(t *testing.T) *wheelHarness {
	h := newHarness(t, harnessOpt{fake: true, cfg: func(c *Config) {
		c.CollectionAge, c.CollectionInterval = 1000*time.Hour, 1000*time.Hour
		c.TimeoutResolution = time.Second
	}})
	w := &wheelHarness{harness: h, start: h.clock.Now(), ticks: make(chan wheelTick, 4096), timers: map[string]grain.Timer{}}
	h.script("timers", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		for _, wt := range w.specs(req.GetText()) {
			name := wt.name
			tm, err := ctx.RegisterTimer(name, func(grain.Context) error {
				w.ticks <- wheelTick{name, w.now()}
				return nil
			}, wt.due, wt.period)
			if err != nil {
				return nil, err
			}
			w.mu.Lock()
			w.timers[name] = tm
			w.mu.Unlock()
		}
		return &probe.Reply{}, nil
	})
	return w
}

// specs holds the timers each "timers" request registers, by its text.
var wheelSpecs sync.Map // string -> []wheelTimer

func (w *wheelHarness) specs(key string) []wheelTimer {
	v, _ := wheelSpecs.Load(key)
	ts, _ := v.([]wheelTimer)
	return ts
}

func (w *wheelHarness) now() time.Duration { return w.clock.Since(w.start) }

// register registers ts on grain key.
func (w *wheelHarness) register(key string, ts ...wheelTimer) {
	w.t.Helper()
	spec := w.t.Name() + "/" + key
	wheelSpecs.Store(spec, ts)
	w.t.Cleanup(func() { wheelSpecs.Delete(spec) })
	if _, err := w.probe(key).Call(testCtx(w.t), &probe.Request{Tag: "timers", Text: spec}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wheelHarness) timer(name string) grain.Timer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.timers[name]
}

// advanceTo moves the fake clock on to d after the test's start.
func (w *wheelHarness) advanceTo(d time.Duration) {
	w.clock.Advance(d - w.now())
}

// expect waits for the ticks of names, in any order, each at the time at.
func (w *wheelHarness) expect(at time.Duration, names ...string) {
	w.t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	if len(want) == 0 {
		return
	}
	testwait.Until(w.t, w.ticks, defaultTestTimeout, fmt.Sprintf("timers %v to tick at %v", sortedKeys(want), at), func(tk wheelTick) bool {
		switch {
		case !want[tk.name]:
			w.t.Fatalf("timer %q ticked at %v; waiting at %v for %v", tk.name, tk.at, at, sortedKeys(want))
		case tk.at != at:
			w.t.Fatalf("timer %q ticked at %v, want %v", tk.name, tk.at, at)
		}
		delete(want, tk.name)
		return len(want) == 0
	})
}

// armed is when the wheel's clock timer fires, after the test's start,
// or never.
func (w *wheelHarness) armed() time.Duration {
	a := time.Duration(w.s.rt.TimerWheel.Armed.Load())
	if a == local.Never {
		return local.Never
	}
	return a - w.start.Sub(w.s.rt.Epoch)
}

// waitArmed waits until the wheel's clock timer is set for at: the
// sweeper swept, fired what was due and re-armed.
func (w *wheelHarness) waitArmed(at time.Duration) {
	w.t.Helper()
	testwait.For(w.t, defaultTestTimeout, fmt.Sprintf("the timer wheel armed for %v", at), func() bool { return w.armed() == at })
}

// barrier waits until the ticks queued on the grains keys have ended,
// and so re-armed their timers: a request waits for the tick before it.
// The test then may move the clock on: a tick re-arms its timer a period
// after it ends, by the clock.
func (w *wheelHarness) barrier(keys ...string) {
	w.t.Helper()
	for _, k := range keys {
		if _, err := w.probe(k).Call(testCtx(w.t), &probe.Request{}); err != nil {
			w.t.Fatal(err)
		}
	}
}

// quiesce waits until no timer is linked and every tick fired has run on
// the grains keys, then fails on any tick not yet expected.
func (w *wheelHarness) quiesce(keys ...string) {
	w.t.Helper()
	w.waitArmed(local.Never)
	w.barrier(keys...) // queued behind any tick fired before the wheel went idle
	select {
	case tk := <-w.ticks:
		w.t.Fatalf("timer %q ticked at %v, unexpectedly", tk.name, tk.at)
	default:
	}
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestTimerWheelFiresEachOnceWhenDue: many timers on several grains, due
// at times spread over several turns of the wheel, some together, some
// between two resolution ticks, some on the wheel's span: each ticks once,
// when the clock is advanced to exactly its due time and not before.
func TestTimerWheelFiresEachOnceWhenDue(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	if a := w.armed(); a != local.Never {
		t.Fatalf("an idle silo's timer wheel is armed for %v", a)
	}
	r := rand.New(rand.NewPCG(1, 2))
	span := local.TimerWheelSlots * DefaultConfig().TimerResolution
	fixed := []time.Duration{0, time.Millisecond, time.Millisecond, 1500 * time.Microsecond, span - time.Millisecond, span, span + time.Millisecond, 2 * span, 3*span + 100*time.Microsecond}
	byDue := map[time.Duration][]string{}
	var grains []string
	for g := range 8 {
		key := fmt.Sprintf("w%d", g)
		grains = append(grains, key)
		var ts []wheelTimer
		for i := range 40 {
			due := time.Duration(r.IntN(40_000)) * 100 * time.Microsecond // up to 4 s
			if i < len(fixed) && g%2 == 0 {
				due = fixed[i]
			}
			name := fmt.Sprintf("%s.%d", key, i)
			ts = append(ts, wheelTimer{name: name, due: due})
			byDue[due] = append(byDue[due], name)
		}
		w.register(key, ts...)
	}
	var dues []time.Duration
	for d := range byDue {
		dues = append(dues, d)
	}
	slices.Sort(dues)
	for _, d := range dues {
		w.advanceTo(d)
		w.expect(d, byDue[d]...)
	}
	w.quiesce(grains...)
}

// TestTimerWheelBurst: more timers due together than one batch turn
// queues tick once each, periodic ones again a period later.
func TestTimerWheelBurst(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	var grains, names []string
	for g := range 12 {
		key := fmt.Sprintf("b%d", g)
		grains = append(grains, key)
		var ts []wheelTimer
		for i := range timerWheelBatchTest / 12 {
			name := fmt.Sprintf("%s.%d", key, i)
			names = append(names, name)
			ts = append(ts, wheelTimer{name: name, due: time.Second, period: time.Second})
		}
		w.register(key, ts...)
	}
	w.advanceTo(time.Second)
	w.expect(time.Second, names...)
	w.barrier(grains...)
	w.waitArmed(2 * time.Second)
	w.advanceTo(2 * time.Second)
	w.expect(2*time.Second, names...)
	for _, n := range names {
		w.timer(n).Stop()
	}
	w.advanceTo(3 * time.Second) // the clock timer may still be set for 3 s
	w.quiesce(grains...)
}

// timerWheelBatchTest is how many timers TestTimerWheelBurst runs: three
// batch turns' worth.
const timerWheelBatchTest = 3*local.TimerBatchMax - 12

// TestTimerWheelFarFuture: a timer due many turns of the wheel away ticks
// when due, and one in the same slot a turn later waits its turn; a
// periodic timer of such a period ticks again a period later.
func TestTimerWheelFarFuture(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	const far = 10 * time.Minute
	span := local.TimerWheelSlots * DefaultConfig().TimerResolution
	w.register("far",
		wheelTimer{name: "once", due: far},
		wheelTimer{name: "periodic", due: far, period: far},
		wheelTimer{name: "next-turn", due: far + span})
	w.waitArmed(far)
	w.advanceTo(far - time.Millisecond)
	w.advanceTo(far)
	w.expect(far, "once", "periodic")
	w.barrier("far")
	w.waitArmed(far + span)
	w.advanceTo(far + span)
	w.expect(far+span, "next-turn")
	w.waitArmed(2 * far)
	w.advanceTo(2*far - time.Millisecond)
	w.advanceTo(2 * far)
	w.expect(2*far, "periodic")
	w.timer("periodic").Stop()
	// The clock timer may still be set for the stopped timer's next
	// tick: that wake-up finds nothing and arms nothing.
	w.advanceTo(3 * far)
	w.quiesce("far")
}

// TestTimerWheelStopBeforeDue: a timer stopped before it is due never
// ticks, nor does stopping it disturb another timer of its slot or
// grain. Stop is idempotent.
func TestTimerWheelStopBeforeDue(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	w.register("s1", wheelTimer{name: "stopped", due: time.Second, period: time.Second}, wheelTimer{name: "later", due: 2 * time.Second})
	w.register("s2", wheelTimer{name: "stopped2", due: time.Second}, wheelTimer{name: "kept", due: time.Second})
	w.timer("stopped").Stop()
	w.timer("stopped").Stop()
	w.timer("stopped2").Stop()
	w.advanceTo(time.Second)
	w.expect(time.Second, "kept")
	w.waitArmed(2 * time.Second) // the sweep at 1 s fired what it would
	w.advanceTo(2 * time.Second)
	w.expect(2*time.Second, "later")
	w.quiesce("s1", "s2")
	if err := w.timer("stopped").Change(time.Second, 0); err == nil {
		t.Fatal("Change of a stopped timer succeeded")
	}
}

// TestTimerWheelChange: Change moves a timer's next tick later or earlier
// and sets its period; Change(0, ...) during a tick ticks again as soon as
// the tick ends.
func TestTimerWheelChange(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	w.register("c", wheelTimer{name: "later", due: time.Second}, wheelTimer{name: "sooner", due: 10 * time.Second, period: 0})
	if err := w.timer("later").Change(3*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.timer("sooner").Change(500*time.Millisecond, 250*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	w.advanceTo(500 * time.Millisecond)
	w.expect(500*time.Millisecond, "sooner")
	w.barrier("c")
	w.waitArmed(750 * time.Millisecond) // a period after the tick ended
	w.advanceTo(750 * time.Millisecond)
	w.expect(750*time.Millisecond, "sooner")
	w.barrier("c")
	w.timer("sooner").Stop()
	w.advanceTo(time.Second) // "later" was due here before Change
	w.waitArmed(3 * time.Second)
	w.advanceTo(3 * time.Second)
	w.expect(3*time.Second, "later")
	w.quiesce("c")
}

// TestTimerWheelChangeDuringTick: Change(0, 0) while the timer's tick runs
// makes it tick again right after, at the same time; Change to a later
// due time during a tick of a one-shot timer ticks it then, once.
func TestTimerWheelChangeDuringTick(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	holds := map[int]gate{1: w.gate(), 3: w.gate()}
	started := make(chan int, 16)
	n := 0 // the timer's ticks only
	w.script("blocking", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		tm, err := ctx.RegisterTimer("b", func(ctx grain.Context) error {
			n++
			k := n
			started <- k
			if hold, ok := holds[k]; ok {
				ctx.Blocking(func() { <-hold.c })
			}
			w.ticks <- wheelTick{fmt.Sprintf("b%d", k), w.now()}
			return nil
		}, time.Second, 0)
		w.mu.Lock()
		w.timers["b"] = tm
		w.mu.Unlock()
		return &probe.Reply{}, err
	})
	if _, err := w.probe("cd").Call(testCtx(t), &probe.Request{Tag: "blocking"}); err != nil {
		t.Fatal(err)
	}
	waitStarted := func(want int) {
		t.Helper()
		if k := testwait.Recv(t, started, defaultTestTimeout, fmt.Sprintf("tick %d to start", want)); k != want {
			t.Fatalf("tick %d started, want %d", k, want)
		}
	}
	w.advanceTo(time.Second)
	waitStarted(1)
	if err := w.timer("b").Change(0, 0); err != nil {
		t.Fatal(err)
	}
	holds[1].open()
	w.expect(time.Second, "b1")
	waitStarted(2)
	w.expect(time.Second, "b2")
	// A one-shot timer that ticked may be changed to tick again.
	if err := w.timer("b").Change(time.Second, 0); err != nil {
		t.Fatal(err)
	}
	w.waitArmed(2 * time.Second)
	w.advanceTo(2 * time.Second)
	waitStarted(3)
	if err := w.timer("b").Change(5*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	w.waitArmed(7 * time.Second)
	holds[3].open()
	w.expect(2*time.Second, "b3")
	w.advanceTo(7*time.Second - time.Millisecond)
	w.advanceTo(7 * time.Second)
	waitStarted(4)
	w.expect(7*time.Second, "b4")
	w.quiesce("cd")
}

// TestTimerWheelIdleNotArmed: the wheel's clock timer is armed only while
// a timer is linked: after the last timer's tick, and after the last
// timer stops, an idle silo does not wake for timers.
func TestTimerWheelIdleNotArmed(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	if a := w.armed(); a != local.Never {
		t.Fatalf("an idle silo's timer wheel is armed for %v", a)
	}
	w.register("i", wheelTimer{name: "once", due: time.Second}, wheelTimer{name: "stopped", due: time.Hour})
	w.timer("stopped").Stop()
	w.advanceTo(time.Second)
	w.expect(time.Second, "once")
	w.quiesce("i") // waits for never
	// Nothing linked: an hour passes without a sweep.
	w.advanceTo(time.Hour)
	if a := w.armed(); a != local.Never {
		t.Fatalf("armed for %v with no timer", a)
	}
}

// TestTimerWheelHaltsWithSilo: stopping the silo ends its activations'
// timers and the wheel's sweeper, and the clock timer is disarmed.
func TestTimerWheelHaltsWithSilo(t *testing.T) {
	t.Parallel()
	w := newWheelHarness(t)
	w.register("h", wheelTimer{name: "p", due: time.Second, period: time.Second})
	w.advanceTo(time.Second)
	w.expect(time.Second, "p")
	if err := w.s.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.s.rt.TimerWheel.Done:
	default:
		t.Fatal("the timer wheel's sweeper runs after Stop")
	}
	tw := &w.s.rt.TimerWheel
	tw.ArmMu.Lock()
	halted := tw.Halted
	tw.ArmMu.Unlock()
	if !halted {
		t.Fatal("the timer wheel is not halted after Stop")
	}
	w.advanceTo(time.Hour) // would fire the clock timer, were it armed
	select {
	case tk := <-w.ticks:
		t.Fatalf("timer %q ticked at %v after Stop", tk.name, tk.at)
	default:
	}
	if err := w.timer("p").Change(time.Second, 0); err == nil {
		t.Fatal("Change of a timer of a stopped silo succeeded")
	}
}

// TestTimerWheelRealClock: on the real clock, timers registered together
// tick once each, none before it is due.
func TestTimerWheelRealClock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	type tick struct {
		name  string
		early time.Duration // how much before its due time it ran, if it did
	}
	ticks := make(chan tick, 1000)
	const due = 30 * time.Millisecond
	h.script("real", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		for i := range 25 {
			name := fmt.Sprintf("%s.%d", ctx.ID().Key, i)
			reg := time.Now()
			d := due + time.Duration(i)*100*time.Microsecond
			if _, err := ctx.RegisterTimer(name, func(grain.Context) error {
				ticks <- tick{name, max(0, d-time.Since(reg))}
				return nil
			}, d, 0); err != nil {
				return nil, err
			}
		}
		return &probe.Reply{}, nil
	})
	var grains []string
	for g := range 8 {
		key := fmt.Sprintf("r%d", g)
		grains = append(grains, key)
		if _, err := h.probe(key).Call(testCtx(t), &probe.Request{Tag: "real"}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	testwait.Until(t, ticks, defaultTestTimeout, fmt.Sprintf("%d timers to tick", 8*25), func(tk tick) bool {
		if seen[tk.name] {
			t.Fatalf("timer %s ticked twice", tk.name)
		}
		if tk.early > 0 {
			t.Fatalf("timer %s ticked %v before it was due", tk.name, tk.early)
		}
		seen[tk.name] = true
		return len(seen) == 8*25
	})
	testwait.For(t, defaultTestTimeout, "the timer wheel idle", func() bool { return time.Duration(h.s.rt.TimerWheel.Armed.Load()) == local.Never })
	for _, k := range grains {
		if _, err := h.probe(k).Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case tk := <-ticks:
		t.Fatalf("timer %s ticked twice", tk.name)
	default:
	}
}

// TestTimerWheelWakeAt: with the real clock a wake-up is rounded up to
// the end of its resolution tick, so the timers due in one tick are
// collected together, none early; with a fake clock it is exact.
func TestTimerWheelWakeAt(t *testing.T) {
	t.Parallel()
	w := &local.TimerWheel{Res: time.Millisecond}
	for _, c := range []struct{ due, want time.Duration }{
		{0, 0},
		{1, time.Millisecond},
		{time.Millisecond, time.Millisecond},
		{time.Millisecond + 1, 2 * time.Millisecond},
		{1999 * time.Microsecond, 2 * time.Millisecond},
	} {
		if got := w.WakeAt(c.due); got != c.want {
			t.Errorf("wakeAt(%v) = %v, want %v", c.due, got, c.want)
		}
	}
	w.Exact = true
	if got := w.WakeAt(1500 * time.Microsecond); got != 1500*time.Microsecond {
		t.Errorf("exact wakeAt(1.5ms) = %v", got)
	}
}

// TestTimerResolutionValidated: TimerResolution must be positive, and the
// error names it.
func TestTimerResolutionValidated(t *testing.T) {
	t.Parallel()
	for _, res := range []time.Duration{0, -time.Millisecond} {
		cfg := DefaultConfig()
		cfg.TimerResolution = res
		_, err := New(cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "TimerResolution" {
			t.Fatalf("TimerResolution %v: %v, want a ConfigError naming TimerResolution", res, err)
		}
	}
}
