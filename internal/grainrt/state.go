package grainrt

import "context"

// StateDecl is grain.StateDecl, which is an alias of it: a declared
// persistent state, the untyped side of a *grain.StateSpec.
type StateDecl interface {
	StateName() string
	ProviderName() string
	// Bind makes the state object of one activation over store.
	Bind(store StateStore) BoundState
}

// BoundState is a state object bound to its activation's record: Read
// fills it before OnActivate.
type BoundState interface {
	Read(ctx context.Context) error
}

// StateHost is implemented by a runtime's Context: it returns the bound
// state of the running activation that decl declared, or nil.
type StateHost interface {
	BoundState(decl StateDecl) BoundState
}

// StateStore reads and writes one state record of one grain. A runtime
// binds it to a storage provider; its errors are gRPC status errors:
// FailedPrecondition for a stale ETag, InvalidArgument for a state over the
// provider's size limit, Unavailable when the store cannot be reached.
type StateStore interface {
	// Read returns the record's data and ETag; exists is false when there
	// is no record, or it was cleared (the ETag may still be set then).
	Read(ctx context.Context) (data []byte, etag string, exists bool, err error)
	// Write stores data if the record's ETag is still etag ("" for no
	// record yet) and returns the new ETag.
	Write(ctx context.Context, data []byte, etag string) (newETag string, err error)
	// Clear removes the data if the record's ETag is still etag, and
	// returns the record's new ETag.
	Clear(ctx context.Context, etag string) (newETag string, err error)
}
