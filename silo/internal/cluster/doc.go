// Package cluster is a silo's side of the cluster: everything a silo does
// because other silos exist.
//
// It owns:
//   - the view of the other members (from silo/membership), and the peer
//     gate that admits a member only after a mutual-TLS handshake;
//   - this silo's part of the grain directory (package directory), its
//     registrations, and their retries after a membership change;
//   - placement of new activations over the live silos (silo/placement);
//   - remote calls: routing a call to the silo of its activation, the
//     envelopes of requests, responses and one-way messages on the
//     transport's streams (internal/transport), forwarding, hop limits,
//     and cancellation of a request another silo sent;
//   - routing a call to an observer to the home gateway of its client;
//   - partition healing, load reports, and leaving gracefully.
//
// The local runtime (silo/internal/local) sees this package only through
// the local.Cluster interface, which a *Cluster implements: Self,
// Resolve, Forward, Register, Unregister, Reply, ResolveObserver and
// RemindersChanged. In the other direction this package uses the
// runtime's exported API: it makes calls from envelopes
// (Runtime.Incoming), routes them (Runtime.Route), fails them
// (Runtime.Fail), and finds activations (Runtime.ActivationByID).
//
// It may import the runtime (silo/internal/local), the directory,
// placement, membership, the transport, grain and the wire protocol. It
// must not import the gateway or the silo root, which import it.
package cluster
