package silo

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// defaultTestTimeout bounds every wait in these tests: a test that needs
// it has failed.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) {
	// Count call records in tests, not in benchmarks: the count is a
	// cache line every call touches, which would skew them.
	flag.Parse()
	local.TrackCalls = flag.Lookup("test.bench").Value.String() == ""
	goleak.VerifyTestMain(m)
}

// behaviour is what a probe grain does for a request with a given tag.
type behaviour func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error)

// harness is a started silo hosting the probe types, whose grains do
// what the test scripts through tags.
type harness struct {
	t     *testing.T
	s     *Silo
	clock *clockwork.FakeClock // nil when the silo runs on the real clock

	mu      sync.Mutex
	scripts map[string]behaviour
	events  []string
	eventc  chan string

	collected chan time.Time // the collector's ticks, with a fake clock
}

type harnessOpt struct {
	cfg      func(*Config)
	register map[string][]grain.RegisterOption // by type
	fake     bool
}

func newHarness(t *testing.T, o harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, scripts: map[string]behaviour{}, eventc: make(chan string, 1024)}
	cfg := DefaultConfig()
	if o.fake {
		h.clock = clockwork.NewFakeClock()
		cfg.Clock = h.clock
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	if o.fake {
		h.collected = make(chan time.Time, 64)
		s.rt.Collected = func(now time.Time) { h.collected <- now }
	}
	factory := func(id grain.ID) *probeGrain { return &probeGrain{h: h, id: id} }
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(probe.RegisterProbeGrain(s, func(id grain.ID) probe.ProbeGrain { return factory(id) }, o.register[probe.ProbeGrainType]...))
	must(probe.RegisterReentrantProbeGrain(s, func(id grain.ID) probe.ReentrantProbeGrain { return factory(id) }, o.register[probe.ReentrantProbeGrainType]...))
	must(probe.RegisterWorkerProbeGrain(s, func(id grain.ID) probe.WorkerProbeGrain { return factory(id) }, o.register[probe.WorkerProbeGrainType]...))
	must(probe.RegisterIntProbeGrain(s, func(id grain.ID) probe.IntProbeGrain { return factory(id) }))
	must(s.Start(context.Background()))
	if o.fake {
		select {
		case <-h.collected: // the collector is waiting on the fake clock
		case <-time.After(defaultTestTimeout):
			t.Fatal("collector did not start")
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return h
}

// script makes requests tagged tag do fn.
func (h *harness) script(tag string, fn behaviour) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.scripts[tag] = fn
}

// event records that something happened, in order.
func (h *harness) event(format string, args ...any) {
	e := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
	select {
	case h.eventc <- e:
	default:
		h.t.Error("event channel full")
	}
}

// waitEvent waits for the event want, failing after defaultTestTimeout.
func (h *harness) waitEvent(want string) {
	h.t.Helper()
	if !h.waitEventWithin(defaultTestTimeout, want) {
		h.t.Fatalf("timed out waiting for event %q; events so far: %q", want, h.eventLog())
	}
}

// waitEventWithin waits up to d for the event want and reports whether
// it came: a short bound suits tests whose failure is "never happens".
func (h *harness) waitEventWithin(d time.Duration, want string) bool {
	h.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-h.eventc:
			if e == want {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// advanceUntil moves the fake clock on by step at a time until the event
// want happens: for timers re-armed by a turn, whose arming the test
// cannot see.
func (h *harness) advanceUntil(step time.Duration, want string) {
	h.t.Helper()
	deadline := time.After(defaultTestTimeout)
	for {
		h.clock.Advance(step)
		select {
		case e := <-h.eventc:
			if e == want {
				return
			}
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			h.t.Fatalf("timed out advancing the clock until %q; events so far: %q", want, h.eventLog())
		}
	}
}

func (h *harness) eventLog() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...)
}

func (h *harness) probe(key string) probe.ProbeRef { return probe.NewProbeRef(h.s, key) }

// probeGrain runs the scripts. Its own fields are touched by its turns
// only.
type probeGrain struct {
	probe.UnimplementedProbeGrain
	h        *harness
	id       grain.ID
	calls    int
	inMethod int // turns of this activation inside grain code right now
}

func (g *probeGrain) OnActivate(ctx grain.Context) error {
	g.h.event("activate %s", ctx.ID())
	if fn := g.h.lookup("activate:" + ctx.ID().Key); fn != nil {
		_, err := fn(ctx, g, nil)
		return err
	}
	return nil
}

func (g *probeGrain) OnDeactivate(ctx grain.Context, reason grain.DeactivationReason) error {
	g.h.event("deactivate %s %s", ctx.ID(), reason)
	return nil
}

func (h *harness) lookup(tag string) behaviour {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.scripts[tag]
}

func (g *probeGrain) run(ctx grain.Context, method string, req *probe.Request) (*probe.Reply, error) {
	g.inMethod++
	if g.inMethod > 1 {
		g.h.t.Errorf("%s: two turns inside grain code at once", g.id)
	}
	defer func() { g.inMethod-- }()
	g.calls++
	if fn := g.h.lookup(req.GetTag()); fn != nil {
		return fn(ctx, g, req)
	}
	if len(req.GetPath()) > 0 {
		return g.forward(ctx, req)
	}
	return &probe.Reply{Text: method + ":" + req.GetText(), N: int64(g.calls), Activation: ctx.ActivationID()}, nil
}

// forward calls the first grain on req's path, passing the rest on.
func (g *probeGrain) forward(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	id, err := grain.ParseID(req.Path[0])
	if err != nil {
		return nil, err
	}
	next := &probe.Request{Tag: req.Tag, Path: req.Path[1:], Text: req.Text}
	var reply proto.Message
	g.pause(func() { reply, err = ctx.Caller().Invoke(ctx, id, &probe.Probe_ServiceDesc.Methods[0], next) })
	if err != nil {
		return nil, err
	}
	r := reply.(*probe.Reply)
	r.Trace = append(r.Trace, ctx.ID().String())
	return r, nil
}

// pause leaves grain code (so the one-at-a-time check does not count the
// wait) around a wait that releases the processor.
func (g *probeGrain) pause(fn func()) {
	g.inMethod--
	defer func() { g.inMethod++ }()
	fn()
}

func (g *probeGrain) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	return g.run(ctx, "Call", req)
}
func (g *probeGrain) Read(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	return g.run(ctx, "Read", req)
}
func (g *probeGrain) Interleave(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	return g.run(ctx, "Interleave", req)
}
func (g *probeGrain) Slow(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	return g.run(ctx, "Slow", req)
}
func (g *probeGrain) Tell(ctx grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	_, err := g.run(ctx, "Tell", req)
	return &emptypb.Empty{}, err
}

// testCtx returns a context cancelled after defaultTestTimeout of real
// time. It is cancelled rather than given a deadline because a deadline
// is a point in time, and tests on a fake clock move the silo's time far
// from the real one.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(defaultTestTimeout, cancel)
	t.Cleanup(func() { stop.Stop(); cancel() })
	return ctx
}

// gate is a test latch: grain code blocks on it (through Blocking) until
// the test opens it. A failed test's cleanup opens every gate before it
// stops the silo, which would otherwise wait for the blocked turns.
type gate struct {
	c    chan struct{}
	once *sync.Once
}

func (h *harness) gate() gate {
	g := gate{c: make(chan struct{}), once: new(sync.Once)}
	h.t.Cleanup(g.open) // runs before the silo's Stop: cleanups run last-in first-out
	return g
}

// hold scripts requests tagged tag to record "<tag> start", wait on a
// gate the test opens, and record "<tag> end". It returns the gate.
func (h *harness) hold(tag string) gate {
	g := h.gate()
	h.script(tag, func(ctx grain.Context, pg *probeGrain, req *probe.Request) (*probe.Reply, error) {
		h.event("%s start", tag)
		g.wait(ctx, pg)
		h.event("%s end", tag)
		return &probe.Reply{}, nil
	})
	return g
}

func (g gate) open() { g.once.Do(func() { close(g.c) }) }

func (g gate) wait(ctx grain.Context, pg *probeGrain) {
	pg.pause(func() { ctx.Blocking(func() { <-g.c }) })
}
