package silo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/placement"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestClusterCallsReachOneActivation: every grain called from every silo
// of a cluster answers from one activation, and the grains spread over
// the silos.
func TestClusterCallsReachOneActivation(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{})
	homes := map[string]string{}
	perSilo := map[string]int{}
	for _, k := range keys("g", 60) {
		for _, via := range tc.live() {
			r, err := tc.call(via, k, nil)
			if err != nil {
				t.Fatalf("calling %s from %s: %v", k, via.cfg.Name, err)
			}
			if h, ok := homes[k]; ok && h != where(r) {
				t.Fatalf("%s answered from %s and from %s", k, h, where(r))
			}
			if _, ok := homes[k]; !ok {
				perSilo[r.Text]++
			}
			homes[k] = where(r)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		if perSilo[name] < 5 {
			t.Errorf("silo %s got %d of 60 grains (%v); random placement should spread them", name, perSilo[name], perSilo)
		}
	}
}

// TestClusterSingleActivation is Orleans' duplicate-activation test: 100
// concurrent callers over 10 grains on 3 silos, and each grain answers
// with exactly one activation.
func TestClusterSingleActivation(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{})
	silos := tc.live()
	var (
		mu    sync.Mutex
		seen  = map[string]map[string]bool{}
		errs  []error
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			k := fmt.Sprintf("dup%d", i%10)
			r, err := tc.call(silos[i%len(silos)], k, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if seen[k] == nil {
				seen[k] = map[string]bool{}
			}
			seen[k][where(r)] = true
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed:%s", len(errs), joinErrs(errs))
	}
	for k, acts := range seen {
		if len(acts) != 1 {
			t.Errorf("%s answered from %d activations: %v", k, len(acts), acts)
		}
	}
	if len(seen) != 10 {
		t.Fatalf("answers for %d grains, want 10", len(seen))
	}
}

// TestClusterChainAndHeadersCrossSilos: a grain calls grains on other
// silos through its own Caller; headers travel with the calls.
func TestClusterChainAndHeadersCrossSilos(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{})
	ctx := grain.WithHeader(context.Background(), "trace", "t-7")
	r, err := probe.NewProbeRef(tc.silo("a"), "p0").Call(ctx, &probe.Request{Path: []string{"p1", "p2", "p3"}})
	if err != nil {
		t.Fatal(err)
	}
	hops := 0
	for _, tr := range r.Trace {
		if tr == "header=t-7" {
			hops++
		}
	}
	if hops != 4 {
		t.Fatalf("trace %q: want the header at all 4 grains", r.Trace)
	}
}

// TestClusterDeadlockAcrossSilos: A calls B calls A, with A and B on
// different silos: the call back to A fails at once as a deadlock
// instead of waiting for its timeout.
func TestClusterDeadlockAcrossSilos(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{})
	// Find two grains on different silos.
	home := map[string]string{}
	var x, y string
	for _, k := range keys("d", 40) {
		r, err := tc.call(tc.silo("a"), k, nil)
		if err != nil {
			t.Fatal(err)
		}
		home[k] = r.Text
	}
	for k, h := range home {
		for k2, h2 := range home {
			if h != h2 && x == "" {
				x, y = k, k2
			}
		}
	}
	if x == "" {
		t.Fatalf("every grain landed on one silo: %v", home)
	}
	_, err := tc.call(tc.silo("a"), x, &probe.Request{Path: []string{y, x}})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("A→B→A across silos = %v, want Aborted (deadlock)", err)
	}
}

// TestClusterUnknownTypes: a type no silo hosts is NotFound; a type only
// another silo hosts is reached through it.
func TestClusterUnknownTypes(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	_, err := probe.NewIntProbeRef(tc.silo("a"), 7).Call(ctx, &probe.Request{})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("calling a type no silo hosts = %v, want NotFound", err)
	}
}

// TestClusterStatelessWorkersStayLocal: a stateless worker runs on the
// silo that calls it.
func TestClusterStatelessWorkersStayLocal(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{})
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	for _, s := range tc.live() {
		r, err := probe.NewWorkerProbeRef(s, "w").Call(ctx, &probe.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Text != s.cfg.Name {
			t.Fatalf("a stateless worker called from %s ran on %s", s.cfg.Name, r.Text)
		}
	}
}

// TestClusterOneWay: one-way calls across silos arrive.
func TestClusterOneWay(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{})
	ctx := context.Background()
	for _, k := range keys("t", 20) {
		if _, err := probe.NewProbeRef(tc.silo("a"), k).Tell(ctx, &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, defaultTestTimeout, "20 one-way calls", func() bool {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		n := 0
		for _, v := range tc.told {
			n += v
		}
		return n == 20
	})
}

// TestClusterKilledSiloGrainsComeBack: a silo dies without a word; once
// the others declare it dead, its grains answer again from the
// survivors.
func TestClusterKilledSiloGrainsComeBack(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{})
	var onC []string
	for _, k := range keys("k", 60) {
		r, err := tc.call(tc.silo("a"), k, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Text == "c" {
			onC = append(onC, k)
		}
	}
	if len(onC) == 0 {
		t.Fatal("no grain landed on c")
	}
	tc.kill("c")
	tc.waitConverged()
	for _, k := range onC {
		r, err := tc.call(tc.silo("a"), k, nil)
		if err != nil {
			t.Fatalf("calling %s, which lived on the dead silo: %v", k, err)
		}
		if r.Text == "c" {
			t.Fatalf("%s answered from the dead silo", k)
		}
	}
}

// TestClusterGracefulStopHandsGrainsOver: while one silo stops, callers
// see no errors; its grains ran OnDeactivate and answer from the others.
func TestClusterGracefulStopHandsGrainsOver(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{})
	var onC []string
	for _, k := range keys("s", 60) {
		r, err := tc.call(tc.silo("a"), k, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Text == "c" {
			onC = append(onC, k)
		}
	}
	if len(onC) == 0 {
		t.Fatal("no grain landed on c")
	}
	stopped := make(chan struct{})
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, via := range []*Silo{tc.silo("a"), tc.silo("b")} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				for _, k := range onC {
					if _, err := tc.call(via, k, nil); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
				select {
				case <-stopped:
					return
				default:
				}
			}
		}()
	}
	tc.stop("c")
	close(stopped)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed while a silo stopped:%s", len(errs), joinErrs(errs))
	}
	tc.mu.Lock()
	for _, k := range onC {
		if tc.deactivated[k] == 0 {
			t.Errorf("%s lived on the stopped silo but never ran OnDeactivate", k)
		}
	}
	tc.mu.Unlock()
	for _, k := range onC {
		r, err := tc.call(tc.silo("a"), k, nil)
		if err != nil || r.Text == "c" {
			t.Fatalf("%s after the stop: %v from %q", k, err, r.GetText())
		}
	}
}

// TestClusterPartitionHeals: a silo cut off from the others keeps serving
// on its own side while the others re-activate its grains (a split
// brain); once the partition heals, every grain is back to one
// activation, whichever silo asks.
func TestClusterPartitionHeals(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{})
	a, b, c := tc.silo("a"), tc.silo("b"), tc.silo("c")
	ks := keys("p", 30)
	for _, k := range ks {
		if _, err := tc.call(a, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	tc.hub.Partition([]string{c.Member()}, []string{a.Member(), b.Member()})
	tc.net.Partition([]string{addrOf("c")}, []string{addrOf("a"), addrOf("b")})
	testwait.For(t, defaultTestTimeout, "both sides to see the partition", func() bool {
		return ringLen(a) == 2 && ringLen(b) == 2 && ringLen(c) == 1
	})
	for _, via := range []*Silo{a, c} {
		for _, k := range ks {
			if _, err := tc.call(via, k, nil); err != nil {
				t.Fatalf("calling %s from %s during the partition: %v", k, via.cfg.Name, err)
			}
		}
	}
	tc.hub.Heal()
	tc.net.Heal()
	tc.waitConverged()
	var last map[string]map[string]bool
	var lastErr error
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last round: %v (error %v)", last, lastErr)
		}
	})
	testwait.For(t, defaultTestTimeout, "every grain to answer from one activation", func() bool {
		last = map[string]map[string]bool{}
		for _, k := range ks {
			last[k] = map[string]bool{}
			for _, via := range []*Silo{a, b, c} {
				r, err := tc.call(via, k, nil)
				if err != nil {
					lastErr = err
					return false
				}
				last[k][via.cfg.Name+"->"+where(r)] = true
			}
			if len(activations(last[k])) != 1 {
				return false
			}
		}
		return true
	})
}

// activations strips the caller from "via->silo#act" answers.
func activations(answers map[string]bool) map[string]bool {
	out := map[string]bool{}
	for a := range answers {
		out[a[strings.Index(a, "->")+2:]] = true
	}
	return out
}

// TestClusterOverGRPC: three silos in one process gossiping through
// memberlist and calling over gRPC on loopback: 100 concurrent callers
// over 10 grains, and each grain answers from one activation.
func TestClusterOverGRPC(t *testing.T) {
	t.Parallel()
	reg := func(s *Silo) {
		name := s.cfg.Name
		if err := probe.RegisterProbeGrain(s, func(id grain.ID) probe.ProbeGrain {
			return &clusterProbe{silo: name, id: id, tc: &testCluster{told: map[string]int{}, deactivated: map[string]int{}}}
		}); err != nil {
			t.Fatal(err)
		}
	}
	a := grpcSilo(t, "a", nil, reg)
	b := grpcSilo(t, "b", []string{gossipAddr(a)}, reg)
	c := grpcSilo(t, "c", []string{gossipAddr(a)}, reg)
	silos := []*Silo{a, b, c}
	testwait.For(t, defaultTestTimeout, "three active silos on every ring", func() bool {
		for _, s := range silos {
			if ringLen(s) != 3 {
				return false
			}
		}
		return true
	})
	var (
		mu   sync.Mutex
		seen = map[string]map[string]bool{}
		errs []error
		wg   sync.WaitGroup
	)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("g%d", i%10)
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			r, err := probe.NewProbeRef(silos[i%3], k).Call(ctx, &probe.Request{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if seen[k] == nil {
				seen[k] = map[string]bool{}
			}
			seen[k][where(r)] = true
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed:%s", len(errs), joinErrs(errs))
	}
	for k, acts := range seen {
		if len(acts) != 1 {
			t.Errorf("%s answered from %d activations: %v", k, len(acts), acts)
		}
	}
}

// TestClusterUnknownMemberKeepsItsEntry: a silo that has not yet heard
// of a new member does not take that member for gone: a call it routes to
// an activation there neither unregisters that activation's entry nor
// makes a second activation of the grain.
//
// Silo d joins; a knows it, s does not yet (s's membership events are
// held). d activates grain k and registers it at its owner, a. A call to
// k from s finds {d, act} at a, and s's transport has no peer d.
func TestClusterUnknownMemberKeepsItsEntry(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "s"}, clusterOpt{})
	a, s := tc.silo("a"), tc.silo("s")
	tc.hub.Hold(s.Member()) // s has not heard of d yet
	t.Cleanup(func() { tc.hub.Release(s.Member()) })
	d := tc.startNoWait("d", func(cfg *Config) { cfg.Cluster.Placement.Default = placement.PreferLocal })
	testwait.For(t, defaultTestTimeout, "a and d to see all three silos", func() bool {
		return ringLen(a) == 3 && ringLen(d) == 3
	})
	if ringLen(s) != 2 {
		t.Fatal("s sees d although its events are held")
	}
	// A grain whose directory owner is a in every silo's view.
	key := keyWhere(t, "u", "owned by a in every view", func(id grain.ID) bool {
		return ownerOf(a, id) == a.Member() && ownerOf(s, id) == a.Member() && ownerOf(d, id) == a.Member()
	})
	rd, err := tc.call(d, key, nil)
	if err != nil || rd.Text != "d" {
		t.Fatalf("calling %s on d (prefer-local) = %v, %v; want it activated on d", key, rd, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rs, err := probe.NewProbeRef(s, key).Call(ctx, &probe.Request{})
	t.Logf("the call from s: %v, %v", rs, err)
	if err == nil && where(rs) != where(rd) {
		t.Errorf("%s answered d's caller from %s and s's caller from %s: two activations", key, where(rd), where(rs))
	}
	if hs := holders([]*Silo{a, s, d}, key); len(hs) > 1 {
		t.Errorf("%s is activated on %v at once: s took d, which it had not heard of, for gone", key, hs)
	}
}

// TestClusterStoppingSiloPlacesElsewhere: a silo that is stopping, during
// its ShutdownGossipDelay, places nothing on itself, since it activates
// nothing more: a call from one of its grains to a new stateless worker
// is placed on another silo and answered at once, rather than going round
// resolve, place and route on the stopping silo (a busy loop of lookups
// when another silo owns the key's entry, unbounded recursion when the
// stopping silo owns it).
func TestClusterStoppingSiloPlacesElsewhere(t *testing.T) {
	t.Parallel()
	workerCall := func(ctx grain.Context, m *grain.MethodDesc, req proto.Message, next grain.Invocation) (proto.Message, error) {
		if r, ok := req.(*probe.Request); ok && strings.HasPrefix(r.Tag, "worker:") {
			return probe.NewWorkerProbeRef(ctx.Caller(), strings.TrimPrefix(r.Tag, "worker:")).Call(ctx, &probe.Request{})
		}
		return next(ctx, req)
	}
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{tweak: func(cfg *Config) {
		cfg.IncomingFilters = append(cfg.IncomingFilters, workerCall)
		if cfg.Name == "a" {
			cfg.Cluster.ShutdownGossipDelay = 3 * time.Second
		}
	}})
	a, b := tc.silo("a"), tc.silo("b")
	// x: activated on a, its entry owned by b (so b's lookup finds it
	// while a stops).
	x := tc.keyOnOwnedBy(a, "x", b)
	// w: a stateless worker key whose directory owner is b (the lookups
	// then go to b, and a loop would be asynchronous, not a recursion).
	w := ""
	for _, k := range keys("w", 200) {
		if ownerOf(a, grain.ID{Type: probe.WorkerProbeGrainType, Key: k}) == b.Member() {
			w = k
			break
		}
	}
	if w == "" {
		t.Fatal("no stateless worker key owned by b")
	}

	tc.remove("a")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		stopped <- a.Stop(ctx)
	}()
	testwait.For(t, defaultTestTimeout, "a to begin stopping", func() bool { return a.Info().Status == StatusShuttingDown })

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	r, err := probe.NewProbeRef(b, x).Call(ctx, &probe.Request{Tag: "worker:" + w})
	took := time.Since(start)
	if err != nil {
		t.Errorf("a grain on stopping silo a calling a new stateless worker: %v after %v; want it placed on b at once", err, took.Round(time.Millisecond))
	} else {
		t.Logf("answered by %s after %v", where(r), took)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop a: %v", err)
	}
}

// TestClusterShutdownGossipDelayKeepsOneActivation: while a stopping silo
// waits out a ShutdownGossipDelay longer than the other silos'
// RecoveryWindow, a grain that lives on it, with its entry in its
// partition, is not activated a second time elsewhere: a call from
// another silo, which took the stopping silo off its ring and owns the
// grain's entry now, reaches the live activation, or an activation made
// once the stopping silo handed its grains over.
func TestClusterShutdownGossipDelayKeepsOneActivation(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{tweak: func(cfg *Config) {
		if cfg.Name == "a" {
			cfg.Cluster.ShutdownGossipDelay = 2 * time.Second
		}
	}})
	a, b := tc.silo("a"), tc.silo("b")
	g := tc.keyOnOwnedBy(a, "g", a)
	tc.remove("a")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		stopped <- a.Stop(ctx)
	}()
	testwait.For(t, defaultTestTimeout, "b to take a off its ring", func() bool { return !onRing(b, a.Member()) })

	r, err := tc.call(b, g, nil)
	if err != nil {
		t.Fatalf("calling %s from b while a stops: %v", g, err)
	}
	if r.Text != "a" {
		if act := localActivation(a, probe.ProbeGrainType, g); act != nil {
			act.Mu.Lock()
			st := act.Lifecycle()
			act.Mu.Unlock()
			if st == lifecycle.Active {
				t.Errorf("%s answered from %s while its activation on a (%d) is still valid: two activations", g, where(r), act.ActID)
			}
		}
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop a: %v", err)
	}
}

// refusingSender fails every directory request, as an unreachable silo.
type refusingSender struct{}

func (refusingSender) Send(to string, req *directory.Request, done func(*directory.Response, error)) {
	done(nil, status.Error(codes.Unavailable, "unreachable"))
}

// TestDirectoryRecoverySurvivesSecondViewChange: a grain whose entry a
// view change moved to this silo's partition is recovering for the whole
// RecoveryWindow: lookups answer "retry" (Unavailable) while the silos
// holding its activation register it again, even when a second, unrelated
// change (here a join) comes within the window, in whose previous view
// this silo already owned the grain.
func TestDirectoryRecoverySurvivesSecondViewChange(t *testing.T) {
	t.Parallel()
	clk := clockwork.NewFakeClock()
	cfg := directory.DefaultConfig()
	cfg.Clock = clk
	d, err := directory.New(cfg, "s", refusingSender{})
	if err != nil {
		t.Fatal(err)
	}
	r0 := directory.NewRing([]string{"c", "s", "x"}, cfg.VirtualNodes)
	r1 := directory.NewRing([]string{"s", "x"}, cfg.VirtualNodes)
	r2 := directory.NewRing([]string{"d", "s", "x"}, cfg.VirtualNodes)
	var g grain.ID
	for _, k := range keys("g", 1000) {
		id := probeGrainID(k)
		if r0.OwnerOf(id) == "c" && r1.OwnerOf(id) == "s" && r2.OwnerOf(id) == "s" {
			g = id
			break
		}
	}
	if g.IsZero() {
		t.Fatal("no grain that moves from c to s and stays with s when d joins")
	}
	lookup := func() error {
		var got error
		d.Lookup(g, func(_ directory.Entry, found bool, err error) {
			got = err
			if err == nil && found {
				got = status.Error(codes.AlreadyExists, "found")
			}
		})
		return got
	}
	d.SetMembers([]string{"c", "s", "x"}, nil)
	d.SetMembers([]string{"s", "x"}, nil) // c died: g moved here
	if err := lookup(); status.Code(err) != codes.Unavailable {
		t.Fatalf("lookup of %v just after it moved here = %v, want Unavailable (recovering)", g, err)
	}
	clk.Advance(100 * time.Millisecond)
	d.SetMembers([]string{"d", "s", "x"}, nil) // d joined: g stays here
	if err := lookup(); status.Code(err) != codes.Unavailable {
		t.Errorf("lookup of %v 100 ms after it moved here (RecoveryWindow %v), after an unrelated join = %v; want Unavailable (recovering), or the caller activates it a second time",
			g, cfg.RecoveryWindow, err)
	}
}

// TestClusterFalselyDeadSiloKeepsOneActivation: when the other silos
// declare a live silo failed and then see it come back (a suspicion it
// refuted too late: a long GC or VM pause), its activations, whose
// entries the others purged, are not left running beside a second
// activation: a call from elsewhere reaches the one activation, and one
// catalog holds it.
//
// b holds grain x, registered at a. a and c get EventFailed(b), then
// EventJoined(b); b itself gets no event.
func TestClusterFalselyDeadSiloKeepsOneActivation(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{tweak: func(cfg *Config) {
		cfg.Cluster.Placement.Default = placement.PreferLocal
	}})
	a, b, c := tc.silo("a"), tc.silo("b"), tc.silo("c")
	without := directory.NewRing([]string{a.Member(), c.Member()}, a.cfg.Cluster.Directory.VirtualNodes)
	x := keyWhere(t, "x", "owned by a with and without b", func(id grain.ID) bool {
		return ownerOf(a, id) == a.Member() && without.OwnerOf(id) == a.Member()
	})
	rb, err := tc.call(b, x, nil)
	if err != nil || rb.Text != "b" {
		t.Fatalf("calling %s on b (prefer-local) = %v, %v; want it activated on b", x, rb, err)
	}
	bm := b.cl.Mship.Local()
	for _, s := range []*Silo{a, c} {
		s.cl.OnEvent(membership.Event{Kind: membership.EventFailed, Member: bm})
	}
	for _, s := range []*Silo{a, c} {
		s.cl.OnEvent(membership.Event{Kind: membership.EventJoined, Member: bm})
	}
	tc.waitConverged()

	rc, err := tc.call(c, x, nil)
	if err != nil {
		t.Fatalf("calling %s from c after b came back: %v", x, err)
	}
	if where(rc) != where(rb) {
		t.Errorf("%s answered from %s before and from %s now", x, where(rb), where(rc))
	}
	if hs := holders([]*Silo{a, b, c}, x); len(hs) > 1 {
		t.Errorf("%s is activated on %v at once: b's activation lost its entry when b was declared dead", x, hs)
	}
}
