package granarytest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jonboulle/clockwork"
	"google.golang.org/protobuf/proto"
)

// Timeout bounds every wait of the package: for the silos to start, to
// agree on the membership, to stop, and for Advance's work to settle. A
// test that reaches it has failed.
const Timeout = 10 * time.Second

// ClusterID is the cluster ID of every test cluster.
const ClusterID = "granarytest"

// loadReportInterval is the silos' ClusterConfig.LoadReportInterval: how
// often they gossip their load and retry what a membership change left
// undelivered (the harness of package silo's tests uses 50 ms; the default
// is 1 s). Shorter than the directory's recovery window, so the clock
// moves past one such tick after each membership change.
const loadReportInterval = 100 * time.Millisecond

// Cluster is silos in one process, on an in-memory network and membership,
// sharing one fake clock and one memory storage provider. Make one with
// New. Its methods are for the test's goroutine, the one running the
// test function: they fail the test with t.Fatalf, which must be called
// there. Those that only look and fail nothing (Len, Running,
// Activations, ActivationCount, Now, the calls of Caller, ReadState) may
// be called from any goroutine. None is for grain code (they wait for the
// cluster), nor for after the test ends.
type Cluster struct {
	t     reporter
	o     options
	hub   *membership.Hub
	net   *transport.MemNetwork
	clock *fakeClock // nil on the real clock
	store *storage.Memory
	// settleAfterChange is how far membership changes move the fake
	// clock: the silos' longest directory recovery window. mu.
	settleAfterChange time.Duration
	// lost is how many more envelopes the silos wrote than they received
	// because streams broke with frames in flight (see lossGrace). mu.
	lost int64

	// mu serialises what changes the cluster (starting, stopping, killing,
	// partitioning silos, Advance) so Advance never steps while a silo
	// starts.
	mu sync.Mutex
	// smu guards silos, which readers take a snapshot of.
	smu   sync.RWMutex
	silos []*member // by index, in start order; stopped ones stay
}

// member is one silo of the cluster.
type member struct {
	i    int
	name string
	s    *silo.Silo
	up   bool // started, and not stopped or killed; smu
	cut  bool // on the cut-off side of a partition; smu
}

// New starts a cluster of silos (one, unless Silos says otherwise) with
// the options' grain types, waits until every silo sees every other, and
// registers t.Cleanup to stop them gracefully and wait for their
// goroutines (Close). It fails the test if a silo does not start; the
// Cluster's methods fail it as they fail.
func New(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c := newCluster(t, opts)
	t.Cleanup(func() { c.stopAll() })
	c.startAll()
	return c
}

// Start is New outside a test (in an example, a TestMain, a benchmark's
// setup, a program): it returns the error New would fail the test with,
// and the Cluster's methods panic where New's would fail the test. Close
// the cluster when done.
func Start(opts ...Option) (c *Cluster, err error) {
	p := &panicker{}
	c = newCluster(p, opts)
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			c.stopAll()
			c, err = nil, f.err
		}
	}()
	c.startAll()
	return c, nil
}

// Close stops the running silos gracefully, in parallel, and waits for
// their goroutines, the network's and the clock's; it returns what went
// wrong for a cluster made by Start (New's reports to the test). A
// cluster made by New is closed by the test's cleanup. Idempotent.
func (c *Cluster) Close() error {
	c.stopAll()
	if p, ok := c.t.(*panicker); ok {
		return p.err()
	}
	return nil
}

func newCluster(t reporter, opts []Option) *Cluster {
	t.Helper()
	o := options{silos: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.silos < 1 {
		t.Fatalf("granarytest: Silos(%d): a cluster needs at least one silo", o.silos)
	}
	c := &Cluster{
		t:     t,
		o:     o,
		hub:   membership.NewHub(),
		net:   transport.NewMemNetwork(),
		store: storage.NewMemory(0),
	}
	if !o.realClock {
		// The real time: a call's context deadline is a time, which the
		// silos read on their clock, so a context with a deadline given
		// to a silo directly works until Advance moves the clock past it
		// (Caller turns it into a timeout on this clock; testwait.Context's
		// cancelled contexts work always).
		c.clock = newFakeClock(time.Now())
	}
	return c
}

// startAll starts the silos the options ask for.
func (c *Cluster) startAll() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for range c.o.silos {
		c.startLocked()
	}
	c.waitConvergedLocked()
}

// StartSilo starts one more silo, waits until every running silo sees it,
// and returns its index.
func (c *Cluster) StartSilo() int {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.startLocked()
	c.waitConvergedLocked()
	return m.i
}

// startLocked makes, registers and starts silo number len(c.silos). mu
// held.
func (c *Cluster) startLocked() *member {
	c.t.Helper()
	c.smu.RLock()
	i := len(c.silos)
	c.smu.RUnlock()
	m := &member{i: i, name: "silo" + strconv.Itoa(i)}
	addr := m.name + ":7947"
	cfg := silo.DefaultConfig()
	cfg.Name = m.name
	if c.clock != nil {
		cfg.Clock = c.clock
	}
	cc := silo.DefaultClusterConfig()
	cc.Membership.ClusterID = ClusterID
	cc.ShutdownGossipDelay = 0
	cc.LoadReportInterval = loadReportInterval
	cc.Listener = c.net.Listener(addr)
	cc.Network = c.net.From(addr)
	cc.NewMembership = func(mc membership.Config, on func(membership.Event)) (membership.Service, error) {
		return c.hub.Member(mc, on), nil
	}
	cfg.Cluster = &cc
	cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: c.store}
	cfg.Reminders = &silo.RemindersConfig{Table: c.store}
	if c.o.gateway {
		g := silo.DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		cfg.Gateway = &g
	}
	for _, fn := range c.o.configure {
		fn(&cfg)
	}
	s, err := silo.New(cfg)
	if err != nil {
		c.t.Fatalf("granarytest: silo %s: %v", m.name, err)
	}
	if cfg.Cluster != nil {
		c.settleAfterChange = max(c.settleAfterChange, cfg.Cluster.Directory.RecoveryWindow)
	}
	m.s = s
	for _, fn := range c.o.register {
		if err := fn(s); err != nil {
			c.t.Fatalf("granarytest: registering grain types on silo %s: %v", m.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		c.t.Fatalf("granarytest: starting silo %s: %v", m.name, err)
	}
	c.smu.Lock()
	m.up = true
	c.silos = append(c.silos, m)
	c.smu.Unlock()
	return m
}

// isUp reports whether m runs. Any goroutine.
func (c *Cluster) isUp(m *member) bool {
	c.smu.RLock()
	defer c.smu.RUnlock()
	return m.up
}

// all returns the silos, by index.
func (c *Cluster) all() []*member {
	c.smu.RLock()
	defer c.smu.RUnlock()
	return slices.Clone(c.silos)
}

// running returns the silos that are up.
func (c *Cluster) running() []*member {
	c.smu.RLock()
	defer c.smu.RUnlock()
	var ms []*member
	for _, m := range c.silos {
		if m.up {
			ms = append(ms, m)
		}
	}
	return ms
}

// member returns silo i, failing the test if there is none.
func (c *Cluster) member(i int) *member {
	c.t.Helper()
	c.smu.RLock()
	defer c.smu.RUnlock()
	if i < 0 || i >= len(c.silos) {
		c.t.Fatalf("granarytest: no silo %d: the cluster started %d", i, len(c.silos))
	}
	return c.silos[i]
}

// Silo returns silo i, in the order the silos started from 0, whether it
// still runs or not. Its Caller (the *silo.Silo itself) calls grains
// through it.
func (c *Cluster) Silo(i int) *silo.Silo { c.t.Helper(); return c.member(i).s }

// Len returns how many silos the cluster started, running or not.
func (c *Cluster) Len() int {
	c.smu.RLock()
	defer c.smu.RUnlock()
	return len(c.silos)
}

// Running returns the indexes of the silos that run, in order.
func (c *Cluster) Running() []int {
	var is []int
	for _, m := range c.running() {
		is = append(is, m.i)
	}
	return is
}

// Storage returns the memory provider that every silo keeps grain state
// and reminders in, under grain.DefaultStorage: what a grain wrote
// survives its silo being killed, and a test can read it (ReadState
// decodes a state; the provider's ReadState gives the raw record, and
// GrainReminders the reminders), or make it fail (SetDown, SetFault).
func (c *Cluster) Storage() *storage.Memory { return c.store }

// ReadState reads grain id's state of spec from the cluster's storage
// (Storage), as the grain last wrote it, whatever silo it ran on and
// whether it runs now or not. It returns the decoded state and true, or
// a new empty T and false when the grain never wrote the state or
// cleared it. It fails when spec's provider is not grain.DefaultStorage
// (the only one the cluster keeps), when the storage fails (SetDown,
// SetFault) or does not answer within Timeout, and when the record does
// not decode as a T. Any goroutine but grain code's.
func ReadState[T proto.Message](c *Cluster, id grain.ID, spec *grain.StateSpec[T]) (T, bool, error) {
	var zero T
	v := zero.ProtoReflect().New().Interface().(T)
	if p := spec.ProviderName(); p != grain.DefaultStorage {
		return v, false, fmt.Errorf("granarytest: state %q is kept by provider %q; the cluster keeps %q only", spec.StateName(), p, grain.DefaultStorage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	rec, err := c.store.ReadState(ctx, id, spec.StateName())
	if err != nil {
		return v, false, fmt.Errorf("granarytest: reading state %q of %v: %w", spec.StateName(), id, err)
	}
	if !rec.Exists {
		return v, false, nil
	}
	if err := proto.Unmarshal(rec.Data, v); err != nil {
		return v, false, fmt.Errorf("granarytest: state %q of %v does not decode as %s: %w", spec.StateName(), id, v.ProtoReflect().Descriptor().FullName(), err)
	}
	return v, true, nil
}

// Clock returns the cluster's clock: the fake one that Advance moves, or
// the real one with WithRealClock. Give it to grain code that needs the
// time; move it only with Advance.
func (c *Cluster) Clock() clockwork.Clock {
	if c.clock == nil {
		return clockwork.NewRealClock()
	}
	return c.clock
}

// Activations returns the indexes of the running silos whose catalog
// holds an activation of grain id (for a stateless worker, any of its
// activations): one, normally; none once it was collected; more during a
// partition.
func (c *Cluster) Activations(id grain.ID) []int {
	var is []int
	for _, m := range c.running() {
		if m.s.TestHooks().Holds(id) {
			is = append(is, m.i)
		}
	}
	return is
}

// ActivationCount returns how many activations of grainType the running
// silos hold in all.
func (c *Cluster) ActivationCount(grainType string) int {
	n := 0
	for _, m := range c.running() {
		for _, ts := range m.s.TypeStats() {
			if ts.Type == grainType {
				n += ts.Activations
			}
		}
	}
	return n
}

// Stop stops silo i gracefully (silo.Silo.Stop): its activations
// deactivate, running OnDeactivate, and hand their grains over; then it
// waits until the other silos see it gone.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.takeDown(i)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := m.s.Stop(ctx); err != nil {
		c.t.Errorf("granarytest: stopping silo %s: %v", m.name, err)
	}
	c.waitConvergedLocked()
}

// Kill ends silo i at once, as a process killed would end: its network
// links break, the others see it fail, and no OnDeactivate runs; its
// grains activate again elsewhere on their next call, from the state they
// last wrote. It waits until the other silos see it gone.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.takeDown(i)
	c.net.Down(m.name+":7947", true)
	c.hub.Kill(m.s.Member())
	if err := m.s.Close(); err != nil {
		c.t.Errorf("granarytest: closing silo %s: %v", m.name, err)
	}
	c.waitConvergedLocked()
}

// takeDown marks silo i down, failing the test if it was not running.
// mu held.
func (c *Cluster) takeDown(i int) *member {
	c.t.Helper()
	m := c.member(i)
	c.smu.Lock()
	defer c.smu.Unlock()
	if !m.up {
		c.t.Fatalf("granarytest: silo %d is not running", i)
	}
	m.up = false
	return m
}

// Partition cuts the running silos of side off from the other running
// silos, in the membership and on the network, and waits until each side
// takes the other for dead. Each side then serves on its own: a grain
// called from both sides activates on each. Heal ends it.
func (c *Cluster) Partition(side ...int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var a, b, aAddr, bAddr []string
	c.smu.Lock()
	for _, m := range c.silos {
		m.cut = false
		if !m.up {
			continue
		}
		if slices.Contains(side, m.i) {
			m.cut = true
			a, aAddr = append(a, m.s.Member()), append(aAddr, m.name+":7947")
		} else {
			b, bAddr = append(b, m.s.Member()), append(bAddr, m.name+":7947")
		}
	}
	c.smu.Unlock()
	if len(a) == 0 || len(b) == 0 {
		c.t.Fatalf("granarytest: Partition(%v): both sides need a running silo", side)
	}
	c.hub.Partition(a, b)
	c.net.Partition(aAddr, bAddr)
	c.waitConvergedLocked()
}

// Heal ends a partition and waits until every running silo sees every
// other again. Duplicate activations made during the partition are
// resolved by the silos, as they would be after a real one: on the fake
// clock, that takes time, so they resolve as Advance moves the clock on
// (Activations tells when a grain is down to one).
func (c *Cluster) Heal() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.smu.Lock()
	for _, m := range c.silos {
		m.cut = false
	}
	c.smu.Unlock()
	c.hub.Heal()
	c.net.Heal()
	c.waitConvergedLocked()
}

// waitConvergedLocked waits until every running silo's directory ring
// holds exactly the running silos on its side of any partition; then, on
// the fake clock, it moves the clock on by the directory's recovery
// window (see Advance), during which a silo that took over a grain's
// directory entry answers "retry" for it. Every call to such a grain
// would otherwise wait for a test to move the clock. mu held.
func (c *Cluster) waitConvergedLocked() {
	c.t.Helper()
	c.waitAgreeLocked()
	if c.clock != nil {
		c.advanceLocked(c.settleAfterChange)
	}
}

// waitAgreeLocked waits until every running silo's directory ring holds
// exactly the running silos on its side of any partition. mu held.
func (c *Cluster) waitAgreeLocked() {
	c.t.Helper()
	c.waitFor("the silos to agree on the membership", func() bool {
		ms := c.running()
		for _, m := range ms {
			var want []string
			for _, o := range ms {
				if o.cut == m.cut {
					want = append(want, o.s.Member())
				}
			}
			st := m.s.Stats()
			if st.Cluster == nil || st.Cluster.Active != len(want) {
				return false
			}
			var got []string
			for _, mm := range m.s.Members() {
				if mm.Status == membership.StatusActive {
					got = append(got, mm.ID)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return false
			}
		}
		return true
	})
}

// Client dials a Go client to the cluster through the gateways of the
// running silos (the cluster needs the Gateway option), with opts after
// the cluster's own (client.WithGateways); t.Cleanup closes it, before
// the cluster stops.
func (c *Cluster) Client(t testing.TB, opts ...client.Option) *client.Client {
	t.Helper()
	var addrs []string
	for _, m := range c.running() {
		if a := m.s.GatewayAddr(); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		t.Fatal("granarytest: Client: no running silo serves a gateway; start the cluster with the Gateway option")
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cl, err := client.Dial(ctx, append([]client.Option{client.WithGateways(addrs...)}, opts...)...)
	if err != nil {
		t.Fatalf("granarytest: dialling the cluster's gateways %v: %v", addrs, err)
	}
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("granarytest: closing a client: %v", err)
		}
	})
	return cl
}

// stopAll stops the running silos gracefully, in parallel, and waits for
// the network's goroutines and the clock's callbacks: the test's cleanup.
// On the fake clock, time passes meanwhile, 10 ms every millisecond, so
// the retries that a stop may wait for (a call forwarded to a grain's
// new home, say) come due.
func (c *Cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range c.running() {
		c.smu.Lock()
		m.up = false
		c.smu.Unlock()
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			if err := m.s.Stop(ctx); err != nil {
				c.t.Errorf("granarytest: stopping silo %s: %v", m.name, err)
			}
		})
	}
	if c.clock != nil {
		stopped := make(chan struct{})
		pumped := make(chan struct{})
		go func() {
			defer close(pumped)
			tk := time.NewTicker(time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stopped:
					return
				case <-tk.C:
					c.clock.moveTo(c.clock.Now().Add(10 * time.Millisecond))
				}
			}
		}()
		wg.Wait()
		close(stopped)
		<-pumped
	} else {
		wg.Wait()
	}
	c.net.Wait()
	if c.clock != nil {
		deadline := time.Now().Add(Timeout)
		for !c.clock.idle() {
			if time.Now().After(deadline) {
				c.t.Errorf("granarytest: clock callbacks still running %v after the silos stopped", Timeout)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
}
