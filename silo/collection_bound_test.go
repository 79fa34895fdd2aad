package silo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
)

// The idle collector's bound: an activation idle since t (its last call
// ended) is collected at the collector's first look at or after t+age, and
// the looks at its type are one interval apart, so it lives between age
// and age+interval of idleness. These tests pin that on the fake clock,
// where the look it is collected at is known exactly, and on the real one.

// collectClock drives a fake-clock harness's collector: it moves the clock
// on one step at a time and, at each point of the collectors' grids,
// waits until the collector has looked.
type collectClock struct {
	h     *harness
	t0    time.Time       // the collector's start
	grids []time.Duration // the intervals of the collected types
	step  time.Duration
}

func newCollectClock(h *harness, step time.Duration, grids ...time.Duration) *collectClock {
	return &collectClock{h: h, t0: h.clock.Now(), grids: grids, step: step}
}

// since is the fake time since the collector started.
func (c *collectClock) since() time.Duration { return c.h.clock.Since(c.t0) }

// stepOnce moves the clock on by one step and waits for the look due then,
// if one is.
func (c *collectClock) stepOnce() {
	c.h.t.Helper()
	c.h.clock.Advance(c.step)
	at := c.since()
	for _, iv := range c.grids {
		if at%iv == 0 {
			c.h.waitCollected(c.t0.Add(at))
			return
		}
	}
}

// stepTo moves the clock on to d after the collector's start.
func (c *collectClock) stepTo(d time.Duration) {
	c.h.t.Helper()
	for c.since() < d {
		c.stepOnce()
	}
}

// collectedAt steps the clock until the activation of typ/key is
// collected (its deactivation began at a look) and returns the time of
// that look; it fails if that is not by limit.
func (c *collectClock) collectedAt(typ, key string, limit time.Duration) time.Duration {
	c.h.t.Helper()
	for !collected(c.h, typ, key) {
		if c.since() >= limit {
			c.h.t.Fatalf("%s/%s not collected by %v", typ, key, limit)
		}
		c.stepOnce()
	}
	return c.since()
}

// collected reports whether the activation of typ/key began deactivating
// or is gone. The collector begins a deactivation under the activation's
// lock before it reports its look, so after waitCollected this is exact.
func collected(h *harness, typ, key string) bool {
	a := actOf(h, typ, key)
	if a == nil {
		return true
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	return a.Lifecycle() >= lifecycle.Deactivating
}

// firstLook is the first point of the grid every iv from 0 at or after d.
func firstLook(d, iv time.Duration) time.Duration { return (d + iv - 1) / iv * iv }

// TestCollectionBoundFakeClock: for several ages and intervals, and types
// with their own age or interval, an idle activation is collected at
// exactly the first look at least its age after its last call ended:
// never before its age, never after age plus interval.
func TestCollectionBoundFakeClock(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		age, interval time.Duration // the silo's
		register      []grain.RegisterOption
		types         map[string]TypeConfig
		typeAge       time.Duration // the probe type's own, if set
		typeInterval  time.Duration // the probe type's own, if set
		calls         []time.Duration
		step          time.Duration
	}{
		{name: "age 1s interval 500ms", age: time.Second, interval: 500 * time.Millisecond,
			calls: []time.Duration{130 * time.Millisecond}, step: 10 * time.Millisecond},
		{name: "last call restarts the clock", age: time.Second, interval: 500 * time.Millisecond,
			calls: []time.Duration{130 * time.Millisecond, 610 * time.Millisecond}, step: 10 * time.Millisecond},
		{name: "age not a multiple of the interval", age: time.Second, interval: 300 * time.Millisecond,
			calls: []time.Duration{10 * time.Millisecond}, step: 10 * time.Millisecond},
		{name: "call just before a look", age: time.Second, interval: 500 * time.Millisecond,
			calls: []time.Duration{490 * time.Millisecond}, step: 10 * time.Millisecond},
		{name: "call at a look", age: time.Second, interval: 500 * time.Millisecond,
			calls: []time.Duration{500 * time.Millisecond}, step: 10 * time.Millisecond},
		{name: "minutes", age: 10 * time.Minute, interval: time.Minute,
			calls: []time.Duration{90 * time.Second}, step: 30 * time.Second},
		{name: "type's own age", age: time.Hour, interval: 200 * time.Millisecond,
			register: []grain.RegisterOption{grain.WithCollectionAge(700 * time.Millisecond)}, typeAge: 700 * time.Millisecond,
			calls: []time.Duration{50 * time.Millisecond}, step: 10 * time.Millisecond},
		{name: "type's own age and interval", age: time.Hour, interval: time.Hour,
			types:   map[string]TypeConfig{probe.ProbeGrainType: {CollectionAge: time.Second, CollectionInterval: 250 * time.Millisecond}},
			typeAge: time.Second, typeInterval: 250 * time.Millisecond,
			calls: []time.Duration{60 * time.Millisecond, 770 * time.Millisecond}, step: 10 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOpt{fake: true,
				register: map[string][]grain.RegisterOption{probe.ProbeGrainType: tc.register},
				cfg: func(c *Config) {
					c.CollectionAge, c.CollectionInterval, c.Types = tc.age, tc.interval, tc.types
				}})
			age, iv := tc.age, tc.interval
			if tc.typeAge > 0 {
				age = tc.typeAge
			}
			if tc.typeInterval > 0 {
				iv = tc.typeInterval
			}
			clk := newCollectClock(h, tc.step, tc.interval, iv)
			ref := h.probe("k")
			for _, at := range tc.calls {
				clk.stepTo(at)
				if collected(h, probe.ProbeGrainType, "k") && at != tc.calls[0] {
					t.Fatalf("collected before the call at %v", at)
				}
				if _, err := ref.Call(testCtx(t), &probe.Request{}); err != nil {
					t.Fatal(err)
				}
			}
			idle := tc.calls[len(tc.calls)-1]
			got := clk.collectedAt(probe.ProbeGrainType, "k", idle+age+iv+tc.step)
			if want := firstLook(idle+age, iv); got != want {
				t.Errorf("idle since %v, age %v, interval %v: collected at %v, want %v", idle, age, iv, got, want)
			}
			if life := got - idle; life < age || life > age+iv {
				t.Errorf("lived %v idle, want within [%v, %v]", life, age, age+iv)
			}
			h.waitEvent("deactivate probe.Probe/k idle")
		})
	}
}

// delayTestConfig: collected after one idle minute, looked for every
// minute.
func delayTestConfig(c *Config) { c.CollectionAge, c.CollectionInterval = time.Minute, time.Minute }

// newDelayHarness is a fake-clock harness whose requests tagged "delay"
// call DelayDeactivation(N) and whose requests tagged "leave" also call
// DeactivateOnIdle.
func newDelayHarness(t *testing.T, o harnessOpt) (*harness, *collectClock) {
	o.fake = true
	if o.cfg == nil {
		o.cfg = delayTestConfig
	}
	h := newHarness(t, o)
	h.script("delay", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		ctx.DelayDeactivation(time.Duration(req.GetN()))
		return &probe.Reply{Activation: ctx.ActivationID()}, nil
	})
	h.script("leave", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		ctx.DelayDeactivation(time.Duration(req.GetN()))
		ctx.DeactivateOnIdle()
		return &probe.Reply{Activation: ctx.ActivationID()}, nil
	})
	return h, newCollectClock(h, time.Minute, time.Minute)
}

func delay(t *testing.T, h *harness, key string, d time.Duration) {
	t.Helper()
	if _, err := h.probe(key).Call(testCtx(t), &probe.Request{Tag: "delay", N: int64(d)}); err != nil {
		t.Fatal(err)
	}
}

// TestDelayDeactivation: DelayDeactivation keeps an idle activation from
// being collected until the delay has run out; a later call replaces the
// delay, a shorter one too; a negative one cancels it.
func TestDelayDeactivation(t *testing.T) {
	t.Parallel()
	t.Run("extends", func(t *testing.T) {
		t.Parallel()
		h, clk := newDelayHarness(t, harnessOpt{})
		delay(t, h, "k", 10*time.Minute)
		if got := clk.collectedAt(probe.ProbeGrainType, "k", time.Hour); got != 10*time.Minute {
			t.Fatalf("collected at %v, want 10m0s (idle since 0s, age 1m, delayed 10m)", got)
		}
		h.waitEvent("deactivate probe.Probe/k idle")
	})
	t.Run("shorter replaces", func(t *testing.T) {
		t.Parallel()
		h, clk := newDelayHarness(t, harnessOpt{})
		delay(t, h, "k", 10*time.Minute)
		clk.stepTo(2 * time.Minute)
		delay(t, h, "k", 3*time.Minute) // until 5m
		if got := clk.collectedAt(probe.ProbeGrainType, "k", time.Hour); got != 5*time.Minute {
			t.Fatalf("collected at %v, want 5m0s", got)
		}
	})
	t.Run("negative cancels", func(t *testing.T) {
		t.Parallel()
		h, clk := newDelayHarness(t, harnessOpt{})
		delay(t, h, "k", 10*time.Minute)
		clk.stepTo(2 * time.Minute)
		delay(t, h, "k", -1)
		if got := clk.collectedAt(probe.ProbeGrainType, "k", time.Hour); got != 3*time.Minute {
			t.Fatalf("collected at %v, want 3m0s: its age after the cancelling call", got)
		}
	})
	t.Run("from OnActivate", func(t *testing.T) {
		t.Parallel()
		h, clk := newDelayHarness(t, harnessOpt{})
		h.script("activate:k", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
			ctx.DelayDeactivation(4 * time.Minute)
			return nil, nil
		})
		if _, err := h.probe("k").Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
		if got := clk.collectedAt(probe.ProbeGrainType, "k", time.Hour); got != 4*time.Minute {
			t.Fatalf("collected at %v, want 4m0s", got)
		}
	})
	t.Run("does not block DeactivateOnIdle", func(t *testing.T) {
		t.Parallel()
		h, _ := newDelayHarness(t, harnessOpt{})
		if _, err := h.probe("k").Call(testCtx(t), &probe.Request{Tag: "leave", N: int64(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		h.waitEvent("deactivate probe.Probe/k requested") // the clock never moved
	})
	t.Run("does not block Stop", func(t *testing.T) {
		t.Parallel()
		h, _ := newDelayHarness(t, harnessOpt{})
		delay(t, h, "k", time.Hour)
		if err := h.s.Stop(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		h.waitEvent("deactivate probe.Probe/k shutdown")
	})
}

// TestKeepAliveType: activations of a keep-alive type are never collected
// for idleness, however long the silo runs; they still end when they ask
// to, and when the silo stops, with reason shutdown. Other types are
// collected as ever beside them.
func TestKeepAliveType(t *testing.T) {
	t.Parallel()
	h, clk := newDelayHarness(t, harnessOpt{register: map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithKeepAlive()},
	}})
	r1, err := h.probe("kept").Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	other := probe.NewReentrantProbeRef(h.s, "other")
	if _, err := other.Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	if got := clk.collectedAt(probe.ReentrantProbeGrainType, "other", time.Hour); got != time.Minute {
		t.Fatalf("the other type's grain collected at %v, want 1m0s", got)
	}
	for clk.since() < 10*time.Hour {
		clk.h.clock.Advance(time.Hour - clk.since()%time.Hour) // a jump of many intervals: one look
		h.waitCollected(clk.t0.Add(clk.since()))
		if collected(h, probe.ProbeGrainType, "kept") {
			t.Fatalf("keep-alive grain collected after %v", clk.since())
		}
	}
	clk.stepTo(clk.since() + 30*time.Minute) // and many single intervals
	if collected(h, probe.ProbeGrainType, "kept") {
		t.Fatalf("keep-alive grain collected after %v", clk.since())
	}
	r2, err := h.probe("kept").Call(testCtx(t), &probe.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Activation != r1.Activation {
		t.Fatalf("activation %d after %v, want the first, %d", r2.Activation, clk.since(), r1.Activation)
	}

	// DeactivateOnIdle still ends one.
	if _, err := h.probe("leaving").Call(testCtx(t), &probe.Request{Tag: "leave"}); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("deactivate probe.Probe/leaving requested")

	if err := h.s.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.waitEvent("deactivate probe.Probe/kept shutdown")
}

// lifetimeGrain records when each activation's OnDeactivate starts.
type lifetimeGrain struct {
	probe.UnimplementedProbeGrain
	rec *lifetimes
}

type lifetimes struct {
	mu   sync.Mutex
	ends map[string]time.Time
	why  map[string]grain.DeactivationReason
	c    chan string
}

func (g *lifetimeGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	return &probe.Reply{}, nil
}

func (g *lifetimeGrain) OnDeactivate(ctx grain.Context, reason grain.DeactivationReason) error {
	now := time.Now()
	g.rec.mu.Lock()
	g.rec.ends[ctx.ID().Key], g.rec.why[ctx.ID().Key] = now, reason
	g.rec.mu.Unlock()
	g.rec.c <- ctx.ID().Key
	return nil
}

// TestCollectionBoundRealClock: on the real clock, with age 300 ms and
// interval 200 ms, grains whose last calls end at different points of the
// collector's cycle each live idle for their age and at most age plus
// interval plus 100 ms of scheduling slack. A grain's idleness is
// measured from its call's start for the lower bound (it cannot be idle
// earlier) and from the call's return for the upper one (it is idle by
// then), so a slow machine cannot make a correct collector fail.
func TestCollectionBoundRealClock(t *testing.T) {
	t.Parallel()
	const (
		age      = 300 * time.Millisecond
		interval = 200 * time.Millisecond
		slack    = 100 * time.Millisecond
		grains   = 8
		stagger  = 27 * time.Millisecond // spreads the calls over the cycle
	)
	cfg := DefaultConfig()
	cfg.CollectionAge, cfg.CollectionInterval = age, interval
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &lifetimes{ends: map[string]time.Time{}, why: map[string]grain.DeactivationReason{}, c: make(chan string, grains)}
	if err := probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return &lifetimeGrain{rec: rec} }); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Stop(testCtx(t)); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	starts, returns := map[string]time.Time{}, map[string]time.Time{}
	for i := range grains {
		key := fmt.Sprintf("g%d", i)
		if i > 0 {
			time.Sleep(stagger)
		}
		starts[key] = time.Now()
		if _, err := probe.NewProbeRef(s, key).Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
		returns[key] = time.Now()
	}
	for range grains {
		testwait.Recv(t, rec.c, defaultTestTimeout, "an idle grain's OnDeactivate")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var lives []time.Duration
	for i := range grains {
		key := fmt.Sprintf("g%d", i)
		end := rec.ends[key]
		lo, hi := end.Sub(starts[key]), end.Sub(returns[key])
		lives = append(lives, hi.Round(time.Millisecond))
		if rec.why[key] != grain.DeactivateIdle {
			t.Errorf("%s deactivated for %s, want idle", key, rec.why[key])
		}
		if lo < age {
			t.Errorf("%s collected %v after its call started, before its age %v", key, lo, age)
		}
		if hi > age+interval+slack {
			t.Errorf("%s collected %v after its call returned, past age+interval+slack %v", key, hi, age+interval+slack)
		}
	}
	t.Logf("idle lifetimes from each call's return (bound [%v, %v]): %v", age, age+interval+slack, lives)
}
