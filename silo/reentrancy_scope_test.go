package silo

import (
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Call-chain reentrancy scopes (grain.AllowCallChainReentrancy,
// grain.SuppressCallChainReentrancy) and the MayInterleave predicate
// (grain.WithMayInterleave), through a silo and across two.

// A scope plan says which hop of a chain calls with which scope, one
// character a hop: '.' none, 'A' allow, 'S' suppress. It travels in the
// request's Text, which is as long as the path the first grain was given,
// so a grain finds its hop from how much of the path is left.

// scopeOpts returns the call options of the hop at which req arrived.
func scopeOpts(req *probe.Request) []grain.CallOption {
	hop := len(req.Text) - len(req.Path)
	if hop < 0 || hop >= len(req.Text) {
		return nil
	}
	switch req.Text[hop] {
	case 'A':
		return []grain.CallOption{grain.AllowCallChainReentrancy()}
	case 'S':
		return []grain.CallOption{grain.SuppressCallChainReentrancy()}
	}
	return nil
}

// forwardScoped is probeGrain.forward with the hop's scope.
func forwardScoped(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
	id, err := grain.ParseID(req.Path[0])
	if err != nil {
		return nil, err
	}
	next := &probe.Request{Tag: req.Tag, Path: req.Path[1:], Text: req.Text}
	var reply proto.Message
	g.pause(func() {
		reply, err = ctx.Caller().Invoke(ctx, id, &probe.Probe_ServiceDesc.Methods[0], next, scopeOpts(req)...)
	})
	if err != nil {
		return nil, err
	}
	r := reply.(*probe.Reply)
	r.Trace = append(r.Trace, ctx.ID().String())
	return r, nil
}

// TestCallChainScopes: the scope of the call a request made decides
// whether its chain may come back into its activation; the type's
// call-chain reentrancy only when the call set none. A scope concerns the
// grain that set it, and covers the calls of requests it let back in.
func TestCallChainScopes(t *testing.T) {
	t.Parallel()
	p := probeID
	cases := []struct {
		name           string
		chainReentrant bool
		path           []string // called by a, in order
		plan           string   // one scope a hop: see scopeOpts
		chain          string   // "": the call succeeds; else the deadlock it fails with
	}{
		{"no scope: A→B→A deadlocks", false, []string{p("b"), p("a")}, "..", "probe.Probe/a → probe.Probe/b → probe.Probe/a"},
		{"allow: A→B→A", false, []string{p("b"), p("a")}, "A.", ""},
		{"allow: A→A", false, []string{p("a")}, "A", ""},
		{"allow: A→B→C→A", false, []string{p("b"), p("c"), p("a")}, "A..", ""},
		{"allow on B does not concern A", false, []string{p("b"), p("a")}, ".A", "probe.Probe/a → probe.Probe/b → probe.Probe/a"},
		{"allow covers the calls of the request it let in: A→B→A→C→A", false,
			[]string{p("b"), p("a"), p("c"), p("a")}, "A...", ""},
		{"a request let in suppresses for its own call: A→B→A→C→A", false,
			[]string{p("b"), p("a"), p("c"), p("a")}, "A.S.", "probe.Probe/a → probe.Probe/b → probe.Probe/a → probe.Probe/c → probe.Probe/a"},
		{"chain-reentrant type, no scope: A→B→A", true, []string{p("b"), p("a")}, "..", ""},
		{"suppress on a chain-reentrant type: A→B→A deadlocks", true, []string{p("b"), p("a")}, "S.", "probe.Probe/a → probe.Probe/b → probe.Probe/a"},
		{"suppress on a chain-reentrant type: A→A deadlocks", true, []string{p("a")}, "S", "probe.Probe/a → probe.Probe/a"},
		{"suppress on B does not concern A", true, []string{p("b"), p("a")}, ".S", ""},
		{"a request let in suppresses on a chain-reentrant type: A→B→A→C→A", true,
			[]string{p("b"), p("a"), p("c"), p("a")}, "..S.", "probe.Probe/a → probe.Probe/b → probe.Probe/a → probe.Probe/c → probe.Probe/a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var reg []grain.RegisterOption
			if tc.chainReentrant {
				reg = append(reg, grain.WithCallChainReentrancy())
			}
			h := newHarness(t, harnessOpt{register: map[string][]grain.RegisterOption{probe.ProbeGrainType: reg}})
			h.script("scoped", forwardScopedUnlessLast)
			r, err := h.probe("a").Call(testCtx(t), &probe.Request{Tag: "scoped", Path: tc.path, Text: tc.plan})
			switch {
			case tc.chain == "" && err != nil:
				t.Fatalf("got %v, want success", err)
			case tc.chain == "" && len(r.Trace) != len(tc.path):
				t.Fatalf("trace %q, want %d hops", r.Trace, len(tc.path))
			case tc.chain != "" && (grain.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "call chain "+tc.chain+":")):
				t.Fatalf("got %v, want Aborted naming %q", err, tc.chain)
			}
			// Nothing was left held, and no scope stayed behind.
			if _, err := h.probe("a").Call(testCtx(t), &probe.Request{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// forwardScopedUnlessLast forwards along the path with the plan's scopes,
// and answers when the path is done.
func forwardScopedUnlessLast(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
	if len(req.Path) == 0 {
		return &probe.Reply{}, nil
	}
	return forwardScoped(ctx, g, req)
}

// TestCallChainScopeEndsWithItsCall: a scope belongs to one call: once
// the allowed call returned, the same request's next call, made without
// one, does not let its chain back in.
func TestCallChainScopeEndsWithItsCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{})
	h.script("twice", func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
		if len(req.Path) == 0 || req.Path[0] != "start" {
			return forwardScopedUnlessLast(ctx, g, req)
		}
		// First A→B→A with a scope, then the same chain without.
		if _, err := forwardScoped(ctx, g, &probe.Request{Tag: "twice", Path: []string{probeID("b"), probeID("a")}, Text: "A."}); err != nil {
			return nil, err
		}
		return forwardScoped(ctx, g, &probe.Request{Tag: "twice", Path: []string{probeID("b"), probeID("a")}, Text: ".."})
	})
	_, err := h.probe("a").Call(testCtx(t), &probe.Request{Tag: "twice", Path: []string{"start"}})
	if want := "call chain probe.Probe/a → probe.Probe/b → probe.Probe/a:"; grain.Code(err) != codes.Aborted || !strings.Contains(err.Error(), want) {
		t.Fatalf("the unscoped second call: got %v, want Aborted naming %q", err, want)
	}
}

// scopeProbe is the grain of the cross-silo scope tests: the
// ReentrantProbe type registered without reentrancy. Call forwards along
// its path with the plan's scopes and traces "silo:key" at each hop; a
// request tagged "hold" waits for the test's gate, at an await.
type scopeProbe struct {
	probe.UnimplementedReentrantProbeGrain
	silo string
	id   grain.ID
	hold *gate
	log  *scopeEvents
}

// scopeEvents records what scopeProbes ran, in order, across silos.
type scopeEvents struct {
	mu   sync.Mutex
	list []string
	c    chan string
}

func (l *scopeEvents) add(e string) {
	l.mu.Lock()
	l.list = append(l.list, e)
	l.mu.Unlock()
	select {
	case l.c <- e:
	default: // only waits read c; the list keeps everything
	}
}

// since returns the events recorded from index i on.
func (l *scopeEvents) since(i int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.list[i:]...)
}

func (l *scopeEvents) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.list)
}

func (g *scopeProbe) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	r := &probe.Reply{Text: g.silo, Trace: []string{g.silo + ":" + g.id.Key}}
	g.log.add(req.Tag + " start")
	defer g.log.add(req.Tag + " end")
	if req.Tag == "hold" {
		ctx.Blocking(func() { <-g.hold.c })
	}
	if len(req.Path) > 0 {
		next, err := probe.NewReentrantProbeRef(ctx.Caller(), req.Path[0]).Call(ctx,
			&probe.Request{Path: req.Path[1:], Text: req.Text, Tag: req.Tag}, scopeOpts(req)...)
		if err != nil {
			return nil, err
		}
		r.Trace = append(r.Trace, next.Trace...)
	}
	return r, nil
}

// scopeCluster starts two silos, a and b, hosting scopeProbe with opts,
// and returns them with the grains' events.
func scopeCluster(t *testing.T, hold *gate, opts ...grain.RegisterOption) (*testCluster, *scopeEvents) {
	events := &scopeEvents{c: make(chan string, 64)}
	opts = append([]grain.RegisterOption{grain.WithReentrant(false)}, opts...)
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{register: func(s *Silo, name string) {
		err := probe.RegisterReentrantProbeGrain(s, func(id grain.ID) probe.ReentrantProbeGrain {
			return &scopeProbe{silo: name, id: id, hold: hold, log: events}
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
	}})
	return tc, events
}

// keysOnEach returns two scopeProbe keys, one activated on silo a and one
// on silo b, activating them through a.
func keysOnEach(t *testing.T, tc *testCluster) (onA, onB string) {
	t.Helper()
	for _, k := range keys("s", 40) {
		r, err := probe.NewReentrantProbeRef(tc.silo("a"), k).Call(testCtx(t), &probe.Request{Tag: "find"})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Text == "a" && onA == "":
			onA = k
		case r.Text == "b" && onB == "":
			onB = k
		}
		if onA != "" && onB != "" {
			return onA, onB
		}
	}
	t.Fatal("no scope probe key lands on each silo")
	return "", ""
}

// TestCallChainScopesAcrossSilos: a scope travels with the chain, through
// another silo and back, on the chain's link of the grain that set it.
func TestCallChainScopesAcrossSilos(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		chainReentrant bool
		path           func(x, y string) []string // x on silo a, y on silo b; the call starts at x
		plan           string
		fail           bool
	}{
		{"no scope: A→B→A deadlocks", false, func(x, y string) []string { return []string{y, x} }, "..", true},
		{"allow: A→B→A", false, func(x, y string) []string { return []string{y, x} }, "A.", false},
		{"allow on B does not concern A", false, func(x, y string) []string { return []string{y, x} }, ".A", true},
		{"allow covers the calls of the request it let in: A→B→A→B→A", false,
			func(x, y string) []string { return []string{y, x, y, x} }, "A...", true}, // B is not reentrant: B→A→B deadlocks at B
		{"allow at each: A→B→A→B→A", false, func(x, y string) []string { return []string{y, x, y, x} }, "AA..", false},
		{"a request let in suppresses for its own call", false,
			func(x, y string) []string { return []string{y, x, y, x} }, "AAS.", true},
		{"chain-reentrant type, no scope: A→B→A", true, func(x, y string) []string { return []string{y, x} }, "..", false},
		{"suppress on a chain-reentrant type: A→B→A deadlocks", true, func(x, y string) []string { return []string{y, x} }, "S.", true},
		{"suppress on B does not concern A", true, func(x, y string) []string { return []string{y, x} }, ".S", false},
	}
	for _, chainReentrant := range []bool{false, true} {
		var opts []grain.RegisterOption
		if chainReentrant {
			opts = append(opts, grain.WithCallChainReentrancy())
		}
		tc, _ := scopeCluster(t, nil, opts...)
		x, y := keysOnEach(t, tc)
		for _, c := range cases {
			if c.chainReentrant != chainReentrant {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				path := c.path(x, y)
				ref := probe.NewReentrantProbeRef(tc.silo("a"), x)
				r, err := ref.Call(testCtx(t), &probe.Request{Path: path, Text: c.plan})
				switch {
				case c.fail && grain.Code(err) != codes.Aborted:
					t.Fatalf("got %v, %v, want Aborted (deadlock)", r, err)
				case !c.fail && err != nil:
					t.Fatalf("got %v, want success", err)
				case !c.fail && len(r.Trace) != len(path)+1:
					t.Fatalf("trace %q, want %d grains", r.Trace, len(path)+1)
				}
				if !c.fail && !strings.Contains(strings.Join(r.Trace, ","), "b:"+y) {
					t.Fatalf("trace %q never reached silo b", r.Trace)
				}
			})
		}
	}
}

// mayInterleaveOnText interleaves requests whose text is "interleave", and
// panics on those whose text is "panic". It checks that it gets the type's
// own method and a decoded request.
func mayInterleaveOnText(t *testing.T, typ string) grain.MayInterleaveFunc {
	return func(m *grain.MethodDesc, req proto.Message) bool {
		r, ok := req.(*probe.Request)
		if !ok {
			t.Errorf("MayInterleave got a %T", req)
			return false
		}
		if m.Name != "Call" || !strings.HasPrefix(m.FullName, "/"+typ+"/") {
			t.Errorf("MayInterleave got method %s (%s)", m.Name, m.FullName)
		}
		switch r.Text {
		case "panic":
			panic("mayInterleaveOnText: told to")
		case "interleave":
			return true
		}
		return false
	}
}

// TestMayInterleave: a request the predicate accepts runs while another
// waits at an await; one it refuses queues; one it panics on queues too,
// is logged, and the silo goes on.
func TestMayInterleave(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.ErrorLevel)
	h := newHarness(t, harnessOpt{
		cfg: func(c *Config) { c.Logger = zap.New(core) },
		register: map[string][]grain.RegisterOption{
			probe.ProbeGrainType: {grain.WithMayInterleave(mayInterleaveOnText(t, probe.ProbeGrainType))},
		},
	})
	hold := h.hold("hold")
	for _, tag := range []string{"yes", "no", "panics"} {
		h.script(tag, func(ctx grain.Context, g *probeGrain, req *probe.Request) (*probe.Reply, error) {
			h.event("%s", tag)
			return &probe.Reply{}, nil
		})
	}
	ref := h.probe("mi")
	first := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"})
	h.waitEvent("hold start")
	// Accepted: it completes while the first request waits.
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "yes", Text: "interleave"}); err != nil {
		t.Fatal(err)
	}
	refused := ref.CallAsync(testCtx(t), &probe.Request{Tag: "no", Text: "plain"})
	panicked := ref.CallAsync(testCtx(t), &probe.Request{Tag: "panics", Text: "panic"})
	// Give the pool every chance to run them: another grain's call goes
	// through, and an accepted request still gets in past them.
	if _, err := h.probe("other").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "yes", Text: "interleave"}); err != nil {
		t.Fatal(err)
	}
	hold.open()
	if err := grain.AwaitAll(testCtx(t), first, refused, panicked); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(h.eventLog(), ",")
	if want := "activate probe.Probe/mi,hold start,yes,activate probe.Probe/other,yes,hold end,no,panics"; got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	entries := logs.FilterMessage("MayInterleave panicked; the request keeps its method's kind").All()
	if len(entries) != 1 {
		t.Fatalf("%d logged panics, want 1: %v", len(entries), logs.All())
	}
	if f := entries[0].ContextMap(); f["method"] != "Call" || f["grain"] != "probe.Probe/mi" || !strings.Contains(f["panic"].(string), "told to") {
		t.Errorf("logged panic fields %v", f)
	}
	// The silo goes on: an idle grain takes a panicking request as well.
	if _, err := h.probe("idle").Call(testCtx(t), &probe.Request{Text: "panic"}); err != nil {
		t.Fatal(err)
	}
}

// TestMayInterleaveAcrossSilos: a request from another silo, which
// arrives encoded, is decoded for the predicate on the receiving silo and
// interleaves there; one the predicate refuses queues.
func TestMayInterleaveAcrossSilos(t *testing.T) {
	t.Parallel()
	hold := &gate{c: make(chan struct{}), once: new(sync.Once)}
	tc, events := scopeCluster(t, hold, grain.WithMayInterleave(mayInterleaveOnText(t, probe.ReentrantProbeGrainType)))
	t.Cleanup(hold.open) // before the cluster stops: cleanups run last-in first-out
	_, onB := keysOnEach(t, tc)
	from := events.len()
	// Called through silo a, onB runs on silo b.
	ref := probe.NewReentrantProbeRef(tc.silo("a"), onB)
	first := ref.CallAsync(testCtx(t), &probe.Request{Tag: "hold"})
	testwait.Until(t, events.c, defaultTestTimeout, `"hold start"`, func(e string) bool { return e == "hold start" })
	if r, err := ref.Call(testCtx(t), &probe.Request{Tag: "yes", Text: "interleave"}); err != nil || r.Text != "b" {
		t.Fatalf("the interleaving call: %v, %v; want it answered on b while the first waits", r, err)
	}
	refused := ref.CallAsync(testCtx(t), &probe.Request{Tag: "no", Text: "plain"})
	// The refused request went first on the same stream: an accepted one
	// after it gets in past it.
	if _, err := ref.Call(testCtx(t), &probe.Request{Tag: "yes", Text: "interleave"}); err != nil {
		t.Fatal(err)
	}
	hold.open()
	if err := grain.AwaitAll(testCtx(t), first, refused); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(events.since(from), ",")
	if want := "hold start,yes start,yes end,yes start,yes end,hold end,no start,no end"; got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
}
