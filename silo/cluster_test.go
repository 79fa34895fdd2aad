package silo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClusterCallsReachOneActivation: every grain called from every silo
// of a cluster answers from one activation, and the grains spread over
// the silos.
func TestClusterCallsReachOneActivation(t *testing.T) {
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{})
	homes := map[string]string{}
	perSilo := map[string]int{}
	for _, k := range keys("g", 60) {
		for _, via := range tc.live() {
			r, err := tc.call(via, k, nil)
			if err != nil {
				t.Fatalf("calling %s from %s: %v", k, via.rt.Cfg.Name, err)
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
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{})
	ctx := context.Background()
	for _, k := range keys("t", 20) {
		if _, err := probe.NewProbeRef(tc.silo("a"), k).Tell(ctx, &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "20 one-way calls", func() bool {
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
	waitFor(t, "both sides to see the partition", func() bool {
		return a.cl.Dir.Ring().Len() == 2 && b.cl.Dir.Ring().Len() == 2 && c.cl.Dir.Ring().Len() == 1
	})
	for _, via := range []*Silo{a, c} {
		for _, k := range ks {
			if _, err := tc.call(via, k, nil); err != nil {
				t.Fatalf("calling %s from %s during the partition: %v", k, via.rt.Cfg.Name, err)
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
	waitFor(t, "every grain to answer from one activation", func() bool {
		last = map[string]map[string]bool{}
		for _, k := range ks {
			last[k] = map[string]bool{}
			for _, via := range []*Silo{a, b, c} {
				r, err := tc.call(via, k, nil)
				if err != nil {
					lastErr = err
					return false
				}
				last[k][via.rt.Cfg.Name+"->"+where(r)] = true
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
	waitFor(t, "three active silos on every ring", func() bool {
		for _, s := range silos {
			if s.cl.Dir.Ring().Len() != 3 {
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
