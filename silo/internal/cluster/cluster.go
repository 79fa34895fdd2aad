package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/placement"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Config is what the cluster side takes from the silo's
// configuration: the silo's ClusterConfig, and the silo's name, admin
// and gateway addresses and rejection counters.
type Config struct {
	Name, AdminAddr, GatewayAddr string
	Rejections                   *security.Rejections

	Membership          membership.Config
	GRPCListen          string
	Transport           transport.Config
	ServerTLS, DialTLS  *tls.Config
	Directory           directory.Config
	Placement           placement.Config
	LoadReportInterval  time.Duration
	ShutdownGossipDelay time.Duration
	NewMembership       func(cfg membership.Config, onEvent func(membership.Event)) (membership.Service, error)
	Listener            transport.Listener
	Network             transport.Network
}

// Cluster is a silo's membership of a cluster: the view of the other
// silos, the directory, placement and the transport.
type Cluster struct {
	s      *local.Runtime
	Cfg    Config
	log    *zap.Logger
	SelfID string // this silo's member ID
	// GrpcAddr is where other silos dial this one.
	GrpcAddr string
	Mship    membership.Service
	Tport    *transport.Transport
	lis      transport.Listener
	net      transport.Network
	Dir      *directory.Directory
	placer   *placement.Placer
	// Gate admits members once a TLS handshake proves them silos of the
	// cluster's CA; nil without mutual TLS.
	Gate *peerGate

	View atomic.Pointer[clusterView]

	// ViewMu serialises view changes: membership events, Start and Stop.
	ViewMu     sync.Mutex
	Members    map[string]membership.Member // the other live members
	SelfStatus membership.Status
	active     []string // the last active list given to the directory

	// Inflight counts requests from other silos not yet answered and
	// calls forwarded from here not yet answered: Stop waits for both
	// before it leaves.
	Inflight local.InflightCount
	// cancels holds what cancels the requests from other silos that
	// their senders may cancel.
	cancels local.CancelTable

	// resolving holds, per grain being located, the calls queued behind
	// its lookup, oldest first; resolvingN counts its grains (see
	// Resolve). resolveMu.
	resolveMu  sync.Mutex
	resolving  map[grain.ID][]waiting
	resolvingN atomic.Int32

	// obsLookups holds, per client, the directory lookup of its home in
	// flight and the observer calls queued behind it. obsMu.
	obsMu      sync.Mutex
	obsLookups map[string]*observerLookup
	// retryArmed: a timer to send failed registrations again is set.
	retryArmed atomic.Bool
	// retryMu guards the backoff of those timers: retryDelay is the last
	// delay armed, retryLast when it was.
	retryMu    sync.Mutex
	retryDelay time.Duration
	retryLast  time.Time
	// departed remembers the members that left or failed, most recent
	// last, bounded by maxDeparted: an entry naming one of them is gone,
	// while one naming a member this silo has not heard of yet may be
	// new. viewMu.
	departed     map[string]bool
	departedList []string

	// heal is what a partition's heal left to do: the silos to ask to
	// register again (OpResync) and when to check this silo's own
	// registrations. The load loop does it.
	heal healWork

	Closed    atomic.Bool // close began: no retries are armed any more
	closeOnce sync.Once

	loadStop chan struct{}
	loadDone chan struct{}
}

// clusterView is an immutable snapshot of the live silos, for routing.
type clusterView struct {
	// Hosts lists, per grain type, the active silos that host it, as
	// placement candidates (this one included when it is active).
	Hosts map[string][]placement.Candidate
	// Known is every live member and its status, this one included.
	Known map[string]membership.Status
	// departed holds the members that left or failed lately.
	departed map[string]bool
}

// maxDeparted bounds the departed members a silo remembers.
const maxDeparted = 4096

// gone reports whether silo left, failed or is shutting down: what the
// directory says lives there is gone or going.
func (v *clusterView) gone(silo string) bool {
	st, live := v.Known[silo]
	return v.departed[silo] || live && st == membership.StatusShuttingDown
}

// New makes the cluster side of a silo whose local runtime is rt:
// its listener, membership, transport, directory and placement. The
// silo publishes it to the runtime and the gateway, then joins. On error,
// everything it started is stopped again.
func New(rt *local.Runtime, cfg Config) (_ *Cluster, err error) {
	cl := &Cluster{s: rt, Cfg: cfg, log: rt.Log, Members: map[string]membership.Member{}}
	defer func() {
		if err != nil {
			cl.Close()
		}
	}()
	tcfg := cfg.Transport
	tcfg.ClusterID = cfg.Membership.ClusterID
	tcfg.Listener, tcfg.Rejections = security.ListenerSilo, cfg.Rejections
	if tcfg.Logger == nil {
		tcfg.Logger = rt.Log.Named("transport")
	}
	if tcfg.Clock == nil {
		tcfg.Clock = rt.Clock
	}

	cl.lis = cfg.Listener
	if cl.lis == nil {
		var opts []grpc.ServerOption
		if cfg.ServerTLS != nil {
			opts = append(opts, grpc.Creds(security.WatchHandshakes(credentials.NewTLS(cfg.ServerTLS), cfg.Rejections, security.ListenerSilo, "")))
		}
		gl, err := transport.ListenGRPC(cfg.GRPCListen, tcfg, opts...)
		if err != nil {
			return nil, fmt.Errorf("silo: cluster: listening on %s: %w", cfg.GRPCListen, err)
		}
		cl.lis = gl
	}

	mcfg := cfg.Membership
	if mcfg.Name == "" {
		mcfg.Name = cfg.Name
	}
	if mcfg.Logger == nil {
		mcfg.Logger = rt.Log.Named("membership")
	}
	if mcfg.Rejections == nil {
		mcfg.Rejections = cfg.Rejections
	}
	mcfg.Types = rt.HostedTypes()
	if mcfg.GatewayAddr == "" {
		mcfg.GatewayAddr = cfg.GatewayAddr
	}
	if mcfg.AdminAddr == "" {
		mcfg.AdminAddr = cfg.AdminAddr
	}
	if mcfg.GRPCAddr == "" {
		if mcfg.GRPCAddr, err = advertisedAddr(cl.lis.Addr(), mcfg); err != nil {
			return nil, err
		}
	}
	newMembership := cfg.NewMembership
	if newMembership == nil {
		newMembership = func(cfg membership.Config, on func(membership.Event)) (membership.Service, error) {
			m, err := membership.New(cfg, on)
			if err != nil {
				return nil, err // not a nil *Memberlist in a non-nil Service
			}
			return m, nil
		}
	}
	if cl.Mship, err = newMembership(mcfg, cl.OnEvent); err != nil {
		return nil, fmt.Errorf("silo: cluster: %w", err)
	}
	cl.SelfID = cl.Mship.Local().ID
	cl.GrpcAddr = mcfg.GRPCAddr

	tcfg.Self = cl.SelfID
	cl.net = cfg.Network
	if cl.net == nil {
		var opts []grpc.DialOption
		if cfg.DialTLS != nil {
			opts = append(opts, grpc.WithTransportCredentials(security.WatchHandshakes(credentials.NewTLS(cfg.DialTLS), cfg.Rejections, "", security.ListenerDial)))
		}
		cl.net = transport.NewGRPCNetwork(tcfg, opts...)
	}
	if cl.Tport, err = transport.New(tcfg, cl.net, cl); err != nil {
		return nil, fmt.Errorf("silo: cluster: %w", err)
	}
	if cfg.DialTLS != nil && cfg.Network == nil {
		cl.Gate = newPeerGate(cl, cfg.DialTLS, tcfg.DialTimeout, cfg.LoadReportInterval)
	}
	dcfg := cfg.Directory
	dcfg.Logger, dcfg.Clock, dcfg.Lost, dcfg.RetryNeeded = rt.Log.Named("directory"), rt.Clock, cl.lost, cl.retryRegistrations
	dcfg.Local = rt.RegisteredActivations
	if cl.Dir, err = directory.New(dcfg, cl.SelfID, cl); err != nil {
		return nil, fmt.Errorf("silo: cluster: %w", err)
	}
	if cl.placer, err = placement.New(cfg.Placement); err != nil {
		return nil, fmt.Errorf("silo: cluster: %w", err)
	}
	cl.View.Store(&clusterView{Hosts: map[string][]placement.Candidate{}, Known: map[string]membership.Status{}})
	return cl, nil
}

// Join serves other silos' streams, joins the membership and becomes
// active once it knows the members. Requests may arrive as soon as it
// serves: the silo publishes the cluster first.
func (cl *Cluster) Join(ctx context.Context) error {
	if err := cl.lis.Serve(cl.Tport); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	if err := cl.Mship.Start(ctx); err != nil {
		return fmt.Errorf("silo: cluster: joining: %w", err)
	}
	// Take the members known now, then become active. Under mutual TLS
	// they are verified first, so that this silo does not serve calls
	// while it takes itself for alone: it would place and register
	// grains that its peers hold.
	known := cl.Mship.Members()
	if cl.Gate != nil {
		cl.Gate.verifyNow(ctx, known)
	}
	cl.ViewMu.Lock()
	for _, m := range known {
		if m.ID != cl.SelfID {
			cl.applyLocked(membership.Event{Kind: membership.EventJoined, Member: m})
		}
	}
	cl.ViewMu.Unlock()
	if err := cl.Mship.Update(func(m *membership.Member) { m.Status = membership.StatusActive }); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	cl.ViewMu.Lock()
	cl.SelfStatus = membership.StatusActive
	cl.refreshLocked()
	cl.ViewMu.Unlock()

	cl.loadStop, cl.loadDone = make(chan struct{}), make(chan struct{})
	go cl.reportLoad()
	cl.log.Info("silo joined the cluster", zap.String("member", cl.SelfID), zap.String("grpc", cl.GrpcAddr),
		zap.Int("members", len(cl.Mship.Members())))
	return nil
}

// advertisedAddr is the gRPC address other silos dial: the listener's,
// with a dialable host when the listener is bound to every interface.
func advertisedAddr(listen string, mcfg membership.Config) (string, error) {
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return "", fmt.Errorf("silo: cluster: listener address %q: %w", listen, err)
	}
	if addr := DialableAddr(listen, mcfg); addr != "" {
		return addr, nil
	}
	return "", &local.ConfigError{Field: "Cluster.Membership.GRPCAddr",
		Reason: fmt.Sprintf("must be set: the gRPC listener %s is bound to every interface and neither AdvertiseAddr nor BindAddr names a host other silos can dial", listen)}
}

// DialableAddr is listen, the address a listener is bound to, with the
// gossip advertise or bind address of mcfg as its host when it is bound
// to every interface, or "" when none names a dialable host.
func DialableAddr(listen string, mcfg membership.Config) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	for _, h := range []string{mcfg.AdvertiseAddr, mcfg.BindAddr} {
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			return net.JoinHostPort(h, port)
		}
	}
	return ""
}

// OnEvent takes a membership change. The membership's goroutine.
func (cl *Cluster) OnEvent(ev membership.Event) {
	cl.ViewMu.Lock()
	defer cl.ViewMu.Unlock()
	if cl.Tport == nil || cl.Dir == nil {
		return // Start failed before the cluster was up
	}
	cl.applyLocked(ev)
}

// applyLocked applies a change of another member to the transport,
// placement, the routing view and the directory. viewMu held.
func (cl *Cluster) applyLocked(ev membership.Event) {
	m := ev.Member
	if m.ID == cl.SelfID {
		return
	}
	if cl.Gate != nil && !cl.Gate.admitLocked(ev) {
		return
	}
	gone := ev.Kind == membership.EventLeft || ev.Kind == membership.EventFailed
	if gone {
		delete(cl.Members, m.ID)
		cl.rememberDepartedLocked(m.ID)
		cl.Tport.RemovePeer(m.ID, ev.Kind.String(), ev.Kind == membership.EventLeft)
		cl.placer.Forget(m.ID)
	} else {
		if cl.departed[m.ID] {
			// Taken for dead, yet alive: this silo purged the entries
			// naming it, so it must register its activations again.
			delete(cl.departed, m.ID)
			cl.log.Warn("a silo taken for dead is back; asking it to register its activations again", zap.String("member", m.ID))
			defer cl.healed(m.ID) // once it is a transport peer again
		}
		prev, had := cl.Members[m.ID]
		cl.Members[m.ID] = m
		cl.Tport.SetPeer(m.ID, m.GRPCAddr)
		cl.placer.LoadReported(m.ID, m.Activations)
		if had && prev.Status == membership.StatusActive && m.Status != membership.StatusActive {
			cl.log.Info("silo is shutting down", zap.String("member", m.ID))
		}
	}
	cl.refreshLocked()
	if gone {
		cl.Dir.SiloDead(m.ID)
		cl.log.Info("silo left the cluster", zap.String("member", m.ID), zap.Stringer("how", ev.Kind))
	}
}

// rememberDepartedLocked adds id to the departed members. viewMu held.
func (cl *Cluster) rememberDepartedLocked(id string) {
	if cl.departed == nil {
		cl.departed = map[string]bool{}
	}
	if cl.departed[id] {
		return
	}
	cl.departed[id] = true
	cl.departedList = append(cl.departedList, id)
	if len(cl.departedList) > maxDeparted {
		delete(cl.departed, cl.departedList[0])
		cl.departedList = cl.departedList[1:]
	}
}

// refreshLocked rebuilds the routing view and, when the active silos
// changed, gives the directory its new ring. viewMu held.
func (cl *Cluster) refreshLocked() {
	v := &clusterView{Hosts: map[string][]placement.Candidate{}, Known: map[string]membership.Status{}, departed: map[string]bool{}}
	for id := range cl.departed {
		v.departed[id] = true
	}
	var active []string
	add := func(id string, m membership.Member) {
		v.Known[id] = m.Status
		if m.Status != membership.StatusActive {
			return
		}
		active = append(active, id)
		for _, typ := range m.Types {
			v.Hosts[typ] = append(v.Hosts[typ], placement.Candidate{ID: id, Roles: m.Roles, Activations: m.Activations})
		}
	}
	for id, m := range cl.Members {
		add(id, m)
	}
	self := cl.Mship.Local()
	self.Status = cl.SelfStatus
	add(cl.SelfID, self)
	cl.View.Store(v)
	slices.Sort(active)
	if slices.Equal(active, cl.active) {
		return
	}
	cl.active = active
	cl.Dir.SetMembers(active, cl.s.RegisteredActivations())
	if rem := cl.s.Rem; rem != nil {
		rem.RingChanged(cl.Dir.Ring(), cl.SelfID)
	}
	if f := cl.s.RingChanged; f != nil {
		f(cl.Dir.Ring(), cl.SelfID)
	}
	for id, m := range cl.Members {
		if m.Status != membership.StatusActive {
			cl.Dir.InvalidateSilo(id)
		}
	}
}

// lost is the directory telling this silo that one of its activations
// lost its entry to another: it deactivates, and the requests it holds go
// to the winner.
func (cl *Cluster) lost(id grain.ID, loser, winner directory.Entry) {
	if loser.Silo != cl.SelfID {
		return
	}
	a := cl.s.ActivationByID(id, loser.Activation)
	if a == nil {
		return
	}
	if winner.Silo == cl.SelfID {
		// The winner names an activation of this silo that is gone (this
		// one holds the catalog slot): a stale entry. Drop it and
		// register again.
		cl.Dir.Unregister(id, winner)
		cl.reregister(a)
		return
	}
	cl.log.Warn("duplicate activation found; deactivating this one", zap.Stringer("grain", id),
		zap.Uint64("activation", a.ActID), zap.Stringer("winner", winner))
	a.Registered.Store(false) // its entry is the winner's: not to be unregistered
	a.RequestDeactivation(grain.DeactivateOperator)
}

// reregister registers a running activation again, after its entry was
// found missing or stale; if it loses, it deactivates.
func (cl *Cluster) reregister(a *local.Activation) {
	mine := directory.Entry{Silo: cl.SelfID, Activation: a.ActID}
	cl.Dir.Register(a.ID, mine, func(winner directory.Entry, err error) {
		switch {
		case err != nil:
			cl.log.Debug("registering again failed", zap.Stringer("grain", a.ID), zap.Error(err))
		case winner != mine && winner.Silo != cl.SelfID:
			cl.lost(a.ID, mine, winner)
		}
	})
}

// retryRegistrations has the directory send again, shortly, the
// registrations it could not deliver: one timer at a time. While rounds
// keep coming back (an owner that still takes this silo for dead answers
// every one), the delay doubles from registrationRetryDelay up to the
// load tick, which retries too; a quiet spell resets it.
func (cl *Cluster) retryRegistrations() {
	if cl.Closed.Load() || !cl.retryArmed.CompareAndSwap(false, true) {
		return
	}
	now := cl.s.Clock.Now()
	cl.retryMu.Lock()
	d := registrationRetryDelay
	if !cl.retryLast.IsZero() && now.Sub(cl.retryLast) < 4*cl.retryDelay {
		d = min(2*cl.retryDelay, max(cl.Cfg.LoadReportInterval, registrationRetryDelay))
	}
	cl.retryDelay, cl.retryLast = d, now
	cl.retryMu.Unlock()
	cl.s.Clock.AfterFunc(d, func() {
		cl.retryArmed.Store(false)
		if !cl.Closed.Load() {
			cl.Dir.RetryRegistrations()
		}
	})
}

// registrationRetryDelay is how soon registrations that could not be
// delivered are sent again: well within the directory's recovery window.
const registrationRetryDelay = 50 * time.Millisecond

// reportLoad gossips this silo's load when it changed, and has the
// directory send again the registrations it could not deliver.
func (cl *Cluster) reportLoad() {
	defer close(cl.loadDone)
	tk := cl.s.Clock.NewTicker(cl.Cfg.LoadReportInterval)
	defer tk.Stop()
	var last [2]uint64
	for {
		select {
		case <-cl.loadStop:
			return
		case <-tk.Chan():
		}
		cl.Dir.RetryRegistrations()
		cl.healTick()
		now := [2]uint64{uint64(cl.s.Live.Load()), uint64(cl.s.Pool.Stats().QueuedGroups)}
		if now == last {
			continue
		}
		last = now
		if err := cl.Mship.Update(func(m *membership.Member) { m.Activations, m.Queued = now[0], now[1] }); err != nil {
			cl.log.Debug("gossiping load failed", zap.Error(err))
		}
	}
}

// BeginLeave tells the cluster this silo is shutting down and takes it
// off its own ring, handing its directory ranges over. Stop calls it
// before it deactivates the silo's grains.
func (cl *Cluster) BeginLeave(ctx context.Context) {
	if err := cl.Mship.Update(func(m *membership.Member) { m.Status = membership.StatusShuttingDown }); err != nil {
		cl.log.Warn("announcing shutdown failed", zap.Error(err))
	}
	// Hand the directory ranges over now, not after the delay: the others
	// take this silo off their rings as soon as they hear, and their
	// recovery windows (directory.Config.RecoveryWindow) run from then.
	cl.ViewMu.Lock()
	cl.SelfStatus = membership.StatusShuttingDown
	cl.refreshLocked()
	cl.ViewMu.Unlock()
	if d := cl.Cfg.ShutdownGossipDelay; d > 0 {
		tm := time.NewTimer(d) // real time: gossip spreads in real time, whatever the silo's clock
		select {
		case <-tm.C:
		case <-ctx.Done():
		}
		tm.Stop()
	}
}

// FinishLeave waits until no request is in flight through this silo,
// leaves the cluster, tells every silo with a stream to this one to send
// nothing more (answering what they sent before they heard), waits for
// those requests too, writes out the last answers and closes the
// streams. Stop calls it once the silo's grains are deactivated.
func (cl *Cluster) FinishLeave(ctx context.Context) error {
	err := cl.Inflight.Drain(ctx, "requests through the cluster")
	if lerr := cl.Mship.Leave(ctx); lerr != nil {
		// The others then find this silo failed instead of left, which
		// costs nothing now: its grains and directory ranges are handed
		// over and nothing is in flight. It happens when the other silos
		// stop at the same time and none is left to take the news.
		cl.log.Warn("the cluster did not hear this silo leave; it will find it failed", zap.Error(lerr))
	}
	if gerr := cl.Tport.GoAway(ctx); gerr != nil && err == nil {
		err = fmt.Errorf("silo: cluster: waiting for the other silos to stop sending: %w", gerr)
	}
	if err == nil {
		err = cl.Inflight.Drain(ctx, "requests through the cluster")
	}
	if serr := cl.Tport.Shutdown(ctx); serr != nil && err == nil {
		err = serr
	}
	cl.Close()
	return err
}

// CancelCalls cancels the contexts of other silos' requests still
// running here: the silo is closing.
func (cl *Cluster) CancelCalls() { cl.cancels.CancelAll() }

// Close stops everything the cluster runs, without a leave: the other
// silos will find this one failed. Idempotent; any goroutine.
func (cl *Cluster) Close() {
	cl.Closed.Store(true)
	cl.closeOnce.Do(cl.closeNow)
}

func (cl *Cluster) closeNow() {
	cl.cancels.CancelAll()
	if cl.Gate != nil {
		cl.Gate.close()
	}
	if cl.loadStop != nil {
		close(cl.loadStop)
		<-cl.loadDone
	}
	if cl.Mship != nil {
		cl.Mship.Close()
	}
	if cl.Tport != nil {
		cl.Tport.Close()
	}
	if cl.lis != nil {
		cl.lis.Stop()
	}
	if g, ok := cl.net.(*transport.GRPCNetwork); ok && cl.Cfg.Network == nil {
		g.Close()
	}
}

// Self is this silo's member ID.
func (cl *Cluster) Self() string { return cl.SelfID }

// Unregister removes a dead activation's directory entry.
func (cl *Cluster) Unregister(a *local.Activation) {
	cl.Dir.Unregister(a.ID, directory.Entry{Silo: cl.SelfID, Activation: a.ActID})
}
