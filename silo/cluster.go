package silo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/granaryio/granary/security/tlsfiles"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/placement"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ClusterConfig makes a silo a member of a cluster: it gossips with the
// other silos, places grains over them, keeps its part of the grain
// directory and carries calls to them. Start from DefaultClusterConfig.
type ClusterConfig struct {
	// Membership is the gossip configuration: cluster ID, seeds, gossip
	// addresses, encryption key, failure detection. Its Name defaults to
	// the silo's Name, its Types are the grain types registered on the
	// silo, and its GRPCAddr defaults to the address of the silo's
	// listener (with the gossip advertise or bind address as its host when
	// the listener is bound to every interface).
	Membership membership.Config

	// GRPCListen is where the silo's gRPC server listens for the streams
	// of other silos, host:port; port 0 picks a free port. Default
	// ":7947".
	GRPCListen string

	// Transport sets the limits of the streams between silos and of the
	// connections to GRPCListen. Its ClusterID, Self and Rejections are
	// filled in.
	Transport transport.Config

	// ServerTLS and DialTLS secure the streams between silos with mutual
	// TLS: ServerTLS is the listener's (it must require and verify a
	// client certificate), DialTLS is for dialling peers (it presents
	// this silo's certificate and verifies theirs). Set both or neither;
	// ClusterTLS makes both from a tlsfiles.Source. Nil (the default):
	// plaintext, for a network no one else shares. Ignored with Listener
	// and Network, which bring their own.
	ServerTLS, DialTLS *tls.Config

	// Directory configures this silo's part of the grain directory. Its
	// Logger, Clock and Lost are filled in.
	Directory directory.Config

	// Placement picks the default placement strategy.
	Placement placement.Config

	// LoadReportInterval is how often the silo gossips its load (its
	// activation count and queued turns) when it changed, for
	// activation-count placement, and sends again the directory
	// registrations that a membership change could not deliver. Default
	// 1 s.
	LoadReportInterval time.Duration

	// ShutdownGossipDelay is how long Stop waits after telling the
	// cluster this silo is shutting down, before it hands its grains and
	// directory ranges over: the time for the news to spread, so the
	// other silos stop placing grains here and take over its directory
	// ranges first. Default 500 ms.
	ShutdownGossipDelay time.Duration

	// The seams, for tests. NewMembership makes the membership service
	// (default: memberlist); Listener accepts other silos' streams
	// (default: a gRPC server on GRPCListen); Network dials them (default:
	// gRPC).
	NewMembership func(cfg membership.Config, onEvent func(membership.Event)) (membership.Service, error)
	Listener      transport.Listener
	Network       transport.Network
}

// DefaultClusterConfig returns a cluster configuration for a LAN, with
// the cluster ID, seeds and addresses left to fill in.
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{
		Membership:          membership.DefaultLANConfig(),
		GRPCListen:          ":7947",
		Transport:           transport.DefaultConfig(),
		Directory:           directory.DefaultConfig(),
		Placement:           placement.DefaultConfig(),
		LoadReportInterval:  time.Second,
		ShutdownGossipDelay: 500 * time.Millisecond,
	}
}

func (c *ClusterConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: "Cluster." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Membership.ClusterID == "":
		return bad("Membership.ClusterID", "must not be empty")
	case c.Listener == nil && c.GRPCListen == "":
		return bad("GRPCListen", "must not be empty")
	case c.LoadReportInterval <= 0:
		return bad("LoadReportInterval", "%v must be positive", c.LoadReportInterval)
	case c.ShutdownGossipDelay < 0:
		return bad("ShutdownGossipDelay", "%v must not be negative", c.ShutdownGossipDelay)
	case (c.ServerTLS == nil) != (c.DialTLS == nil):
		return bad("ServerTLS", "set ServerTLS and DialTLS together: mutual TLS needs both sides")
	case c.ServerTLS != nil && c.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert &&
		(c.ServerTLS.ClientAuth != tls.RequireAnyClientCert || c.ServerTLS.VerifyConnection == nil && c.ServerTLS.VerifyPeerCertificate == nil):
		return bad("ServerTLS", "must require and verify client certificates (ClientAuth %v): between silos only mutual TLS keeps a stranger from sending envelopes", c.ServerTLS.ClientAuth)
	}
	if c.Listener == nil {
		if _, _, err := net.SplitHostPort(c.GRPCListen); err != nil {
			return bad("GRPCListen", "%q is not host:port: %v", c.GRPCListen, err)
		}
	}
	return nil
}

// cluster is a silo's membership of a cluster: the view of the other
// silos, the directory, placement and the transport.
type cluster struct {
	s    *local.Runtime
	cfg  ClusterConfig
	log  *zap.Logger
	self string // this silo's member ID
	// grpcAddr is where other silos dial this one.
	grpcAddr string
	mship    membership.Service
	tport    *transport.Transport
	lis      transport.Listener
	net      transport.Network
	dir      *directory.Directory
	placer   *placement.Placer
	// gate admits members once a TLS handshake proves them silos of the
	// cluster's CA; nil without mutual TLS.
	gate *peerGate

	view atomic.Pointer[clusterView]

	// viewMu serialises view changes: membership events, Start and Stop.
	viewMu     sync.Mutex
	members    map[string]membership.Member // the other live members
	selfStatus membership.Status
	active     []string // the last active list given to the directory

	// inflight counts requests from other silos not yet answered and
	// calls forwarded from here not yet answered: Stop waits for both
	// before it leaves.
	inflight local.InflightCount
	// cancels holds what cancels the requests from other silos that
	// their senders may cancel.
	cancels local.CancelTable

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

	closed    atomic.Bool // close began: no retries are armed any more
	closeOnce sync.Once

	loadStop chan struct{}
	loadDone chan struct{}
}

// clusterView is an immutable snapshot of the live silos, for routing.
type clusterView struct {
	// hosts lists, per grain type, the active silos that host it, as
	// placement candidates (this one included when it is active).
	hosts map[string][]placement.Candidate
	// known is every live member and its status, this one included.
	known map[string]membership.Status
	// departed holds the members that left or failed lately.
	departed map[string]bool
}

// maxDeparted bounds the departed members a silo remembers.
const maxDeparted = 4096

// gone reports whether silo left, failed or is shutting down: what the
// directory says lives there is gone or going.
func (v *clusterView) gone(silo string) bool {
	st, live := v.known[silo]
	return v.departed[silo] || live && st == membership.StatusShuttingDown
}

// startCluster joins the cluster. It is called by Start after the pool
// runs; on error, everything it started is stopped again.
func (s *Silo) startCluster(ctx context.Context) (err error) {
	cfg := *s.cfg.Cluster
	cl := &cluster{s: s.rt, cfg: cfg, log: s.rt.Log, members: map[string]membership.Member{}}
	defer func() {
		if err != nil {
			cl.close()
		}
	}()
	tcfg := cfg.Transport
	tcfg.ClusterID = cfg.Membership.ClusterID
	tcfg.Listener, tcfg.Rejections = security.ListenerSilo, s.cfg.Rejections
	if tcfg.Logger == nil {
		tcfg.Logger = s.rt.Log.Named("transport")
	}
	if tcfg.Clock == nil {
		tcfg.Clock = s.rt.Clock
	}

	cl.lis = cfg.Listener
	if cl.lis == nil {
		var opts []grpc.ServerOption
		if cfg.ServerTLS != nil {
			opts = append(opts, grpc.Creds(security.WatchHandshakes(credentials.NewTLS(cfg.ServerTLS), s.cfg.Rejections, security.ListenerSilo, "")))
		}
		gl, err := transport.ListenGRPC(cfg.GRPCListen, tcfg, opts...)
		if err != nil {
			return fmt.Errorf("silo: cluster: listening on %s: %w", cfg.GRPCListen, err)
		}
		cl.lis = gl
	}

	mcfg := cfg.Membership
	if mcfg.Name == "" {
		mcfg.Name = s.cfg.Name
	}
	if mcfg.Logger == nil {
		mcfg.Logger = s.rt.Log.Named("membership")
	}
	if mcfg.Rejections == nil {
		mcfg.Rejections = s.cfg.Rejections
	}
	mcfg.Types = s.rt.HostedTypes()
	if s.gw != nil && mcfg.GatewayAddr == "" {
		mcfg.GatewayAddr = s.gw.addr
	}
	if mcfg.AdminAddr == "" {
		mcfg.AdminAddr = s.cfg.AdminAddr
	}
	if mcfg.GRPCAddr == "" {
		if mcfg.GRPCAddr, err = advertisedAddr(cl.lis.Addr(), mcfg); err != nil {
			return err
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
	if cl.mship, err = newMembership(mcfg, cl.onEvent); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	cl.self = cl.mship.Local().ID
	cl.grpcAddr = mcfg.GRPCAddr

	tcfg.Self = cl.self
	cl.net = cfg.Network
	if cl.net == nil {
		var opts []grpc.DialOption
		if cfg.DialTLS != nil {
			opts = append(opts, grpc.WithTransportCredentials(security.WatchHandshakes(credentials.NewTLS(cfg.DialTLS), s.cfg.Rejections, "", security.ListenerDial)))
		}
		cl.net = transport.NewGRPCNetwork(tcfg, opts...)
	}
	if cl.tport, err = transport.New(tcfg, cl.net, cl); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	if cfg.DialTLS != nil && cfg.Network == nil {
		cl.gate = newPeerGate(cl, cfg.DialTLS, tcfg.DialTimeout, cfg.LoadReportInterval)
	}
	dcfg := cfg.Directory
	dcfg.Logger, dcfg.Clock, dcfg.Lost, dcfg.RetryNeeded = s.rt.Log.Named("directory"), s.rt.Clock, cl.lost, cl.retryRegistrations
	dcfg.Local = s.rt.RegisteredActivations
	if cl.dir, err = directory.New(dcfg, cl.self, cl); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	if cl.placer, err = placement.New(cfg.Placement); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	cl.view.Store(&clusterView{hosts: map[string][]placement.Candidate{}, known: map[string]membership.Status{}})
	s.cl = cl // requests may arrive once the listener serves
	s.rt.Cl = cl
	if s.gw != nil {
		s.gw.cl = cl
	}

	if err := cl.lis.Serve(cl.tport); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	if err := cl.mship.Start(ctx); err != nil {
		return fmt.Errorf("silo: cluster: joining: %w", err)
	}
	// Take the members known now, then become active. Under mutual TLS
	// they are verified first, so that this silo does not serve calls
	// while it takes itself for alone: it would place and register
	// grains that its peers hold.
	known := cl.mship.Members()
	if cl.gate != nil {
		cl.gate.verifyNow(ctx, known)
	}
	cl.viewMu.Lock()
	for _, m := range known {
		if m.ID != cl.self {
			cl.applyLocked(membership.Event{Kind: membership.EventJoined, Member: m})
		}
	}
	cl.viewMu.Unlock()
	if err := cl.mship.Update(func(m *membership.Member) { m.Status = membership.StatusActive }); err != nil {
		return fmt.Errorf("silo: cluster: %w", err)
	}
	cl.viewMu.Lock()
	cl.selfStatus = membership.StatusActive
	cl.refreshLocked()
	cl.viewMu.Unlock()

	cl.loadStop, cl.loadDone = make(chan struct{}), make(chan struct{})
	go cl.reportLoad()
	cl.log.Info("silo joined the cluster", zap.String("member", cl.self), zap.String("grpc", mcfg.GRPCAddr),
		zap.Int("members", len(cl.mship.Members())))
	return nil
}

// ClusterTLS returns ServerTLS and DialTLS for mutual TLS between silos
// from src, which needs a certificate, its key and the cluster's CA. A
// peer is a silo when its certificate chains to the CA and is for both
// server and client use; names are not checked, since silos dial each
// other by the addresses they gossip, IPs as often as not. So a client's
// certificate (client use only) from the same CA cannot pass for a
// silo's; keep the cluster's CA for silos alone all the same.
func ClusterTLS(src *tlsfiles.Source) (server, dial *tls.Config, err error) {
	if !src.HasCert() || !src.HasCA() {
		return nil, nil, &ConfigError{Field: "Cluster.ServerTLS", Reason: "mutual TLS between silos needs a certificate, its key and the cluster's CA"}
	}
	server, err = src.ServerConfig(tlsfiles.MTLS, tlsfiles.ServerOptions{
		RequireUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, nil, err
	}
	return server, src.ClientConfig(tlsfiles.ClientOptions{
		SkipNameCheck: true,
		RequireUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}), nil
}

// advertisedAddr is the gRPC address other silos dial: the listener's,
// with a dialable host when the listener is bound to every interface.
func advertisedAddr(listen string, mcfg membership.Config) (string, error) {
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return "", fmt.Errorf("silo: cluster: listener address %q: %w", listen, err)
	}
	if addr := dialableAddr(listen, mcfg); addr != "" {
		return addr, nil
	}
	return "", &ConfigError{Field: "Cluster.Membership.GRPCAddr",
		Reason: fmt.Sprintf("must be set: the gRPC listener %s is bound to every interface and neither AdvertiseAddr nor BindAddr names a host other silos can dial", listen)}
}

// dialableAddr is listen, the address a listener is bound to, with the
// gossip advertise or bind address of mcfg as its host when it is bound
// to every interface, or "" when none names a dialable host.
func dialableAddr(listen string, mcfg membership.Config) string {
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

// onEvent takes a membership change. The membership's goroutine.
func (cl *cluster) onEvent(ev membership.Event) {
	cl.viewMu.Lock()
	defer cl.viewMu.Unlock()
	if cl.tport == nil || cl.dir == nil {
		return // Start failed before the cluster was up
	}
	cl.applyLocked(ev)
}

// applyLocked applies a change of another member to the transport,
// placement, the routing view and the directory. viewMu held.
func (cl *cluster) applyLocked(ev membership.Event) {
	m := ev.Member
	if m.ID == cl.self {
		return
	}
	if cl.gate != nil && !cl.gate.admitLocked(ev) {
		return
	}
	gone := ev.Kind == membership.EventLeft || ev.Kind == membership.EventFailed
	if gone {
		delete(cl.members, m.ID)
		cl.rememberDepartedLocked(m.ID)
		cl.tport.RemovePeer(m.ID, ev.Kind.String(), ev.Kind == membership.EventLeft)
		cl.placer.Forget(m.ID)
	} else {
		if cl.departed[m.ID] {
			// Taken for dead, yet alive: this silo purged the entries
			// naming it, so it must register its activations again.
			delete(cl.departed, m.ID)
			cl.log.Warn("a silo taken for dead is back; asking it to register its activations again", zap.String("member", m.ID))
			defer cl.healed(m.ID) // once it is a transport peer again
		}
		prev, had := cl.members[m.ID]
		cl.members[m.ID] = m
		cl.tport.SetPeer(m.ID, m.GRPCAddr)
		cl.placer.LoadReported(m.ID, m.Activations)
		if had && prev.Status == membership.StatusActive && m.Status != membership.StatusActive {
			cl.log.Info("silo is shutting down", zap.String("member", m.ID))
		}
	}
	cl.refreshLocked()
	if gone {
		cl.dir.SiloDead(m.ID)
		cl.log.Info("silo left the cluster", zap.String("member", m.ID), zap.Stringer("how", ev.Kind))
	}
}

// rememberDepartedLocked adds id to the departed members. viewMu held.
func (cl *cluster) rememberDepartedLocked(id string) {
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
func (cl *cluster) refreshLocked() {
	v := &clusterView{hosts: map[string][]placement.Candidate{}, known: map[string]membership.Status{}, departed: map[string]bool{}}
	for id := range cl.departed {
		v.departed[id] = true
	}
	var active []string
	add := func(id string, m membership.Member) {
		v.known[id] = m.Status
		if m.Status != membership.StatusActive {
			return
		}
		active = append(active, id)
		for _, typ := range m.Types {
			v.hosts[typ] = append(v.hosts[typ], placement.Candidate{ID: id, Roles: m.Roles, Activations: m.Activations})
		}
	}
	for id, m := range cl.members {
		add(id, m)
	}
	local := cl.mship.Local()
	local.Status = cl.selfStatus
	add(cl.self, local)
	cl.view.Store(v)
	slices.Sort(active)
	if slices.Equal(active, cl.active) {
		return
	}
	cl.active = active
	cl.dir.SetMembers(active, cl.s.RegisteredActivations())
	if rem := cl.s.Rem; rem != nil {
		rem.RingChanged(cl.dir.Ring(), cl.self)
	}
	for id, m := range cl.members {
		if m.Status != membership.StatusActive {
			cl.dir.InvalidateSilo(id)
		}
	}
}

// lost is the directory telling this silo that one of its activations
// lost its entry to another: it deactivates, and the requests it holds go
// to the winner.
func (cl *cluster) lost(id grain.ID, local, winner directory.Entry) {
	if local.Silo != cl.self {
		return
	}
	a := cl.s.ActivationByID(id, local.Activation)
	if a == nil {
		return
	}
	if winner.Silo == cl.self {
		// The winner names an activation of this silo that is gone (this
		// one holds the catalog slot): a stale entry. Drop it and
		// register again.
		cl.dir.Unregister(id, winner)
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
func (cl *cluster) reregister(a *local.ActivationRec) {
	mine := directory.Entry{Silo: cl.self, Activation: a.ActID}
	cl.dir.Register(a.Id, mine, func(winner directory.Entry, err error) {
		switch {
		case err != nil:
			cl.log.Debug("registering again failed", zap.Stringer("grain", a.Id), zap.Error(err))
		case winner != mine && winner.Silo != cl.self:
			cl.lost(a.Id, mine, winner)
		}
	})
}

// retryRegistrations has the directory send again, shortly, the
// registrations it could not deliver: one timer at a time. While rounds
// keep coming back (an owner that still takes this silo for dead answers
// every one), the delay doubles from registrationRetryDelay up to the
// load tick, which retries too; a quiet spell resets it.
func (cl *cluster) retryRegistrations() {
	if cl.closed.Load() || !cl.retryArmed.CompareAndSwap(false, true) {
		return
	}
	now := cl.s.Clock.Now()
	cl.retryMu.Lock()
	d := registrationRetryDelay
	if !cl.retryLast.IsZero() && now.Sub(cl.retryLast) < 4*cl.retryDelay {
		d = min(2*cl.retryDelay, max(cl.cfg.LoadReportInterval, registrationRetryDelay))
	}
	cl.retryDelay, cl.retryLast = d, now
	cl.retryMu.Unlock()
	cl.s.Clock.AfterFunc(d, func() {
		cl.retryArmed.Store(false)
		if !cl.closed.Load() {
			cl.dir.RetryRegistrations()
		}
	})
}

// registrationRetryDelay is how soon registrations that could not be
// delivered are sent again: well within the directory's recovery window.
const registrationRetryDelay = 50 * time.Millisecond

// reportLoad gossips this silo's load when it changed, and has the
// directory send again the registrations it could not deliver.
func (cl *cluster) reportLoad() {
	defer close(cl.loadDone)
	tk := cl.s.Clock.NewTicker(cl.cfg.LoadReportInterval)
	defer tk.Stop()
	var last [2]uint64
	for {
		select {
		case <-cl.loadStop:
			return
		case <-tk.Chan():
		}
		cl.dir.RetryRegistrations()
		cl.healTick()
		now := [2]uint64{uint64(cl.s.Live.Load()), uint64(cl.s.Pool.Stats().QueuedGroups)}
		if now == last {
			continue
		}
		last = now
		if err := cl.mship.Update(func(m *membership.Member) { m.Activations, m.Queued = now[0], now[1] }); err != nil {
			cl.log.Debug("gossiping load failed", zap.Error(err))
		}
	}
}

// beginLeave tells the cluster this silo is shutting down and takes it
// off its own ring, handing its directory ranges over. Stop calls it
// before it deactivates the silo's grains.
func (cl *cluster) beginLeave(ctx context.Context) {
	if err := cl.mship.Update(func(m *membership.Member) { m.Status = membership.StatusShuttingDown }); err != nil {
		cl.log.Warn("announcing shutdown failed", zap.Error(err))
	}
	// Hand the directory ranges over now, not after the delay: the others
	// take this silo off their rings as soon as they hear, and their
	// recovery windows (directory.Config.RecoveryWindow) run from then.
	cl.viewMu.Lock()
	cl.selfStatus = membership.StatusShuttingDown
	cl.refreshLocked()
	cl.viewMu.Unlock()
	if d := cl.cfg.ShutdownGossipDelay; d > 0 {
		tm := time.NewTimer(d) // real time: gossip spreads in real time, whatever the silo's clock
		select {
		case <-tm.C:
		case <-ctx.Done():
		}
		tm.Stop()
	}
}

// finishLeave waits until no request is in flight through this silo,
// leaves the cluster, tells every silo with a stream to this one to send
// nothing more (answering what they sent before they heard), waits for
// those requests too, writes out the last answers and closes the
// streams. Stop calls it once the silo's grains are deactivated.
func (cl *cluster) finishLeave(ctx context.Context) error {
	err := cl.inflight.Drain(ctx, "requests through the cluster")
	if lerr := cl.mship.Leave(ctx); lerr != nil {
		// The others then find this silo failed instead of left, which
		// costs nothing now: its grains and directory ranges are handed
		// over and nothing is in flight. It happens when the other silos
		// stop at the same time and none is left to take the news.
		cl.log.Warn("the cluster did not hear this silo leave; it will find it failed", zap.Error(lerr))
	}
	if gerr := cl.tport.GoAway(ctx); gerr != nil && err == nil {
		err = fmt.Errorf("silo: cluster: waiting for the other silos to stop sending: %w", gerr)
	}
	if err == nil {
		err = cl.inflight.Drain(ctx, "requests through the cluster")
	}
	if serr := cl.tport.Shutdown(ctx); serr != nil && err == nil {
		err = serr
	}
	cl.close()
	return err
}

// close stops everything the cluster runs, without a leave: the other
// silos will find this one failed. Idempotent; any goroutine.
func (cl *cluster) close() {
	cl.closed.Store(true)
	cl.closeOnce.Do(cl.closeNow)
}

func (cl *cluster) closeNow() {
	cl.cancels.CancelAll()
	if cl.gate != nil {
		cl.gate.close()
	}
	if cl.loadStop != nil {
		close(cl.loadStop)
		<-cl.loadDone
	}
	if cl.mship != nil {
		cl.mship.Close()
	}
	if cl.tport != nil {
		cl.tport.Close()
	}
	if cl.lis != nil {
		cl.lis.Stop()
	}
	if g, ok := cl.net.(*transport.GRPCNetwork); ok && cl.cfg.Network == nil {
		g.Close()
	}
}

// ClusterAddrs returns the addresses this silo gossips on and takes
// other silos' streams on, as other silos reach them (a port 0 in the
// configuration shows as the port picked), or "" for a silo alone. Valid
// once Start has returned.
func (s *Silo) ClusterAddrs() (gossip, grpc string) {
	if s.cl == nil {
		return "", ""
	}
	return s.cl.mship.Local().GossipAddr, s.cl.grpcAddr
}

// Member returns this silo's member ID in its cluster, or "" for a silo
// alone.
func (s *Silo) Member() string {
	if s.cl == nil {
		return ""
	}
	return s.cl.self
}

// Self is this silo's member ID.
func (cl *cluster) Self() string { return cl.self }

// Unregister removes a dead activation's directory entry.
func (cl *cluster) Unregister(a *local.ActivationRec) {
	cl.dir.Unregister(a.Id, directory.Entry{Silo: cl.self, Activation: a.ActID})
}
