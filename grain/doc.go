// Package grain is what grain authors and callers import: grain identities,
// the Context a grain method runs with, the Caller that typed references
// call through, futures, call options, timers, lifecycle hooks, call
// filters and the descriptors that generated code fills in.
//
// A grain is described by a protobuf service. The generator
// (protoc-gen-go-granary) turns service X into an XGrain interface that the
// author implements, an embeddable UnimplementedXGrain, a typed XRef and a
// RegisterXGrain function that hands a ServiceDesc (a typed dispatch table,
// no reflection) to a Registrar such as a silo.
//
// The contract:
//
//   - A grain's methods, hooks and non-interleaving timers run one at a
//     time; a non-reentrant grain starts one request at a time and that
//     holds across awaits. Reentrant grains, always-interleave and
//     read-only methods, interleaving timers and call-chain reentrancy
//     relax this only at awaits: a call, Future.Await, AwaitAll, Sleep and
//     Blocking.
//   - A Context is valid on the goroutine that runs the method it was
//     passed to, until the method returns. It must not be kept or used from
//     another goroutine.
//   - Errors that cross a call carry a gRPC status code (see Code): an
//     application error made with status.Error keeps its code and message;
//     any other error reaches the caller as Unknown with its message.
//     Runtime failures use NotFound (unknown grain type or method),
//     InvalidArgument (a key of the wrong kind, a bad timer),
//     DeadlineExceeded, Canceled (the caller gave up), Unavailable (the
//     silo is stopping or unreachable), Aborted (deadlock),
//     ResourceExhausted (a call chain too deep), FailedPrecondition (a
//     Context or Future used off its turn; a state write whose ETag is
//     stale), DataLoss (a stored state that no longer decodes) and
//     Internal (panic). A state read or write that cannot reach its store
//     is Unavailable.
//   - A context derived from a grain's Context (context.WithTimeout and
//     the like) may be passed to calls; it carries the call chain, and it
//     ends when the method returns.
//
// # For generated code
//
// Some names exist for the code protoc-gen-go-granary writes, as
// grpc.ServiceDesc does for grpc-go's; grain authors rarely touch them.
// ServiceDesc, MethodDesc, Handler, ObserverHandler and TypeOptions
// describe a service; Registrar, Factory and RegisterOption register it;
// ObserverHost creates observers; NewFuture wraps the Pending a Caller
// returns. Generated code lives in its users' modules, so it uses only
// names of this package. The runtimes' own plumbing (context keys, header
// transport, resolved call options, state binding, filter chaining) is in
// the module's internal/grainrt. StateSpec.Bind is for runtimes only.
package grain
