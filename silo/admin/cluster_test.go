package admin_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/security/auth"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/metrics"
	"github.com/granaryio/granary/silo/storage"
	"google.golang.org/grpc/codes"
)

// peerTimeout is the admin servers' PeerTimeout in the cluster tests:
// short, so that a test of a silent peer is quick, and far above what a
// loopback request takes.
const peerTimeout = time.Second

// testCluster is silos in one process on an in-memory membership hub and
// network, each with an admin server on loopback TCP whose address it
// gossips. The admin servers share a token file holding adminToken,
// each loading it on its own, as silos of one cluster do.
type testCluster struct {
	t         *testing.T
	hub       *membership.Hub
	net       *transport.MemNetwork
	tokenPath string

	mu    sync.Mutex
	nodes map[string]*node
	order []string
	store storage.Provider // the silos' shared store, made by sharedStore
}

// sharedStore returns the store the cluster's silos share, made at the
// first call.
func (c *testCluster) sharedStore() storage.Provider {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store == nil {
		c.store = storage.NewMemory(0)
	}
	return c.store
}

// node is one silo of a testCluster and its admin server.
type node struct {
	name   string
	sl     *silo.Silo
	srv    *admin.Server // nil for a node given an admin address of its own
	m      *metrics.Metrics
	drains atomic.Int32
}

// nodeOptions changes how a node is made.
type nodeOptions struct {
	// adminAddr, when set, is gossiped instead of a real admin server's.
	adminAddr string
	// sampleInterval is the admin server's SampleInterval.
	sampleInterval time.Duration
	// noTokens makes admin servers without admin credentials.
	noTokens bool
	// tokenPath, when set, is the admin server's token file instead of
	// the cluster's.
	tokenPath string
	// serverTLS and peerTLS, when set, are the admin servers' TLS and
	// PeerTLS, with CertAdmins.
	serverTLS, peerTLS *tls.Config
	// streams, when set, gives the silos the memory stream provider
	// "default" with their subscriptions in a store they share, and the
	// Listener type, whose handler does as streams says (streams_test.go).
	streams *streamLog
}

// newTestCluster starts silos with the names given and waits until each
// sees all of them active.
func newTestCluster(t *testing.T, names ...string) *testCluster {
	t.Helper()
	return newTestClusterWith(t, nodeOptions{}, names...)
}

// newTestClusterWith is newTestCluster with options for every node.
func newTestClusterWith(t *testing.T, opts nodeOptions, names ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, hub: membership.NewHub(), net: transport.NewMemNetwork(), nodes: map[string]*node{},
		tokenPath: writeTokenFile(t, adminToken+" ops")}
	t.Cleanup(c.stopAll)
	for _, name := range names {
		c.start(name, opts)
	}
	c.waitMembers(len(names))
	return c
}

// start starts a silo called name with an admin server.
func (c *testCluster) start(name string, opts nodeOptions) *node {
	c.t.Helper()
	n := &node{name: name}
	m, reg := newMetrics(c.t)
	n.m = m
	adminAddr := opts.adminAddr
	if adminAddr == "" {
		cfg := admin.Config{
			Listen:         "127.0.0.1:0",
			Gatherer:       reg,
			Drain:          func() { n.drains.Add(1) },
			PeerTimeout:    peerTimeout,
			SampleInterval: opts.sampleInterval,
			Logger:         testLogger().Named(name),
			TLS:            opts.serverTLS,
			PeerTLS:        opts.peerTLS,
			CertAdmins:     opts.serverTLS != nil,
		}
		if !opts.noTokens {
			path := c.tokenPath
			if opts.tokenPath != "" {
				path = opts.tokenPath
			}
			cfg.Tokens = loadTokens(c.t, path, auth.TokenFileOptions{})
		}
		srv, err := admin.Listen(cfg)
		if err != nil {
			c.t.Fatal(err)
		}
		n.srv = srv
		adminAddr = srv.Addr()
	}
	cfg := silo.DefaultConfig()
	cfg.Name = name
	cfg.AdminAddr = adminAddr
	cfg.Logger = testLogger().Named(name)
	cfg.IncomingFilters = []grain.IncomingFilter{m.IncomingFilter()}
	cc := silo.DefaultClusterConfig()
	cc.Membership.ClusterID = "admin-test"
	cc.ShutdownGossipDelay = 0
	cc.LoadReportInterval = 50 * time.Millisecond
	cc.Listener = c.net.Listener(name + ":7947")
	cc.Network = c.net.From(name + ":7947")
	cc.NewMembership = func(mc membership.Config, on func(membership.Event)) (membership.Service, error) {
		return c.hub.Member(mc, on), nil
	}
	cfg.Cluster = &cc
	if opts.streams != nil {
		cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: c.sharedStore()}
		cfg.Streams = streamsConfig()
	}
	sl, err := silo.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	n.sl = sl
	registerProbe(c.t, sl, name)
	if opts.streams != nil {
		registerListener(c.t, sl, opts.streams)
	}
	if err := m.Attach(sl); err != nil {
		c.t.Fatal(err)
	}
	if n.srv != nil {
		n.srv.Attach(sl, m)
	}
	c.mu.Lock()
	c.nodes[name] = n
	c.order = append(c.order, name)
	c.mu.Unlock()
	if err := sl.Start(testCtx(c.t)); err != nil {
		c.t.Fatal(err)
	}
	return n
}

func (c *testCluster) node(name string) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[name]
	if n == nil {
		c.t.Fatalf("no silo %s", name)
	}
	return n
}

// names returns the silos' names, sorted.
func (c *testCluster) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.order)
	sort.Strings(out)
	return out
}

// waitMembers waits until every silo sees n active members.
func (c *testCluster) waitMembers(n int) {
	c.t.Helper()
	for _, name := range c.names() {
		sl := c.node(name).sl
		testwait.For(c.t, testTimeout, fmt.Sprintf("%s to see %d active members", name, n), func() bool {
			ms := sl.Members()
			return len(ms) == n && !slices.ContainsFunc(ms, func(m membership.Member) bool {
				return m.Status != membership.StatusActive || m.AdminAddr == ""
			})
		})
	}
}

// stopAll stops the silos, then their admin servers.
func (c *testCluster) stopAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[string]*node{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for name, n := range nodes {
		wg.Go(func() {
			if err := n.sl.Stop(testCtx(c.t)); err != nil {
				c.t.Errorf("Stop %s: %v", name, err)
			}
		})
	}
	wg.Wait()
	for name, n := range nodes {
		if n.srv != nil {
			if err := n.srv.Stop(testCtx(c.t)); err != nil {
				c.t.Errorf("Stop the admin server of %s: %v", name, err)
			}
		}
	}
	c.net.Wait()
}

// keyOn returns a probe key whose activation is on the silo called
// target, activating grains through from until one lands there.
func (c *testCluster) keyOn(from, target string) string {
	c.t.Helper()
	for i := range 200 {
		key := fmt.Sprintf("k%d", i)
		if call(c.t, c.node(from).sl, key) == target {
			return key
		}
	}
	c.t.Fatalf("no probe grain of 200 was placed on %s", target)
	return ""
}

func TestClusterReportListsEverySilo(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, "a", "b", "c")
	for i := range 12 {
		call(t, c.node("a").sl, fmt.Sprintf("g%d", i))
	}
	// b sheds load: every silo's report of the cluster says so of b alone.
	bOverload := adminapi.Overload{Shedding: true, ShedRequests: 9, QueueRefusals: 2}
	c.node("b").sl.TestHooks().SetOverload(silo.OverloadStats{Shedding: true, Shed: 9, QueueRefusals: 2})
	for _, asked := range c.names() {
		n := c.node(asked)
		r, err := adminClient(t, n.srv.Addr()).Cluster(testCtx(t))
		if err != nil {
			t.Fatalf("cluster report of %s: %v", asked, err)
		}
		if r.Asked != n.sl.Member() {
			t.Errorf("asked %q, want %s's member %q", r.Asked, asked, n.sl.Member())
		}
		if len(r.Unreachable) != 0 {
			t.Errorf("%s: unreachable %+v", asked, r.Unreachable)
		}
		var names []string
		activations := 0
		for _, s := range r.Silos {
			names = append(names, s.Name)
			activations += s.Activations
			if s.Member != c.node(s.Name).sl.Member() || s.Status != "active" || s.Addresses.Admin != c.node(s.Name).srv.Addr() {
				t.Errorf("%s: silo %+v", asked, s)
			}
			wantOverload := adminapi.Overload{}
			if s.Name == "b" {
				wantOverload = bOverload
			}
			if s.Overload != wantOverload {
				t.Errorf("%s: silo %s overload %+v, want %+v", asked, s.Name, s.Overload, wantOverload)
			}
		}
		if !slices.Equal(names, []string{"a", "b", "c"}) {
			t.Fatalf("%s: silos %v, want a, b, c", asked, names)
		}
		if activations < 12 {
			t.Errorf("%s: %d activations over the silos, want at least 12", asked, activations)
		}
		if len(r.Types) != 1 || r.Types[0].Type != probeType || r.Types[0].Activations != activations {
			t.Errorf("%s: types %+v, want %s summing %d activations", asked, r.Types, probeType, activations)
		}
	}
}

func TestLookupAndDeactivateForwarded(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, "a", "b", "c")
	key := c.keyOn("a", "c")
	grainID := probeType + "/" + key
	ca := adminClient(t, c.node("a").srv.Addr())
	ctx := testCtx(t)

	loc, err := ca.Lookup(ctx, grainID)
	if err != nil || !loc.Active || loc.Name != "c" || loc.Member != c.node("c").sl.Member() {
		t.Fatalf("Lookup through a: %+v, %v; want active on c", loc, err)
	}
	d, err := ca.Deactivate(ctx, grainID)
	if err != nil || !d.Deactivated || d.Member != c.node("c").sl.Member() {
		t.Fatalf("Deactivate through a: %+v, %v; want deactivated on c", d, err)
	}
	testwait.For(t, testTimeout, "the grain to deactivate on c", func() bool {
		loc, err := ca.Lookup(ctx, grainID)
		return err == nil && !loc.Active
	})
	if n := callCount(t, c.node("a").sl, key); n != 1 {
		t.Errorf("first call after the deactivation counted %d, want 1 (a new activation)", n)
	}
}

func TestDrainForwarded(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, "a", "b", "c")
	ca := adminClient(t, c.node("a").srv.Addr())
	reply, err := ca.Drain(testCtx(t), "b")
	if err != nil {
		t.Fatal(err)
	}
	if reply.Name != "b" || reply.Member != c.node("b").sl.Member() {
		t.Errorf("drain of b answered %+v", reply)
	}
	// By member ID, and with the status the API promises.
	a := doAuth(t, http.MethodPost, c.node("a").srv.Addr(), adminapi.PathDrain, query("silo", c.node("c").sl.Member()), adminToken)
	var dr adminapi.DrainReply
	a.decode(t, http.StatusAccepted, &dr)
	if dr.Name != "c" {
		t.Errorf("drain of c's member answered %+v", dr)
	}
	for name, want := range map[string]int32{"a": 0, "b": 1, "c": 1} {
		if got := c.node(name).drains.Load(); got != want {
			t.Errorf("%s drained %d times, want %d", name, got, want)
		}
	}
	doAuth(t, http.MethodPost, c.node("a").srv.Addr(), adminapi.PathDrain, query("silo", "d"), adminToken).
		wantError(t, http.StatusNotFound, codes.NotFound, `"d"`)
}

// TestUnreachablePeers: a member whose admin server stopped, and one
// whose admin address takes connections and never answers, are listed as
// unreachable, and the report does not wait for them past PeerTimeout.
func TestUnreachablePeers(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		silent.Close()
		conns.Wait()
	})
	conns.Go(func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, conn) // read nothing, answer nothing
		}
	})

	c := newTestCluster(t, "a", "b", "c")
	c.start("d", nodeOptions{adminAddr: silent.Addr().String()})
	c.waitMembers(4)
	cNode := c.node("c")
	if err := cNode.srv.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}

	begin := time.Now()
	r, err := adminClient(t, c.node("a").srv.Addr()).Cluster(testCtx(t))
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	if took > peerTimeout+time.Second {
		t.Errorf("the report took %v with a silent peer, want about PeerTimeout %v", took, peerTimeout)
	}
	var names []string
	for _, s := range r.Silos {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("silos %v, want a and b", names)
	}
	down := map[string]adminapi.Unreachable{}
	for _, u := range r.Unreachable {
		down[u.Member] = u
	}
	if u, ok := down[cNode.sl.Member()]; !ok || u.Admin != cNode.srv.Addr() || u.Error == "" {
		t.Errorf("c (stopped admin server) not listed right: %+v", r.Unreachable)
	}
	if u, ok := down[c.node("d").sl.Member()]; !ok || u.Admin != silent.Addr().String() {
		t.Errorf("d (silent admin server) not listed right: %+v", r.Unreachable)
	}
	if len(r.Unreachable) != 2 {
		t.Errorf("unreachable %+v, want c and d", r.Unreachable)
	}

	// A request forwarded to a peer that fails is 502, naming it.
	key := c.keyOn("a", "c")
	doAuth(t, http.MethodPost, c.node("a").srv.Addr(), adminapi.PathDeactivate, query("grain", probeType+"/"+key), adminToken).
		wantError(t, http.StatusBadGateway, codes.Unavailable, cNode.sl.Member())
	_, err = adminClient(t, c.node("a").srv.Addr()).Drain(testCtx(t), "c")
	var ae *adminapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway {
		t.Errorf("drain of c with its admin server stopped: %v, want 502", err)
	}
}
