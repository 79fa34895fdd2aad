package grain

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/internal/grainrt"
)

// A Handler is the generated dispatch function of one grain method: it
// asserts impl to the grain's interface and req to the method's request
// type, and calls the method. Generated code only; no reflection.
type Handler func(impl any, ctx Context, req proto.Message) (proto.Message, error)

// MethodDesc describes one method of a grain type. Generated code fills it
// in from the proto service and the method options; the runtime reads it
// and never changes it.
type MethodDesc struct {
	// Name is the rpc's name, such as "Deposit".
	Name string
	// FullName is the gRPC method name, "/bank.Account/Deposit".
	FullName string
	// Index is the method's position in ServiceDesc.Methods.
	Index int
	// Handler calls the method on an activation. Nil for the methods of
	// an observer service, which have Observe instead.
	Handler Handler
	// Observe calls the method on an observer, in the process that made
	// it. Set only for the methods of an observer service: a call whose
	// method has it goes to an observer, not to a grain.
	Observe ObserverHandler
	// NewRequest and NewResponse return empty messages of the method's
	// types, for decoding off the wire.
	NewRequest  func() proto.Message
	NewResponse func() proto.Message

	// OneWay: the caller does not wait and gets no reply (method option
	// one_way). The request's response type should be google.protobuf.Empty.
	OneWay bool
	// AlwaysInterleave: the method may start while any other request of the
	// activation waits at an await (method option always_interleave).
	AlwaysInterleave bool
	// ReadOnly: the method does not change the grain's state, so read-only
	// requests may interleave with each other (method option read_only).
	ReadOnly bool
	// Timeout replaces the silo's default response timeout for this method
	// when non-zero (method option timeout).
	Timeout time.Duration
}

// Placement is the strategy that picks the silo on which a grain is
// activated. A single silo places everything locally; the strategies
// matter once there is a cluster.
type Placement int

const (
	// PlacementDefault leaves the choice to the silo's configuration.
	PlacementDefault Placement = iota
	// PlacementRandom picks a compatible silo at random.
	PlacementRandom
	// PlacementPreferLocal activates on the calling silo when it hosts the
	// type.
	PlacementPreferLocal
	// PlacementHash picks a silo by the grain ID's hash.
	PlacementHash
	// PlacementActivationCount picks the less loaded of two random silos.
	PlacementActivationCount
	// PlacementSiloRole picks a compatible silo at random among those
	// whose configuration lists the role TypeOptions.SiloRole.
	PlacementSiloRole
)

var placementNames = [...]string{"default", "random", "prefer_local", "hash", "activation_count", "silo_role"}

func (p Placement) String() string {
	if p >= 0 && int(p) < len(placementNames) {
		return placementNames[p]
	}
	return "Placement(?)"
}

// TypeOptions are the per-type settings of a grain, from the grain options
// in its proto service, changed by RegisterOptions at registration.
type TypeOptions struct {
	// Placement picks the silo that activates the grain.
	Placement Placement
	// SiloRole is the role a silo must have to host new activations of the
	// type, for PlacementSiloRole (grain option silo_role). Other
	// placements ignore it.
	SiloRole string
	// Reentrant: requests interleave at awaits (grain option reentrant).
	Reentrant bool
	// CallChainReentrant admits a request whose call chain already holds
	// the activation (A→B→A) instead of failing it as a deadlock. It is
	// the default for calls that set no scope: a call made with
	// AllowCallChainReentrancy or SuppressCallChainReentrancy decides for
	// its own chain.
	CallChainReentrant bool
	// MayInterleave, when set, runs on each request to the type's methods
	// before it is admitted; true admits the request as if its method
	// were always_interleave (WithMayInterleave).
	MayInterleave MayInterleaveFunc
	// CollectionAge is how long an activation may stay idle before it is
	// collected; 0 means the silo's default (grain option collection_age).
	CollectionAge time.Duration
	// KeepAlive: activations of the type are never collected for being
	// idle; they end only when asked to, on error or when the silo stops
	// (grain option keep_alive).
	KeepAlive bool
	// StatelessWorker: the silo may run several activations of one ID and
	// spreads calls over them (grain option stateless_worker).
	StatelessWorker bool
	// MaxLocalWorkers bounds a stateless worker's activations per silo;
	// 0 means GOMAXPROCS.
	MaxLocalWorkers int
	// KeyKind is the form of the type's keys.
	KeyKind KeyKind
	// States are the persistent states each activation reads before
	// OnActivate (WithState).
	States []StateDecl
	// QueueSoftLimit and QueueHardLimit bound the requests queued at one
	// activation of the type (WithQueueLimits); 0 keeps the silo's
	// setting.
	QueueSoftLimit, QueueHardLimit int
	// QueueWaitLimit bounds how long a request from outside the silo
	// waits for its turn at an activation of the type
	// (WithQueueWaitLimit); 0 keeps the silo's setting.
	QueueWaitLimit time.Duration
	// StreamHandlers are the functions that may take stream events for
	// the type's activations, by name (package grain/streams).
	StreamHandlers []StreamHandlerDecl
	// ImplicitStreams are the stream namespaces whose streams deliver to
	// the grain with the stream's key without a subscription (package
	// grain/streams).
	ImplicitStreams []ImplicitStreamDecl
}

// StreamHandlerDecl is a stream handler, as grain/streams declares it.
type StreamHandlerDecl = grainrt.StreamHandler

// ImplicitStreamDecl is an implicit stream subscription, as grain/streams
// declares it.
type ImplicitStreamDecl = grainrt.ImplicitStream

// ServiceDesc describes a grain type: generated code builds one per proto
// service and passes it to a Registrar.
type ServiceDesc struct {
	// Type is the grain type: the proto service's full name.
	Type string
	// Methods is the dispatch table, indexed by MethodDesc.Index.
	Methods []MethodDesc
	// Options are the grain options from the proto service.
	Options TypeOptions
	// File is the .proto file the service was generated from.
	File string
	// Observer: the service is an observer interface (grain option
	// observer), implemented outside the cluster and called by grains,
	// not a grain type.
	Observer bool
}

// Method returns the method called name, or nil.
func (d *ServiceDesc) Method(name string) *MethodDesc {
	for i := range d.Methods {
		if d.Methods[i].Name == name {
			return &d.Methods[i]
		}
	}
	return nil
}

// Factory makes the implementation of a new activation of the grain id. It
// runs on the activation's turn, before OnActivate.
type Factory func(id ID) any

// A Registrar accepts grain types: a silo is one. Generated RegisterXGrain
// functions call it.
type Registrar interface {
	RegisterGrain(desc *ServiceDesc, factory Factory, opts ...RegisterOption) error
}

// A RegisterOption changes a grain type's options at registration.
type RegisterOption func(*TypeOptions)

// WithReentrant makes the type reentrant, or not.
func WithReentrant(on bool) RegisterOption { return func(o *TypeOptions) { o.Reentrant = on } }

// WithCallChainReentrancy lets a request whose call chain already holds the
// activation run, as a nested call would, instead of failing as a
// deadlock.
func WithCallChainReentrancy() RegisterOption {
	return func(o *TypeOptions) { o.CallChainReentrant = true }
}

// A MayInterleaveFunc decides whether request req to method m may
// interleave with anything the activation runs, like an always_interleave
// method: Orleans' [MayInterleave]. m is the type's own MethodDesc and req
// its decoded request, which the function must not change or keep.
//
// It runs on the silo's receiving path, before the request is admitted
// and outside any turn: on the caller's goroutine for a call from the same
// silo, and on the goroutine that reads the stream for a call from another
// silo or a client, which decodes the request there instead of on the
// pool. It must therefore be fast, must not block and must not call
// grains; it may run more than once for one request (when the request is
// routed again) and on several goroutines at once. A panic in it does not
// crash the silo: it is logged and counts as false, so the request keeps
// its method's kind.
type MayInterleaveFunc func(m *MethodDesc, req proto.Message) bool

// WithMayInterleave admits the type's requests for which fn returns true
// as interleaving (see MayInterleaveFunc): they start whatever the
// activation runs, and run while its other requests wait at an await. It
// does not apply to timer or reminder ticks.
func WithMayInterleave(fn MayInterleaveFunc) RegisterOption {
	return func(o *TypeOptions) { o.MayInterleave = fn }
}

// WithCollectionAge sets how long an idle activation lives.
func WithCollectionAge(d time.Duration) RegisterOption {
	return func(o *TypeOptions) { o.CollectionAge = d }
}

// WithQueueLimits bounds the requests waiting at one activation of the
// type (at one stateless worker ID's whole set of activations), from when
// they reach it until their turn starts: past soft the silo logs a
// warning, and a request that would queue past hard is refused with
// ResourceExhausted and never runs. Requests that start at once
// (reentrant, interleaving) never queue. A zero limit keeps the silo's
// (Config.QueueLimits); the silo's per-type configuration overrides this
// option.
func WithQueueLimits(soft, hard int) RegisterOption {
	return func(o *TypeOptions) { o.QueueSoftLimit, o.QueueHardLimit = soft, hard }
}

// WithQueueWaitLimit bounds how long a request from outside the silo (a
// client's, or another silo's) waits for its turn at an activation of the
// type, from when the silo receives it: one that waited longer is refused
// with ResourceExhausted when its turn comes, and never runs. Zero keeps
// the silo's limit (Config.QueueLimits.Wait); the silo's per-type
// configuration overrides this option. Give a type whose requests
// legitimately queue for long, behind slow turns, a longer limit.
func WithQueueWaitLimit(d time.Duration) RegisterOption {
	return func(o *TypeOptions) { o.QueueWaitLimit = d }
}

// WithKeepAlive keeps the type's activations from being collected for
// being idle, as long as the silo runs (grain option keep_alive). It
// cannot be combined with WithCollectionAge or a collection age for the
// type in the silo's configuration: RegisterGrain refuses the pair. To
// keep one activation alive only while a timer runs, start the timer
// with KeepAlive instead.
func WithKeepAlive() RegisterOption { return func(o *TypeOptions) { o.KeepAlive = true } }

// WithStatelessWorker makes the type a stateless worker with at most max
// local activations (0: GOMAXPROCS).
func WithStatelessWorker(max int) RegisterOption {
	return func(o *TypeOptions) { o.StatelessWorker, o.MaxLocalWorkers = true, max }
}

// WithPlacement sets the placement strategy.
func WithPlacement(p Placement) RegisterOption { return func(o *TypeOptions) { o.Placement = p } }

// WithSiloRole places new activations of the type on silos whose
// configuration lists role: it sets the placement to PlacementSiloRole and
// the role to role.
func WithSiloRole(role string) RegisterOption {
	return func(o *TypeOptions) { o.Placement, o.SiloRole = PlacementSiloRole, role }
}

// Activator is implemented by grains that want to run code when they are
// activated. OnActivate runs as the activation's first turn, before any
// request. An error fails the requests that caused the activation and
// leaves no activation, so the next call tries again.
type Activator interface {
	OnActivate(ctx Context) error
}

// Deactivator is implemented by grains that want to run code when their
// activation ends: when it was idle too long, asked to deactivate, panicked
// or the silo stops. It runs as the activation's last turn.
type Deactivator interface {
	OnDeactivate(ctx Context, reason DeactivationReason) error
}

// DeactivationReason says why an activation ends.
type DeactivationReason int

const (
	// DeactivateIdle: collected after CollectionAge without calls.
	DeactivateIdle DeactivationReason = iota
	// DeactivateRequested: the grain called DeactivateOnIdle.
	DeactivateRequested
	// DeactivateShutdown: the silo is stopping.
	DeactivateShutdown
	// DeactivatePanic: grain code panicked.
	DeactivatePanic
	// DeactivateOperator: an operator or the runtime asked for it.
	DeactivateOperator
	// DeactivateMemoryPressure: collected while idle because the silo's
	// Go heap was over its memory-collection target, the least recently
	// used first, before its collection age.
	DeactivateMemoryPressure
)

var reasonNames = [...]string{"idle", "requested", "shutdown", "panic", "operator", "memory-pressure"}

func (r DeactivationReason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "DeactivationReason(?)"
}
