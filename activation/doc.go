// Package activation is Granary's scheduler: it runs the turns of grain
// activations on a small, shared set of processors, so that a grain never
// runs in parallel with itself while millions of grains share a few cores.
//
// A Group is the work-item group of one activation: a FIFO of Turns that
// run one at a time, in order, system turns first. A Pool has a fixed
// number of processors (default GOMAXPROCS) with per-processor run queues
// and work stealing; a group that gets work is queued on the pool and
// drained by whichever worker holds a processor, a quantum of turns at a
// time.
//
// The contract:
//
//   - Turns of one group never overlap, and they start in the order they
//     were enqueued (system turns ahead of application turns).
//   - At most Config.Processors turns run at once, apart from turns inside
//     Exec.Wait or Exec.Blocking and turns the monitor detached because
//     they ran past Config.HandOnAfter.
//   - A turn that waits (Exec.Wait, Exec.Blocking) gives up its processor
//     and its group's token, so N+1 turns waiting on each other on N
//     processors still finish; another turn of the same group can run only
//     while it waits, never in the middle of its code.
//   - Every accepted turn gets exactly one Task.Done call: after it ran,
//     after it panicked (a *PanicError; the pool keeps running), or with
//     ErrClosed when the pool dropped it.
//   - Stop drains; Close drops. Both wait for the pool's goroutines and are
//     idempotent.
//
// The package does no I/O and knows nothing of grains: the silo builds
// activation lifecycles, request admission and reentrancy on top of it.
// The design is described at the top of pool.go and in
// docs/architecture.md.
package activation
