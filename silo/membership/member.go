package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/granaryio/granary/internal/hashmix"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

var (
	// ErrNotStarted is returned by Update before Start has succeeded.
	ErrNotStarted = errors.New("membership: not started")
	// ErrStarted is returned by a second call to Start.
	ErrStarted = errors.New("membership: already started")
	// ErrClosed is returned by Start and Update after Leave or Close (or
	// after Start failed, which closes the Service).
	ErrClosed = errors.New("membership: closed")
	// ErrMetaTooLarge is wrapped by the error Start or Update returns when
	// the encoded metadata does not fit memberlist.MetaMaxSize.
	ErrMetaTooLarge = errors.New("membership: node metadata too large")
	// ErrImmutable is wrapped by the error Update returns when its function
	// changes a field that identifies the member (ID, Name, GossipAddr,
	// GRPCAddr, GatewayAddr, AdminAddr) or sets StatusDead, which only the membership layer reports.
	ErrImmutable = errors.New("membership: field may not change")
)

// Service is the seam the silo uses to take part in a cluster. *Memberlist
// (gossip over hashicorp/memberlist) and *HubMember (in memory, for tests)
// implement it. All methods may be called from any goroutine except the
// one running onEvent, which must not call Leave or Close (they wait for
// it).
type Service interface {
	// Start joins the cluster through the configured seeds, or founds a
	// new one when there are none, with the local member in StatusJoining.
	// It may be called once; if it fails, the Service is closed.
	Start(ctx context.Context) error
	// Local returns the local member as last set by Start or Update.
	Local() Member
	// Members returns the alive members (neither failed nor left), the
	// local one included, sorted by ID.
	Members() []Member
	// Update applies fn to a copy of the local member and gossips the
	// result. fn may change Status, Roles, Types, Activations and Queued.
	Update(fn func(*Member)) error
	// Leave announces a graceful leave, so that the others see EventLeft,
	// then shuts down like Close.
	Leave(ctx context.Context) error
	// Close shuts down without announcing a leave: the others detect a
	// failure. It waits for the goroutines the Service owns, and no
	// onEvent call happens after it returns. Idempotent.
	Close() error
}

// Status is a silo's place in its life. The silo owns the transitions
// Joining -> Active -> ShuttingDown (through Update); the membership layer
// alone reports Dead, on the Member of EventLeft and EventFailed.
type Status int

const (
	// StatusJoining: started, not yet serving. The zero value, so that a
	// Member nobody filled in is never a placement target.
	StatusJoining Status = iota
	// StatusActive: serving.
	StatusActive
	// StatusShuttingDown: handing its grains and directory ranges over.
	StatusShuttingDown
	// StatusDead: failed or left. Never gossiped.
	StatusDead
)

func (s Status) String() string {
	switch s {
	case StatusJoining:
		return "joining"
	case StatusActive:
		return "active"
	case StatusShuttingDown:
		return "shutting-down"
	case StatusDead:
		return "dead"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Proto returns the wire form of s.
func (s Status) Proto() granaryv1.SiloStatus {
	switch s {
	case StatusJoining:
		return granaryv1.SiloStatus_SILO_STATUS_JOINING
	case StatusActive:
		return granaryv1.SiloStatus_SILO_STATUS_ACTIVE
	case StatusShuttingDown:
		return granaryv1.SiloStatus_SILO_STATUS_SHUTTING_DOWN
	case StatusDead:
		return granaryv1.SiloStatus_SILO_STATUS_DEAD
	}
	return granaryv1.SiloStatus_SILO_STATUS_UNSPECIFIED
}

// StatusFromProto converts the wire form; UNSPECIFIED and unknown values
// are an error.
func StatusFromProto(p granaryv1.SiloStatus) (Status, error) {
	switch p {
	case granaryv1.SiloStatus_SILO_STATUS_JOINING:
		return StatusJoining, nil
	case granaryv1.SiloStatus_SILO_STATUS_ACTIVE:
		return StatusActive, nil
	case granaryv1.SiloStatus_SILO_STATUS_SHUTTING_DOWN:
		return StatusShuttingDown, nil
	case granaryv1.SiloStatus_SILO_STATUS_DEAD:
		return StatusDead, nil
	}
	return 0, fmt.Errorf("membership: unknown silo status %v", p)
}

// Member is one silo as the cluster sees it.
type Member struct {
	// ID is the memberlist node name: Name, "-", and a generation unique
	// to this process start, so a restarted silo is a new member.
	ID         string
	Name       string
	GossipAddr string // host:port
	GRPCAddr   string // host:port of the silo's gRPC server
	// GatewayAddr is where the silo's gateway listens for external
	// clients, host:port, or "" when it serves none.
	GatewayAddr string
	// AdminAddr is where the silo's admin HTTP server listens, host:port,
	// or "" when it serves none.
	AdminAddr string
	Roles     []string
	Types     []string // grain types hosted
	Status    Status
	// Load, as last gossiped: activations in the catalog and turns queued.
	Activations, Queued uint64
}

// Hosts reports whether m hosts grainType.
func (m Member) Hosts(grainType string) bool { return slices.Contains(m.Types, grainType) }

// HasRole reports whether m has role r.
func (m Member) HasRole(r string) bool { return slices.Contains(m.Roles, r) }

// clone returns m with its own slices, so callers cannot alias the
// Service's copy.
func (m Member) clone() Member {
	m.Roles = slices.Clone(m.Roles)
	m.Types = slices.Clone(m.Types)
	return m
}

// EventKind says what happened to a member.
type EventKind int

const (
	// EventJoined: a member became alive (new, or back after a partition).
	EventJoined EventKind = iota
	// EventUpdated: a member gossiped new metadata (status, load, types).
	EventUpdated
	// EventLeft: a member left gracefully (Leave).
	EventLeft
	// EventFailed: a member was declared dead by failure detection.
	EventFailed
)

func (k EventKind) String() string {
	switch k {
	case EventJoined:
		return "joined"
	case EventUpdated:
		return "updated"
	case EventLeft:
		return "left"
	case EventFailed:
		return "failed"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one change of another member. For EventLeft and EventFailed,
// Member is its last known state with Status set to StatusDead.
type Event struct {
	Kind   EventKind
	Member Member
}

func (e Event) String() string { return e.Kind.String() + " " + e.Member.ID }

// clusterHash is the 64-bit FNV-1a of the cluster ID: ten bytes of
// metadata instead of up to 257.
func clusterHash(clusterID string) uint64 {
	return hashmix.FNV1a(clusterID)
}

// encodeMeta encodes m's gossiped fields and the cluster hash. It fails
// with ErrMetaTooLarge, naming what takes the room, when the result does
// not fit memberlist.MetaMaxSize.
func encodeMeta(m *Member, cluster uint64) ([]byte, error) {
	pb := &granaryv1.NodeMeta{
		Name:           m.Name,
		GrpcAddress:    m.GRPCAddr,
		GatewayAddress: m.GatewayAddr,
		AdminAddress:   m.AdminAddr,
		Roles:          m.Roles,
		GrainTypes:     m.Types,
		Status:         m.Status.Proto(),
		Activations:    m.Activations,
		Queued:         m.Queued,
		ClusterHash:    cluster,
	}
	b, err := proto.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("membership: encode metadata: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, over memberlist's limit of %d: %d grain types take %d bytes and %d roles %d (name %d, addresses %d); host fewer or shorter grain types or roles",
			ErrMetaTooLarge, len(b), memberlist.MetaMaxSize,
			len(m.Types), stringsSize(m.Types), len(m.Roles), stringsSize(m.Roles), len(m.Name), len(m.GRPCAddr)+len(m.GatewayAddr)+len(m.AdminAddr))
	}
	return b, nil
}

// stringsSize is the encoded size of a repeated string field.
func stringsSize(ss []string) int {
	n := 0
	for _, s := range ss {
		n += 1 + protowire.SizeBytes(len(s))
	}
	return n
}

// decodeMeta decodes the metadata of the memberlist node id and checks it:
// it must parse, belong to the cluster, name the node (id is the name plus
// "-" and a generation), carry a gRPC address and a status a silo gossips.
// Anything else is a bad member, which the caller logs and ignores.
func decodeMeta(id string, meta []byte, cluster uint64) (Member, error) {
	var pb granaryv1.NodeMeta
	if err := proto.Unmarshal(meta, &pb); err != nil {
		return Member{}, fmt.Errorf("membership: node %q: malformed metadata: %w", id, err)
	}
	switch got := pb.GetClusterHash(); {
	case got == 0:
		return Member{}, fmt.Errorf("membership: node %q: metadata carries no cluster", id)
	case got != cluster:
		return Member{}, fmt.Errorf("membership: node %q: belongs to another cluster", id)
	case pb.GetName() == "" || !strings.HasPrefix(id, pb.GetName()+"-"):
		return Member{}, fmt.Errorf("membership: node %q: metadata names %q", id, pb.GetName())
	case pb.GetGrpcAddress() == "":
		return Member{}, fmt.Errorf("membership: node %q: metadata has no gRPC address", id)
	}
	st, err := StatusFromProto(pb.GetStatus())
	if err != nil || st == StatusDead {
		return Member{}, fmt.Errorf("membership: node %q: gossips status %v", id, pb.GetStatus())
	}
	return Member{
		ID:          id,
		Name:        pb.GetName(),
		GRPCAddr:    pb.GetGrpcAddress(),
		GatewayAddr: pb.GetGatewayAddress(),
		AdminAddr:   pb.GetAdminAddress(),
		Roles:       pb.GetRoles(),
		Types:       pb.GetGrainTypes(),
		Status:      st,
		Activations: pb.GetActivations(),
		Queued:      pb.GetQueued(),
	}, nil
}

// applyUpdate runs fn on a copy of cur and checks the result: the fields
// that identify a member stay, and Dead is not a status a silo gossips.
func applyUpdate(cur Member, fn func(*Member)) (Member, error) {
	next := cur.clone()
	fn(&next)
	switch {
	case next.ID != cur.ID:
		return cur, fmt.Errorf("%w: ID", ErrImmutable)
	case next.Name != cur.Name:
		return cur, fmt.Errorf("%w: Name", ErrImmutable)
	case next.GossipAddr != cur.GossipAddr:
		return cur, fmt.Errorf("%w: GossipAddr", ErrImmutable)
	case next.GRPCAddr != cur.GRPCAddr:
		return cur, fmt.Errorf("%w: GRPCAddr", ErrImmutable)
	case next.GatewayAddr != cur.GatewayAddr:
		return cur, fmt.Errorf("%w: GatewayAddr", ErrImmutable)
	case next.AdminAddr != cur.AdminAddr:
		return cur, fmt.Errorf("%w: AdminAddr", ErrImmutable)
	case next.Status == StatusDead:
		return cur, fmt.Errorf("%w: Status may not be set to dead", ErrImmutable)
	case next.Status < StatusJoining || next.Status > StatusDead:
		return cur, fmt.Errorf("membership: update: unknown %v", next.Status)
	}
	return next.clone(), nil
}

// sortedMembers returns self and the others sorted by ID, each cloned.
func sortedMembers(self Member, others map[string]Member) []Member {
	out := make([]Member, 0, len(others)+1)
	out = append(out, self.clone())
	for _, m := range others {
		out = append(out, m.clone())
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// eventQueue delivers events to onEvent on one goroutine, in the order
// they were pushed. push never blocks, so memberlist's goroutines (which
// call the event delegate with their node lock held) never wait on the
// silo. The queue is unbounded: membership changes are few.
type eventQueue struct {
	onEvent func(Event)
	wakec   chan struct{} // capacity 1: "there may be events"
	stopc   chan struct{} // closed by stop
	done    sync.WaitGroup

	mu      sync.Mutex
	pending []Event // mu held
	held    bool    // mu held: delivery paused (Hub.Hold)
	stopped bool    // mu held
}

// newEventQueue returns a queue for onEvent (nil discards); start starts
// its delivery goroutine.
func newEventQueue(onEvent func(Event)) *eventQueue {
	if onEvent == nil {
		onEvent = func(Event) {}
	}
	return &eventQueue{onEvent: onEvent, wakec: make(chan struct{}, 1), stopc: make(chan struct{})}
}

// start starts the delivery goroutine. Called once, by the owner, before
// stop.
func (q *eventQueue) start() {
	q.done.Add(1)
	go q.run()
}

// push queues e. Any goroutine; never blocks; a no-op after stop.
func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, e)
	q.mu.Unlock()
	q.wake()
}

func (q *eventQueue) wake() {
	select {
	case q.wakec <- struct{}{}:
	default:
	}
}

// hold pauses delivery (events queue up); release resumes it.
func (q *eventQueue) hold() { q.mu.Lock(); q.held = true; q.mu.Unlock() }
func (q *eventQueue) release() {
	q.mu.Lock()
	q.held = false
	q.mu.Unlock()
	q.wake()
}

// discard drops the pending events, without waiting. Any goroutine.
func (q *eventQueue) discard() {
	q.mu.Lock()
	clear(q.pending)
	q.pending = q.pending[:0]
	q.mu.Unlock()
}

// stop discards pending events and waits for the delivery goroutine: no
// onEvent call starts after it returns. Idempotent. Must not be called
// from onEvent.
func (q *eventQueue) stop() {
	q.mu.Lock()
	if !q.stopped {
		q.stopped = true
		q.pending = nil
		close(q.stopc)
	}
	q.mu.Unlock()
	q.done.Wait()
}

// next pops the oldest deliverable event. Delivery goroutine only.
func (q *eventQueue) next() (Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped || q.held || len(q.pending) == 0 {
		return Event{}, false
	}
	e := q.pending[0]
	q.pending[0] = Event{}
	q.pending = q.pending[1:]
	return e, true
}

// run is the delivery goroutine.
func (q *eventQueue) run() {
	defer q.done.Done()
	for {
		select {
		case <-q.stopc:
			return
		case <-q.wakec:
		}
		for {
			e, ok := q.next()
			if !ok {
				break
			}
			q.onEvent(e)
		}
	}
}
