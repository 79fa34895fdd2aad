// Package silo hosts grain activations: it is Granary's runtime on one
// process. A Silo activates a grain on its first call, runs its requests as
// turns on the activation scheduler under Orleans' admission rules, and
// collects it when it has been idle for its collection age.
//
// Use it in four steps: New with a Config (DefaultConfig and change what
// you need), register grain types with the generated RegisterXGrain
// functions, Start, and at the end Stop (graceful) or Close. A *Silo is a
// grain.Caller, so generated references work from any goroutine of the
// hosting program; grains call each other through their Context.
//
// The contract:
//
//   - One activation per grain ID on a silo (stateless workers excepted:
//     up to their bound, spread by load). OnActivate runs before any
//     request; if it fails, the requests that caused it get its error and
//     no activation remains, so the next call tries again.
//   - Non-reentrant grains start one request at a time, across awaits
//     too. Reentrant grains, always-interleave and read-only methods,
//     interleaving timers and call-chain reentrancy relax this at awaits
//     only (see package admission).
//   - A call whose call chain already holds its target, where the target
//     does not admit it, fails at once with Aborted naming the chain.
//   - Every call ends: with its reply, its error, DeadlineExceeded at its
//     deadline (the earliest of the caller's context, the method's timeout
//     and Config.ResponseTimeout), Canceled when the caller gives up, or
//     Unavailable when the silo stops. A request whose caller already has
//     its outcome is dropped, never executed.
//   - A panic in grain code returns Internal to its caller and deactivates
//     the activation; the silo keeps serving.
//   - A type's persistent states (grain.WithState) are read before
//     OnActivate, from the providers Config.Storage names (or the embedded
//     store under Config.DataDir); a read that fails fails the activation.
//     Reminders (Config.Reminders) fire as requests of their grain from the
//     silo that owns its ring position, activating it where it belongs.
//   - Stop deactivates every activation, running OnDeactivate, then stops
//     the scheduler; it waits for every goroutine the silo started.
//
// This package is the composition root: it holds the configuration,
// registration, the lifecycle and introspection, and wires three internal
// packages together. silo/internal/local is the runtime that hosts
// activations and carries calls; silo/internal/cluster is the silo's
// side of a cluster (Config.Cluster); silo/internal/gateway serves
// external clients (Config.Gateway). The runtime reaches the other two
// only through its local.Cluster and local.Gateway interfaces; a silo
// alone has neither.
package silo
