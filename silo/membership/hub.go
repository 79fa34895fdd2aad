package membership

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Hub is an in-memory cluster for tests in any package: its members see
// each other at once, without sockets or timers, and the test decides
// when one fails (Kill), which cannot reach which (Partition, Heal) and
// whose events are delayed (Hold, Release). Events are delivered on a
// goroutine per member, in order, like Memberlist's; a change made
// through the Hub is queued to every member it concerns before the method
// returns, so a test can wait for the events without sleeping.
//
// Members with different ClusterIDs share a Hub without seeing each
// other, as memberlist's label keeps them apart.
type Hub struct {
	// mu guards the Hub and every HubMember's state, local, view and
	// held. Events are pushed with it held, so each member's queue
	// receives them in the order the Hub made the changes. Never held
	// while waiting for a delivery goroutine.
	mu      sync.Mutex
	all     map[string]*HubMember // every member made by Member, by ID
	members map[string]*HubMember // started and not gone, by ID
	cut     map[[2]string]bool    // unreachable pairs of IDs, lower first
	seq     int                   // for IDs and gossip addresses
}

// NewHub returns an empty Hub.
func NewHub() *Hub {
	return &Hub{
		all:     make(map[string]*HubMember),
		members: make(map[string]*HubMember),
		cut:     make(map[[2]string]bool),
	}
}

// HubMember is a member of a Hub; it implements Service.
type HubMember struct {
	hub     *Hub
	cluster string
	q       *eventQueue

	// hub.mu held for all of these.
	state lifeState
	local Member
	view  map[string]Member // the others it sees, by ID
}

var _ Service = (*HubMember)(nil)

// Member returns a new member of h, not yet started. Only cfg's Name,
// ClusterID, GRPCAddr, GatewayAddr, AdminAddr, Roles and Types are used;
// Start checks that Name is set and that the metadata would fit
// memberlist's limit. Its ID, Name
// plus "-" and a sequence number, is fixed now, so a test can Partition
// or Hold it before Start. onEvent may be nil.
func (h *Hub) Member(cfg Config, onEvent func(Event)) *HubMember {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	m := &HubMember{
		hub:     h,
		cluster: cfg.ClusterID,
		q:       newEventQueue(onEvent),
		local: Member{
			ID:          cfg.Name + "-" + strconv.Itoa(h.seq),
			Name:        cfg.Name,
			GossipAddr:  "hub:" + strconv.Itoa(h.seq),
			GRPCAddr:    cfg.GRPCAddr,
			GatewayAddr: cfg.GatewayAddr,
			AdminAddr:   cfg.AdminAddr,
			Roles:       slices.Clone(cfg.Roles),
			Types:       slices.Clone(cfg.Types),
			Status:      StatusJoining,
		},
		view: make(map[string]Member),
	}
	h.all[m.local.ID] = m
	return m
}

// Start joins the Hub's cluster: every reachable member of the same
// ClusterID gets EventJoined for m, and m gets one for each of them.
func (m *HubMember) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("membership: join: %w", err)
	}
	h := m.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m.state {
	case stateStarting, stateRunning:
		return ErrStarted
	case stateClosed:
		return ErrClosed
	}
	if m.local.Name == "" {
		m.state = stateClosed
		return &ConfigError{Field: "Name", Reason: "must not be empty"}
	}
	if _, err := encodeMeta(&m.local, clusterHash(m.cluster)); err != nil {
		m.state = stateClosed
		return err
	}
	m.state = stateRunning
	m.q.start()
	for _, id := range h.sortedIDsLocked() {
		if o := h.members[id]; o.cluster == m.cluster && !h.cut[pair(m.local.ID, id)] {
			h.connectLocked(m, o)
		}
	}
	h.members[m.local.ID] = m
	return nil
}

// Local returns the local member. Any goroutine.
func (m *HubMember) Local() Member {
	m.hub.mu.Lock()
	defer m.hub.mu.Unlock()
	return m.local.clone()
}

// Members returns the members m sees, itself included, sorted by ID. Any
// goroutine.
func (m *HubMember) Members() []Member {
	m.hub.mu.Lock()
	defer m.hub.mu.Unlock()
	return sortedMembers(m.local, m.view)
}

// Update changes the local member as Memberlist.Update does, and queues
// EventUpdated to every member that sees m.
func (m *HubMember) Update(fn func(*Member)) error {
	h := m.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m.state {
	case stateNew, stateStarting:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	next, err := applyUpdate(m.local, fn)
	if err == nil {
		_, err = encodeMeta(&next, clusterHash(m.cluster))
	}
	if err != nil {
		return err
	}
	m.local = next
	for _, id := range h.sortedIDsLocked() {
		if o := h.members[id]; o != m {
			if _, sees := o.view[m.local.ID]; sees {
				o.view[m.local.ID] = next.clone()
				o.q.push(Event{Kind: EventUpdated, Member: next.clone()})
			}
		}
	}
	return nil
}

// Leave departs: every member that sees m gets EventLeft. Then it stops
// m's delivery goroutine and waits for it.
func (m *HubMember) Leave(ctx context.Context) error {
	m.depart(EventLeft)
	return nil
}

// Close departs without a leave: every member that sees m gets
// EventFailed. Then it stops m's delivery goroutine and waits for it.
// Idempotent.
func (m *HubMember) Close() error {
	m.depart(EventFailed)
	return nil
}

func (m *HubMember) depart(kind EventKind) {
	h := m.hub
	h.mu.Lock()
	if m.state == stateRunning {
		h.removeLocked(m, kind)
	}
	m.state = stateClosed
	h.mu.Unlock()
	m.q.stop()
}

// Kill makes the member id fail as a killed process does: every member
// that sees it gets EventFailed, queued before Kill returns, and it gets
// no further events (its pending ones are dropped). Its own Update then
// fails with ErrClosed; its owner still calls Close to stop its goroutine.
// Unknown or gone IDs are ignored.
func (h *Hub) Kill(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.members[id]
	if m == nil {
		return
	}
	h.removeLocked(m, EventFailed)
	m.state = stateClosed
	m.q.discard()
}

// Partition cuts every member of a off from every member of b, both ways:
// each sees the other side fail (EventFailed). IDs may name members not yet
// started; they start cut off. Members within one side are unaffected.
func (h *Hub) Partition(a, b []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			if x == y {
				continue
			}
			h.cut[pair(x, y)] = true
			mx, my := h.members[x], h.members[y]
			if mx == nil || my == nil {
				continue
			}
			if _, sees := mx.view[y]; sees {
				h.disconnectLocked(mx, my)
			}
		}
	}
}

// Heal removes every cut: members of the same cluster that were cut off
// see each other join again (EventJoined, with current metadata).
func (h *Hub) Heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	pairs := make([][2]string, 0, len(h.cut))
	for p := range h.cut {
		pairs = append(pairs, p)
	}
	slices.SortFunc(pairs, func(p, q [2]string) int {
		if c := strings.Compare(p[0], q[0]); c != 0 {
			return c
		}
		return strings.Compare(p[1], q[1])
	})
	clear(h.cut)
	for _, p := range pairs {
		a, b := h.members[p[0]], h.members[p[1]]
		if a == nil || b == nil || a.cluster != b.cluster {
			continue
		}
		if _, sees := a.view[b.local.ID]; !sees {
			h.connectLocked(a, b)
		}
	}
}

// Hold delays the events of member id: they queue up until Release. Any
// goroutine; IDs of members not yet started are fine.
func (h *Hub) Hold(id string) {
	if m := h.lookup(id); m != nil {
		m.q.hold()
	}
}

// Release delivers the events held for member id, in order, and resumes.
func (h *Hub) Release(id string) {
	if m := h.lookup(id); m != nil {
		m.q.release()
	}
}

// lookup finds a member by ID, started or not.
func (h *Hub) lookup(id string) *HubMember {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.all[id]
}

// connectLocked makes a and b see each other. h.mu held.
func (h *Hub) connectLocked(a, b *HubMember) {
	a.view[b.local.ID] = b.local.clone()
	a.q.push(Event{Kind: EventJoined, Member: b.local.clone()})
	b.view[a.local.ID] = a.local.clone()
	b.q.push(Event{Kind: EventJoined, Member: a.local.clone()})
}

// disconnectLocked makes a and b see each other fail. h.mu held.
func (h *Hub) disconnectLocked(a, b *HubMember) {
	h.dropLocked(a, b.local.ID, EventFailed)
	h.dropLocked(b, a.local.ID, EventFailed)
}

// dropLocked removes id from o's view and queues kind. h.mu held.
func (h *Hub) dropLocked(o *HubMember, id string, kind EventKind) {
	mem, sees := o.view[id]
	if !sees {
		return
	}
	delete(o.view, id)
	mem.Status = StatusDead
	o.q.push(Event{Kind: kind, Member: mem})
}

// removeLocked takes m out of the Hub; whoever saw it gets kind. h.mu held.
func (h *Hub) removeLocked(m *HubMember, kind EventKind) {
	delete(h.members, m.local.ID)
	for _, id := range h.sortedIDsLocked() {
		h.dropLocked(h.members[id], m.local.ID, kind)
	}
	clear(m.view)
}

// sortedIDsLocked returns the started members' IDs in order, so events
// go out deterministically. h.mu held.
func (h *Hub) sortedIDsLocked() []string {
	ids := make([]string, 0, len(h.members))
	for id := range h.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// pair returns the unordered pair {a, b}, lower first.
func pair(a, b string) [2]string {
	if b < a {
		a, b = b, a
	}
	return [2]string{a, b}
}
