package silo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/membership"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/emptypb"
)

// testCluster is silos in one process on an in-memory membership hub and
// network, each hosting clusterProbe grains.
type testCluster struct {
	t     *testing.T
	hub   *membership.Hub
	net   *transport.MemNetwork
	tweak func(*Config)
	// register registers more grain types on each silo, called name.
	register func(s *Silo, name string)

	mu    sync.Mutex
	silos map[string]*Silo // by name
	// deactivated counts OnDeactivate calls per grain key.
	deactivated map[string]int
	told        map[string]int // one-way calls per grain key
}

type clusterOpt struct {
	tweak    func(*Config)              // changes each silo's config
	register func(s *Silo, name string) // registers more types on each silo
}

func newTestCluster(t *testing.T, names []string, o clusterOpt) *testCluster {
	t.Helper()
	tc := &testCluster{
		t:           t,
		hub:         membership.NewHub(),
		net:         transport.NewMemNetwork(),
		tweak:       o.tweak,
		register:    o.register,
		silos:       map[string]*Silo{},
		deactivated: map[string]int{},
		told:        map[string]int{},
	}
	t.Cleanup(tc.stopAll)
	for _, n := range names {
		tc.start(n)
	}
	return tc
}

// start starts a silo called name and waits until every silo sees it
// active.
func (tc *testCluster) start(name string) *Silo {
	tc.t.Helper()
	s := tc.startNoWait(name, nil)
	tc.waitConverged()
	return s
}

// startNoWait starts a silo called name, with tweak applied after the
// cluster's own, and does not wait for the cluster to converge (a test may
// be holding some silo's membership events).
func (tc *testCluster) startNoWait(name string, tweak func(*Config)) *Silo {
	tc.t.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	cc := DefaultClusterConfig()
	cc.Membership.ClusterID = "test"
	cc.ShutdownGossipDelay = 0
	cc.LoadReportInterval = 50 * time.Millisecond
	cc.Listener = tc.net.Listener(addrOf(name))
	cc.Network = tc.net.From(addrOf(name))
	cc.NewMembership = func(mc membership.Config, on func(membership.Event)) (membership.Service, error) {
		return tc.hub.Member(mc, on), nil
	}
	cfg.Cluster = &cc
	if testing.Verbose() {
		cfg.Logger, _ = zap.NewDevelopment()
	}
	if tc.tweak != nil {
		tc.tweak(&cfg)
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	factory := func(id grain.ID) *clusterProbe { return &clusterProbe{tc: tc, silo: name, id: id} }
	if err := probe.RegisterProbeGrain(s, func(id grain.ID) probe.ProbeGrain { return factory(id) }); err != nil {
		tc.t.Fatal(err)
	}
	if err := probe.RegisterWorkerProbeGrain(s, func(id grain.ID) probe.WorkerProbeGrain { return factory(id) }); err != nil {
		tc.t.Fatal(err)
	}
	if tc.register != nil {
		tc.register(s, name)
	}
	if err := s.Start(context.Background()); err != nil {
		tc.t.Fatal(err)
	}
	tc.mu.Lock()
	tc.silos[name] = s
	tc.mu.Unlock()
	return s
}

// keyOn returns a key of a probe grain that activates on s when called
// through s.
func (tc *testCluster) keyOn(s *Silo) string {
	tc.t.Helper()
	return tc.keyOnOwnedBy(s, "k", nil)
}

// keyOnOwnedBy returns a key, made from prefix, of a probe grain that
// activates on s when called through s and whose directory entry owner
// (as owner sees its ring) is owner itself; a nil owner accepts any.
func (tc *testCluster) keyOnOwnedBy(s *Silo, prefix string, owner *Silo) string {
	tc.t.Helper()
	for _, k := range keys(prefix, 200) {
		if owner != nil && ownerOf(owner, probeGrainID(k)) != owner.Member() {
			continue
		}
		r, err := tc.call(s, k, nil)
		if err != nil {
			tc.t.Fatal(err)
		}
		if r.Text == s.cfg.Name {
			return k
		}
	}
	at := "any silo"
	if owner != nil {
		at = owner.cfg.Name
	}
	tc.t.Fatalf("no grain activated on %s with its entry at %s", s.cfg.Name, at)
	return ""
}

// addrOf is the in-memory address of the silo called name.
func addrOf(name string) string { return name + ":7947" }

// silo returns the silo called name.
func (tc *testCluster) silo(name string) *Silo {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.silos[name]
}

// live returns the running silos.
func (tc *testCluster) live() []*Silo {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var ss []*Silo
	for _, s := range tc.silos {
		ss = append(ss, s)
	}
	return ss
}

// waitConverged waits until every running silo's directory ring holds
// exactly the running silos.
func (tc *testCluster) waitConverged() {
	tc.t.Helper()
	testwait.For(tc.t, defaultTestTimeout, "the silos to agree on the ring", func() bool {
		ss := tc.live()
		for _, s := range ss {
			if ringLen(s) != len(ss) {
				return false
			}
			for _, o := range ss {
				if !onRing(s, o.Member()) {
					return false
				}
			}
		}
		return true
	})
}

// stop stops the silo called name gracefully.
func (tc *testCluster) stop(name string) {
	tc.t.Helper()
	s := tc.remove(name)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		tc.t.Errorf("Stop %s: %v", name, err)
	}
}

// kill ends the silo called name at once: the others see it fail and its
// streams break, as a process killed would.
func (tc *testCluster) kill(name string) {
	tc.t.Helper()
	s := tc.remove(name)
	tc.net.Down(addrOf(name), true)
	tc.hub.Kill(s.Member())
	s.Close()
}

func (tc *testCluster) remove(name string) *Silo {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	s := tc.silos[name]
	delete(tc.silos, name)
	if s == nil {
		tc.t.Fatalf("no silo %s", name)
	}
	return s
}

func (tc *testCluster) stopAll() {
	for _, s := range tc.live() {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		if err := s.Stop(ctx); err != nil {
			tc.t.Errorf("Stop %s: %v", s.cfg.Name, err)
		}
		cancel()
	}
	tc.net.Wait()
}

// call calls probe key from silo via, with a bounded context.
func (tc *testCluster) call(via *Silo, key string, req *probe.Request) (*probe.Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if req == nil {
		req = &probe.Request{}
	}
	return probe.NewProbeRef(via, key).Call(ctx, req)
}

// clusterProbe answers with where it runs: the silo's name in Text and
// its activation ID. A request with a path calls the next key of the path
// (through the grain's own Caller) and appends that reply's trace.
type clusterProbe struct {
	probe.UnimplementedProbeGrain
	tc   *testCluster
	silo string
	id   grain.ID
	n    int64
}

func (g *clusterProbe) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	g.n++
	r := &probe.Reply{Text: g.silo, Activation: ctx.ActivationID(), N: g.n, Trace: []string{g.silo + ":" + g.id.Key}}
	if v := grain.Header(ctx, "trace"); v != "" {
		r.Trace = append(r.Trace, "header="+v)
	}
	if len(req.Path) > 0 {
		next, err := probe.NewProbeRef(ctx.Caller(), req.Path[0]).Call(ctx, &probe.Request{Path: req.Path[1:], Tag: req.Tag})
		if err != nil {
			return nil, err
		}
		r.Trace = append(r.Trace, next.Trace...)
	}
	if req.Tag == "sleep" {
		if err := ctx.Sleep(time.Duration(req.N)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (g *clusterProbe) Read(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	return g.Call(ctx, req)
}

func (g *clusterProbe) Tell(ctx grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	g.tc.mu.Lock()
	g.tc.told[g.id.Key]++
	g.tc.mu.Unlock()
	return &emptypb.Empty{}, nil
}

func (g *clusterProbe) OnDeactivate(ctx grain.Context, reason grain.DeactivationReason) error {
	g.tc.mu.Lock()
	g.tc.deactivated[g.id.Key]++
	g.tc.mu.Unlock()
	return nil
}

// where names an activation: silo and activation ID.
func where(r *probe.Reply) string { return fmt.Sprintf("%s#%d", r.Text, r.Activation) }

// keys returns n grain keys with prefix.
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return ks
}

// keyWhere returns the first of 200 probe keys made from prefix whose
// grain ID satisfies ok, and fails the test, saying what was wanted,
// when none does.
func keyWhere(t *testing.T, prefix, what string, ok func(grain.ID) bool) string {
	t.Helper()
	for _, k := range keys(prefix, 200) {
		if ok(probeGrainID(k)) {
			return k
		}
	}
	t.Fatalf("no probe key %s", what)
	return ""
}

// probeGrainID is the grain ID of probe key.
func probeGrainID(key string) grain.ID { return grain.ID{Type: probe.ProbeGrainType, Key: key} }

// ringLen is the number of silos on s's directory ring: the active
// members as s sees them.
func ringLen(s *Silo) int { return s.Stats().Cluster.Active }

// The views of a silo that no public API gives, each read in one place.

// ringOf is s's directory ring: the members it takes for active, and
// which owns each grain's entry.
func ringOf(s *Silo) *directory.Ring { return s.cl.Dir.Ring() }

// onRing reports whether member is on s's directory ring.
func onRing(s *Silo, member string) bool { return ringOf(s).Contains(member) }

// ownerOf is the member whose directory partition holds id's entry, in
// s's view.
func ownerOf(s *Silo, id grain.ID) string { return ringOf(s).OwnerOf(id) }

// entriesOf returns the entries in s's directory partition.
func entriesOf(s *Silo) []directory.Item { return s.cl.Dir.Entries() }

// hostsOf is the number of silos s would place a grain of typ on: the
// admitted members, itself included, that host it.
func hostsOf(s *Silo, typ string) int { return len(s.cl.View.Load().Hosts[typ]) }

// localActivation returns the (non-worker) activation of typ/key in s's
// catalog, or nil: what s holds, whatever the directory says.
func localActivation(s *Silo, typ, key string) *local.Activation {
	a, _ := s.rt.Types[typ].Acts.Load(key)
	return a
}

// holders returns the names of the silos whose catalog holds an
// activation of probe key.
func holders(ss []*Silo, key string) []string {
	var out []string
	for _, s := range ss {
		if localActivation(s, probe.ProbeGrainType, key) != nil {
			out = append(out, s.cfg.Name)
		}
	}
	return out
}

// joinErrs renders errors for a failure message.
func joinErrs(errs []error) string {
	var b strings.Builder
	for i, err := range errs {
		if i == 5 {
			fmt.Fprintf(&b, "... and %d more", len(errs)-5)
			break
		}
		fmt.Fprintf(&b, "\n\t%v", err)
	}
	return b.String()
}
