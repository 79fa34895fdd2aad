// Package local is a silo's local runtime: everything that happens to a
// grain inside one silo.
//
// It owns:
//   - the catalog of activations, per grain type, and the activation
//     record, which carries out the actions of activation/lifecycle and
//     asks activation/admission which request may run;
//   - the call record (Call): one pooled type, owned here, that is at
//     once a request, the callee's turn, the home of its grain.Context and
//     the rendezvous for its reply; and the call path from Invoke to the
//     reply: routing to an activation, outgoing and incoming filters,
//     deadlines, cancellation and deadlock detection;
//   - the timeout wheel that expires calls, and the timer wheel and grain
//     timers;
//   - stateless workers, idle collection, the queue limits (an
//     activation's soft and hard limits on queued requests, and the wait
//     limit), the places new requests take in the silo's concurrency
//     limit, and stopping;
//   - the glue to persistent state (storage providers, the embedded store)
//     and to the reminder service.
//
// A silo alone runs on this package and nothing else. A silo in a cluster
// gives the runtime a Cluster and a Gateway (remote.go): the two
// interfaces are all the runtime asks of other silos and of clients.
// Cluster has eight methods (Self, Resolve, Forward, Register,
// Unregister, Reply, ResolveObserver, RemindersChanged); Gateway has
// three (Reply, DeliverObserver, HomeEntries). Nil means none. In the
// other direction, silo/internal/cluster and silo/internal/gateway use
// this package's exported API: Runtime.Incoming makes a call from an
// envelope, Runtime.Route sends it to its activation, Runtime.Fail ends
// it, and Runtime.ActivationByID finds an activation.
//
// It may import the scheduler (activation) and its two state machines,
// grain, internal/grainrt and internal/refusal, directory (ring positions
// and entries), silo/storage and silo/reminders, silo/overload (the
// Limiter), internal/transport (the Responder a remote call answers
// through) and the wire protocol. It must not import the cluster side, the gateway or
// the silo root: they import it.
package local
