package silo

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
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
	before   func(s *Silo) // after the probe types are registered, before Start
}

func newHarness(t *testing.T, o harnessOpt) *harness {
	t.Helper()
	h := &harness{t: t, scripts: map[string]behaviour{}, eventc: make(chan string, 1024)}
	t.Cleanup(func() { // last: the events include the deactivations of Stop
		if t.Failed() {
			t.Logf("events: %q", h.eventLog())
		}
	})
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
	if o.before != nil {
		o.before(s)
	}
	must(s.Start(context.Background()))
	if o.fake { // the collector is waiting on the fake clock
		testwait.Recv(t, h.collected, defaultTestTimeout, "the collector to start")
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

// waitEvent waits for the event want, failing after defaultTestTimeout
// (a failed test logs the events so far: see newHarness).
func (h *harness) waitEvent(want string) {
	h.t.Helper()
	testwait.Until(h.t, h.eventc, defaultTestTimeout, fmt.Sprintf("event %q", want), func(e string) bool { return e == want })
}

// advanceUntil moves the fake clock on by step at a time, giving each
// step 20 ms to bring an event, until the event want happens: for timers
// re-armed by a turn, whose arming the test cannot see.
func (h *harness) advanceUntil(step time.Duration, want string) {
	h.t.Helper()
	what := fmt.Sprintf("event %q as the clock moves on by %v at a time", want, step)
	testwait.For(h.t, defaultTestTimeout, what, func() bool {
		h.clock.Advance(step)
		select {
		case e := <-h.eventc:
			return e == want
		case <-time.After(20 * time.Millisecond):
			return false
		}
	})
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
func testCtx(t *testing.T) context.Context { return testwait.Context(t, defaultTestTimeout) }

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

// actOf returns the (non-worker) activation of typ/key in the harness
// silo's catalog, or nil.
func actOf(h *harness, typ, key string) *local.Activation { return localActivation(h.s, typ, key) }

// waitNoGoroutineIn waits until no goroutine's stack mentions fn: for
// clock callbacks started with `go`, whose end nothing announces.
func waitNoGoroutineIn(t *testing.T, fn string) {
	t.Helper()
	testwait.For(t, defaultTestTimeout, "no goroutine in "+fn, func() bool {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		return !strings.Contains(string(buf[:n]), fn)
	})
}

// inChild reports whether this process is the subprocess runInChild
// started.
func inChild() bool { return os.Getenv("GRANARY_TEST_CHILD") == "1" }

// runInChild re-runs test name in a subprocess (GRANARY_TEST_CHILD=1), for
// reproductions that crash or hang the process, and fails with its output
// if the subprocess fails or runs past d.
func runInChild(t *testing.T, name string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GRANARY_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		s := string(out)
		if i := strings.Index(s, "panic:"); i > 0 {
			s = s[i:]
		}
		t.Fatalf("child failed (%v):\n%.2500s", err, s)
	}
}
