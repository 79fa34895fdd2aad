package membership

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/security"
	"github.com/hashicorp/memberlist"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Memberlist is a Service that gossips over hashicorp/memberlist (SWIM with
// suspicion, Lifeguard awareness and push/pull anti-entropy).
type Memberlist struct {
	cfg     Config
	log     *zap.Logger
	cluster uint64 // clusterHash(cfg.ClusterID)
	id      string
	onEvent func(Event)

	closingc  chan struct{} // closed when Leave or Close begins: aborts Start
	closeOnce sync.Once

	// lifeMu serialises Start, Leave and Close. ml, mlConfig and q are
	// set by Start under it and never change after; they are read by
	// Update after it sees stateRunning under mu.
	lifeMu   sync.Mutex
	ml       *memberlist.Memberlist
	mlConfig *memberlist.Config
	q        *eventQueue

	// updateMu serialises Update, so metadata goes out in order.
	updateMu sync.Mutex

	// broadcasts queues leave intents for gossip (see leave.go); numNodes
	// is its estimate of the cluster size, len(others)+1, kept apart from
	// mu because the queue asks for it with its own lock held.
	broadcasts *memberlist.TransmitLimitedQueue
	numNodes   atomic.Int64

	// mu guards the fields below. Lock order: memberlist's node lock (held
	// when it calls the delegates), then mu. mu is never held while
	// calling memberlist.
	mu     sync.Mutex
	state  lifeState
	local  Member
	meta   []byte            // encoded local, for the Delegate's NodeMeta
	others map[string]Member // alive members other than local, by ID
	// leaving holds the IDs reported as EventLeft on their leave intent
	// whose memberlist death has not been observed yet: their late alive
	// and dead notifications are not events.
	leaving map[string]bool

	// rc holds the failed members to reach again (reconnect.go).
	rc reconnector
}

type lifeState int

const (
	stateNew lifeState = iota
	stateStarting
	stateRunning
	stateClosed
)

var _ Service = (*Memberlist)(nil)

// New returns a Memberlist for cfg; Start joins the cluster. onEvent
// receives every change of the other members, on one goroutine, in order;
// it may be nil. It must not call Leave or Close.
func New(cfg Config, onEvent func(Event)) (*Memberlist, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Roles = append([]string(nil), cfg.Roles...)
	cfg.Types = append([]string(nil), cfg.Types...)
	cfg.Seeds = append([]string(nil), cfg.Seeds...)
	cfg.SecretKey = append([]byte(nil), cfg.SecretKey...)
	cfg.AcceptedKeys = slices.Clone(cfg.AcceptedKeys)
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.LookupHost == nil {
		cfg.LookupHost = net.DefaultResolver.LookupHost
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	id := newMemberID(cfg.Name)
	m := &Memberlist{
		cfg:      cfg,
		log:      cfg.Logger.With(zap.String("member", id)),
		cluster:  clusterHash(cfg.ClusterID),
		id:       id,
		onEvent:  onEvent,
		closingc: make(chan struct{}),
		local: Member{
			ID:          id,
			Name:        cfg.Name,
			GRPCAddr:    cfg.GRPCAddr,
			GatewayAddr: cfg.GatewayAddr,
			AdminAddr:   cfg.AdminAddr,
			Roles:       cfg.Roles,
			Types:       cfg.Types,
			Status:      StatusJoining,
		},
		others:  make(map[string]Member),
		leaving: make(map[string]bool),
	}
	m.numNodes.Store(1)
	m.broadcasts = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(m.numNodes.Load()) },
		RetransmitMult: cfg.RetransmitMult,
	}
	return m, nil
}

// newMemberID returns name, "-", and a generation: the start time in ms
// and four random characters, base 36. The time is the wall clock's, not
// Config.Clock's: it is part of the ID, which must differ from those of
// the member's earlier runs, and a fake clock may stand still.
func newMemberID(name string) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	var r [4]byte
	for i := range r {
		r[i] = digits[rand.IntN(len(digits))]
	}
	return name + "-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + string(r[:])
}

// Start creates the memberlist node, in StatusJoining, and joins the
// cluster through the seeds, retrying every JoinRetryInterval until one
// answers or ctx ends. With no seeds, or only itself, it founds a cluster.
// It fails, and closes m, if the metadata is too large, the gossip port
// cannot be bound, ctx ends first or Close is called meanwhile. Events may
// be delivered before it returns.
func (m *Memberlist) Start(ctx context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	switch m.state {
	case stateStarting, stateRunning:
		m.mu.Unlock()
		return ErrStarted
	case stateClosed:
		m.mu.Unlock()
		return ErrClosed
	}
	m.state = stateStarting
	meta, err := encodeMeta(&m.local, m.cluster)
	m.meta = meta
	m.mu.Unlock()
	if err == nil {
		err = m.startLocked(ctx)
	}
	if err != nil {
		m.shutdownLocked()
		return err
	}
	m.mu.Lock()
	m.state = stateRunning
	m.mu.Unlock()
	if m.cfg.ReconnectInterval > 0 {
		m.rc.wg.Add(1)
		go m.reconnectLoop()
	}
	return nil
}

// startLocked creates the node and joins. lifeMu held.
func (m *Memberlist) startLocked(ctx context.Context) error {
	mc := m.cfg.memberlistConfig(m.id)
	d := &delegate{m}
	mc.Delegate, mc.Events, mc.Alive, mc.Merge = d, d, d, d
	mc.Logger = log.New(logWriter{m.log, m.cfg.Rejections}, "", 0)
	m.q = newEventQueue(m.onEvent)
	m.q.start()
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("membership: start: %w", err)
	}
	m.ml, m.mlConfig = ml, mc
	self := ml.LocalNode()
	m.mu.Lock()
	m.local.GossipAddr = self.Address()
	m.mu.Unlock()
	m.log.Debug("membership: node created", zap.String("gossip", self.Address()))
	return m.join(ctx)
}

// join retries joining until a seed answers. lifeMu held.
func (m *Memberlist) join(ctx context.Context) error {
	for {
		seeds, err := m.seedAddrs(ctx)
		if err == nil && len(seeds) == 0 {
			m.log.Info("membership: no seeds but itself: founding the cluster")
			return nil
		}
		if len(seeds) > 0 {
			n, jerr := m.ml.Join(seeds)
			if n > 0 {
				m.log.Info("membership: joined", zap.Int("seeds_answered", n), zap.Strings("seeds", seeds))
				return nil
			}
			err = errors.Join(err, jerr)
		}
		if reason := gossipReason(fmt.Sprint(err)); reason != "" {
			// A seed that answers under another key or cluster ID will
			// never let this silo in: say so, not only at debug level.
			m.cfg.Rejections.Reject(security.ListenerGossip, reason, strings.Join(seeds, ","), fmt.Errorf("joining through the seeds: %w", err))
		}
		m.log.Debug("membership: join failed, retrying", zap.Error(err))
		if werr := m.waitRetry(ctx); werr != nil {
			if errors.Is(werr, ErrClosed) {
				return werr
			}
			return fmt.Errorf("membership: join: %w (last attempt: %v)", werr, err)
		}
	}
}

// waitRetry waits JoinRetryInterval, or returns early with ctx's error or
// ErrClosed.
func (m *Memberlist) waitRetry(ctx context.Context) error {
	t := m.cfg.Clock.NewTimer(m.cfg.JoinRetryInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closingc:
		return ErrClosed
	case <-t.Chan():
		return nil
	}
}

// seedAddrs resolves Seeds and SeedDNS to ip:port, without this node's
// own addresses. It returns the addresses it resolved and the errors of
// those it could not.
func (m *Memberlist) seedAddrs(ctx context.Context) ([]string, error) {
	self := m.selfAddrs()
	seen := make(map[string]bool)
	var out []string
	var errs []error
	add := func(host string, port string) {
		ips := []string{host}
		if net.ParseIP(host) == nil {
			var err error
			if ips, err = m.cfg.LookupHost(ctx, host); err != nil {
				errs = append(errs, fmt.Errorf("resolve %s: %w", host, err))
				return
			}
		}
		for _, ip := range ips {
			a := net.JoinHostPort(ip, port)
			if !self[a] && !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	for _, s := range m.cfg.Seeds {
		host, port, _ := net.SplitHostPort(s) // validated
		add(host, port)
	}
	if m.cfg.SeedDNS != "" {
		port := m.cfg.SeedPort
		if port == 0 {
			port = m.cfg.BindPort
		}
		add(m.cfg.SeedDNS, strconv.Itoa(port))
	}
	return out, errors.Join(errs...)
}

// selfAddrs is the set of ip:port seeds that would reach this node: its
// advertised address, its bind address, and loopback when bound to all
// interfaces. lifeMu held, after Create.
func (m *Memberlist) selfAddrs() map[string]bool {
	self := m.ml.LocalNode()
	bound := strconv.Itoa(m.mlConfig.BindPort) // memberlist stores a picked port here
	set := map[string]bool{self.Address(): true, net.JoinHostPort(m.cfg.BindAddr, bound): true}
	if ip := net.ParseIP(m.cfg.BindAddr); ip.IsUnspecified() {
		set[net.JoinHostPort("127.0.0.1", bound)] = true
		set[net.JoinHostPort("::1", bound)] = true
	}
	return set
}

// Local returns the local member; its GossipAddr is set by Start. Any
// goroutine.
func (m *Memberlist) Local() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.local.clone()
}

// Members returns the alive members, the local one included, sorted by
// ID. After Leave or Close it returns the last view. Any goroutine.
func (m *Memberlist) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedMembers(m.local, m.others)
}

// Update applies fn to a copy of the local member and gossips it. It fails
// with ErrImmutable if fn changes what identifies the member, and with
// ErrMetaTooLarge if the result does not fit; then nothing changes. It
// returns once the update has gone out to one member or after two
// GossipIntervals; either way gossip carries it on. Any goroutine.
func (m *Memberlist) Update(fn func(*Member)) error {
	m.updateMu.Lock()
	defer m.updateMu.Unlock()
	m.mu.Lock()
	switch m.state {
	case stateNew, stateStarting:
		m.mu.Unlock()
		return ErrNotStarted
	case stateClosed:
		m.mu.Unlock()
		return ErrClosed
	}
	next, err := applyUpdate(m.local, fn)
	var meta []byte
	if err == nil {
		meta, err = encodeMeta(&next, m.cluster)
	}
	if err != nil {
		m.mu.Unlock()
		return err
	}
	m.local, m.meta = next, meta
	m.mu.Unlock()
	if err := m.ml.UpdateNode(2 * m.cfg.GossipInterval); err != nil {
		m.log.Debug("membership: update not yet sent", zap.Error(err))
	}
	return nil
}

// Leave announces the leave, keeps gossiping for LeavePropagateDelay so
// every member sees EventLeft, then shuts down like Close. ctx bounds the
// whole (without a deadline, the announcement waits up to TCPTimeout).
// Before Start it just closes. Any goroutine but onEvent's.
func (m *Memberlist) Leave(ctx context.Context) error {
	m.beginClose()
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.mu.Lock()
	running := m.state == stateRunning
	m.mu.Unlock()
	var err error
	if running {
		err = m.announceLeaveLocked(ctx)
	}
	m.shutdownLocked()
	return err
}

// Close shuts down without a leave: the other members detect a failure
// within the detection time of the Config. It waits for the event
// goroutine and memberlist's transport; memberlist's own goroutines, which
// its Shutdown signals but does not wait for, end within about a
// ProbeInterval (a probe in flight) or a TCPTimeout (a stream being
// served), and never call onEvent again. If Start is still joining, it
// returns ErrClosed, after the join attempt in flight (at most TCPTimeout
// per seed), and waits for a join in flight to a failed member's
// address (reconnect.go), which a silent partition can hold for up to
// TCPTimeout. Idempotent; any goroutine but onEvent's.
func (m *Memberlist) Close() error {
	m.beginClose()
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	m.shutdownLocked()
	return nil
}

func (m *Memberlist) beginClose() { m.closeOnce.Do(func() { close(m.closingc) }) }

// shutdownLocked stops memberlist and the event goroutine. lifeMu held.
func (m *Memberlist) shutdownLocked() {
	m.mu.Lock()
	m.state = stateClosed
	m.mu.Unlock()
	if m.ml != nil {
		if err := m.ml.Shutdown(); err != nil {
			m.log.Debug("membership: shutdown", zap.Error(err))
		}
	}
	m.rc.wg.Wait() // closingc is closed: the loop ends, and joins in flight fail or finish
	if m.q != nil {
		m.q.stop()
	}
}

// delegate implements memberlist's Delegate, EventDelegate, AliveDelegate
// and MergeDelegate for m. memberlist calls them on its own goroutines,
// the event and alive ones with its node lock held: they must not block
// and must not call memberlist.
type delegate struct{ m *Memberlist }

// NodeMeta returns the local metadata, checked to fit at Start and Update.
func (d *delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if len(d.m.meta) > limit {
		d.m.log.Error("membership: metadata over memberlist's limit", zap.Int("bytes", len(d.m.meta)), zap.Int("limit", limit))
		return nil
	}
	return append([]byte(nil), d.m.meta...)
}

// NotifyMsg receives the gossiped leave intents.
func (d *delegate) NotifyMsg(b []byte) { d.m.observeLeaveIntent(b) }

// GetBroadcasts hands memberlist the queued leave intents.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.broadcasts.GetBroadcasts(overhead, limit)
}

func (d *delegate) LocalState(join bool) []byte            { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyAlive refuses a node whose metadata is malformed or belongs to
// another cluster, so it never becomes a peer.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if n.Name == d.m.id {
		return nil
	}
	if _, err := decodeMeta(n.Name, n.Meta, d.m.cluster); err != nil {
		d.m.log.Warn("membership: refusing node", zap.Error(err))
		return err
	}
	return nil
}

// NotifyMerge refuses a join whose remote state holds a node with
// malformed or foreign metadata: the remote is not a member of this
// cluster in good standing.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if n.Name == d.m.id {
			continue
		}
		if _, err := decodeMeta(n.Name, n.Meta, d.m.cluster); err != nil {
			d.m.log.Warn("membership: refusing merge", zap.Error(err))
			return err
		}
	}
	return nil
}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.m.observeAlive(n, EventJoined) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.m.observeAlive(n, EventUpdated) }

// NotifyLeave fires for a graceful leave and for a failure alike, and in
// memberlist v0.7.0 the Node it passes cannot tell them apart: deadNode
// sets the State of its nodeState wrapper, which shadows Node.State, so
// Node.State stays StateAlive. A graceful leave is therefore announced by
// a leave intent first (leave.go) and reported when that arrives; a node
// that dies without one failed.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.m.observeGone(n.Name, EventFailed) }

// observeAlive records a joined or updated node and queues its event. A
// node whose metadata does not decode is logged and ignored. memberlist's
// goroutines, node lock held.
func (m *Memberlist) observeAlive(n *memberlist.Node, kind EventKind) {
	if n.Name == m.id {
		return
	}
	mem, err := decodeMeta(n.Name, n.Meta, m.cluster)
	if err != nil {
		m.log.Warn("membership: ignoring bad member", zap.Error(err))
		return
	}
	mem.GossipAddr = n.Address()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == stateClosed || m.leaving[mem.ID] {
		return
	}
	if _, known := m.others[mem.ID]; !known {
		kind = EventJoined
		m.rc.forget(mem.ID)
	}
	m.others[mem.ID] = mem
	m.numNodes.Store(int64(len(m.others) + 1))
	m.q.push(Event{Kind: kind, Member: mem.clone()})
}

// observeGone removes a node that left or failed and queues its event;
// for a node already reported on its leave intent it only forgets the
// intent. Any goroutine (memberlist's with its node lock held).
func (m *Memberlist) observeGone(id string, kind EventKind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaving[id] {
		delete(m.leaving, id)
		return
	}
	addr := m.others[id].GossipAddr
	if m.removeLocked(id, kind) && kind == EventFailed {
		m.rc.failed(id, addr, m.cfg.Clock.Now(), m.cfg.ReconnectInterval)
	}
}

// removeLocked forgets the alive member id and queues kind for it,
// reporting whether it was known. mu held.
func (m *Memberlist) removeLocked(id string, kind EventKind) bool {
	mem, known := m.others[id]
	if !known || m.state == stateClosed {
		return false
	}
	delete(m.others, id)
	m.numNodes.Store(int64(len(m.others) + 1))
	mem.Status = StatusDead
	m.q.push(Event{Kind: kind, Member: mem})
	return true
}

// logWriter routes memberlist's log lines, "[LEVEL] memberlist: text",
// into zap at debug level with the level as a field. Lines that report a
// refusal (gossip under another key, from another cluster, or that does
// not decode) are also counted and warned of through Rejections.
type logWriter struct {
	log *zap.Logger
	rej *security.Rejections
}

func (w logWriter) Write(p []byte) (int, error) {
	debug := w.log.Core().Enabled(zap.DebugLevel)
	if !debug && w.rej == nil {
		return len(p), nil
	}
	s := strings.TrimRight(string(p), "\r\n")
	level := ""
	if strings.HasPrefix(s, "[") {
		if i := strings.IndexByte(s, ']'); i > 0 {
			level, s = s[1:i], strings.TrimSpace(s[i+1:])
		}
	}
	s = strings.TrimPrefix(s, "memberlist: ")
	if w.rej != nil {
		if reason := gossipReason(s); reason != "" {
			w.rej.Reject(security.ListenerGossip, reason, fromAddr(s), errors.New(s))
		}
	}
	if debug {
		w.log.Debug("memberlist: "+s, zap.String("memberlist_level", level))
	}
	return len(p), nil
}

// gossipReason classifies a memberlist error line or join error as a
// refusal, or returns "" for one that is not.
func gossipReason(s string) string {
	switch {
	case strings.Contains(s, "decrypt"), strings.Contains(s, "Decrypt"):
		return security.ReasonGossipDecrypt
	case strings.Contains(s, "unacceptable label"), strings.Contains(s, "label header"):
		return security.ReasonGossipCluster
	case strings.Contains(s, "Failed to decode"), strings.Contains(s, "invalid msgType"),
		strings.Contains(s, "not supported"), strings.Contains(s, "missing message type"),
		strings.Contains(s, "invalid checksum"):
		return security.ReasonMalformedFrame
	}
	return ""
}

// fromAddr picks the remote address out of a memberlist line, which ends
// "from=ADDR".
func fromAddr(s string) string {
	i := strings.LastIndex(s, "from=")
	if i < 0 {
		return ""
	}
	addr := s[i+len("from="):]
	if j := strings.IndexAny(addr, " )"); j >= 0 {
		addr = addr[:j]
	}
	return addr
}
