package grain

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/granaryio/granary/internal/grainrt"
)

// DefaultStorage is the name of the storage provider a state is kept in
// when its declaration names none.
const DefaultStorage = "default"

// StateSpec declares a persistent state of type T: its name, which tells
// it from the grain's other states, and the storage provider that keeps
// it. Declare it once (a package variable), pass it to the registration
// with WithState, and reach the activation's state with Of:
//
//	var balance = grain.NewStateSpec[*bankpb.Balance]("balance", "")
//
//	bankpb.RegisterAccountGrain(s, newAccount, grain.WithState(balance))
//
//	func (a *account) Deposit(ctx grain.Context, req *bankpb.Amount) (*bankpb.Balance, error) {
//		st := balance.Of(ctx)
//		st.Value().Cents += req.Cents
//		return st.Value(), st.Write(ctx)
//	}
//
// The runtime reads every declared state before the grain's OnActivate;
// an activation whose read fails does not start, and its callers get the
// error (Unavailable while the store is down).
type StateSpec[T proto.Message] struct {
	name     string
	provider string
}

// NewStateSpec declares a state named name, kept by the storage provider
// named provider ("" for DefaultStorage).
func NewStateSpec[T proto.Message](name, provider string) *StateSpec[T] {
	if provider == "" {
		provider = DefaultStorage
	}
	return &StateSpec[T]{name: name, provider: provider}
}

// StateName is the state's name.
func (s *StateSpec[T]) StateName() string { return s.name }

// ProviderName is the name of the storage provider that keeps the state.
func (s *StateSpec[T]) ProviderName() string { return s.provider }

// Bind makes the state object of one activation over store. Runtimes
// only.
func (s *StateSpec[T]) Bind(store grainrt.StateStore) grainrt.BoundState {
	st := &State[T]{spec: s, store: store}
	st.value = st.newValue()
	return st
}

// Of returns the state of the activation whose Context ctx is or derives
// from. It panics, naming the state and the grain, when the grain type
// was registered without declaring it (WithState): a programming error,
// which the runtime reports to the caller as Internal.
func (s *StateSpec[T]) Of(ctx context.Context) *State[T] {
	c, ok := FromContext(ctx)
	if !ok {
		panic(fmt.Sprintf("grain: state %q read with a context that is not a grain's", s.name))
	}
	h, ok := c.(grainrt.StateHost)
	if !ok {
		panic(fmt.Sprintf("grain: the runtime of %s keeps no persistent state", c.ID()))
	}
	b := h.BoundState(s)
	st, ok := b.(*State[T])
	if !ok {
		panic(fmt.Sprintf("grain: %s was registered without state %q: pass grain.WithState to its registration", c.ID(), s.name))
	}
	return st
}

// StateDecl is a declared persistent state, the untyped side of a
// StateSpec, which WithState takes: every *StateSpec is one.
type StateDecl = grainrt.StateDecl

// WithState declares the persistent states of a grain type's activations.
func WithState(decls ...StateDecl) RegisterOption {
	return func(o *TypeOptions) { o.States = append(o.States, decls...) }
}

// State is one activation's persistent state of type T: a value, and the
// ETag of the record it was read from or last written as. Write and Clear
// succeed only while the record still has that ETag, so of two
// activations of one grain (a transient duplicate in a cluster) that read
// the same record only the first to write wins; the other gets
// FailedPrecondition and should not act on its stale value.
//
// A State is used by its activation's turns, like the rest of the grain.
// Read, Write and Clear give up the turn's processor while they wait for
// the store, as Blocking does.
type State[T proto.Message] struct {
	spec   *StateSpec[T]
	store  grainrt.StateStore
	value  T
	etag   string
	exists bool
}

// Value is the state's value: the stored one, or a new T when there is
// none. Change it in place or with Set, then Write.
func (s *State[T]) Value() T { return s.value }

// Set replaces the value; Write stores it.
func (s *State[T]) Set(v T) { s.value = v }

// ETag is the version of the record the value was read from or written
// as; "" when there has never been a record.
func (s *State[T]) ETag() string { return s.etag }

// Exists reports whether the store holds a record of the value: false
// before the first Write and after Clear.
func (s *State[T]) Exists() bool { return s.exists }

// Name is the state's declared name.
func (s *State[T]) Name() string { return s.spec.name }

// Read reads the record again, replacing the value and the ETag.
func (s *State[T]) Read(ctx context.Context) error {
	var (
		data   []byte
		etag   string
		exists bool
		err    error
	)
	Blocking(ctx, func() { data, etag, exists, err = s.store.Read(ctx) })
	if err != nil {
		return err
	}
	v := s.newValue()
	if exists {
		if err := proto.Unmarshal(data, v); err != nil {
			return status.Errorf(codes.DataLoss, "grain: state %q does not decode as %s: %v",
				s.spec.name, v.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	s.value, s.etag, s.exists = v, etag, exists
	return nil
}

// Write stores the value. It fails with FailedPrecondition when the
// record changed since it was read or last written here (another
// activation wrote it): the value and ETag are kept, and a Read gives the
// stored ones. On any other error the write may or may not have been
// stored; a Read tells.
func (s *State[T]) Write(ctx context.Context) error {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.value)
	if err != nil {
		return status.Errorf(codes.Internal, "grain: state %q does not encode: %v", s.spec.name, err)
	}
	var etag string
	Blocking(ctx, func() { etag, err = s.store.Write(ctx, data, s.etag) })
	if err != nil {
		return err
	}
	s.etag, s.exists = etag, true
	return nil
}

// Clear removes the stored value and resets the value to a new T, under
// the same ETag rule as Write.
func (s *State[T]) Clear(ctx context.Context) error {
	var (
		etag string
		err  error
	)
	Blocking(ctx, func() { etag, err = s.store.Clear(ctx, s.etag) })
	if err != nil {
		return err
	}
	s.value, s.etag, s.exists = s.newValue(), etag, false
	return nil
}

// newValue makes an empty T; T is a pointer to a generated message.
func (s *State[T]) newValue() T {
	var zero T
	return zero.ProtoReflect().New().Interface().(T)
}
