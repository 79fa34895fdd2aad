// Package membership tells a silo which other silos are in its cluster,
// what they host and how loaded they are, and when one joins, changes,
// leaves or fails. It is the only package that speaks gossip; the
// directory ring and placement consume its events.
//
// Two implementations share the Service interface:
//
//   - Memberlist gossips over hashicorp/memberlist: SWIM failure detection
//     with suspicion and Lifeguard's awareness, gossip of metadata, and
//     periodic push/pull anti-entropy over TCP. Config carries its tuning
//     with two profiles, DefaultLANConfig for production and
//     DefaultLocalConfig for tests on loopback.
//   - Hub is an in-memory cluster for tests in any package: members see
//     each other at once, and the test kills members, partitions and heals
//     the network, and holds a member's events to delay them.
//
// # Members
//
// A Member is identified by its ID, the memberlist node name: the silo's
// Name, "-", and a generation unique to the process start, so a silo that
// restarts under the same name is a new member, and the directory never
// confuses the activations of the old process with the new one's. Its
// metadata (granaryv1.NodeMeta: name, gRPC address, roles, hosted grain
// types, status, load) is encoded with protobuf and must fit memberlist's
// 512-byte limit: Start and Update fail with ErrMetaTooLarge, naming what
// takes the room, rather than truncate it.
//
// Status belongs to the silo, which moves it Joining -> Active ->
// ShuttingDown through Update. Dead is never gossiped; the membership
// layer reports it on the Member of EventLeft and EventFailed.
//
// # The contract
//
//   - Start joins through the seeds (static host:port list and a DNS name,
//     resolved on every attempt) and retries until one answers or its
//     context ends. A silo whose seeds are none, or only itself, founds a
//     cluster. The local member starts in StatusJoining. With SeedDNS on
//     Kubernetes, publish not-ready addresses, so silos starting together
//     find each other: a name that resolves to nothing is retried, never
//     taken as licence to found a second cluster.
//   - onEvent receives every change of the OTHER members (EventJoined,
//     EventUpdated, EventLeft, EventFailed) serially, in the order the
//     local node observed them, on one goroutine owned by the Service.
//     memberlist's goroutines only queue events, so a slow onEvent delays
//     later events but never gossip or failure detection. Events may
//     arrive before Start returns. onEvent must not call Leave or Close.
//   - A graceful Leave shows as EventLeft at the others; a crash, a Close
//     or a partition as EventFailed once failure detection declares the
//     member dead (see Config for the detection time). A member declared
//     dead that was in fact alive (a healed partition) comes back as
//     EventJoined with its current metadata; its ID is unchanged. Each
//     silo tries to reach failed members again (Config.ReconnectInterval),
//     since memberlist alone stops talking to a dead member soon after it
//     is declared dead, and a partition longer than that would stay split.
//     memberlist v0.7.0 cannot tell its delegate a leave from a death (see
//     leave.go), so Leave first gossips a leave intent of its own, and the
//     others report EventLeft when it arrives; one that misses the intent
//     reports EventFailed.
//   - Members returns the alive members, self included, sorted by ID; it
//     may run ahead of the events not yet delivered.
//   - Silos of another cluster are kept out twice: memberlist's Label
//     (the ClusterID) rejects their packets and streams, and a hash of the
//     ClusterID in the metadata (NodeMeta.cluster_hash) lets the alive and merge delegates refuse them
//     should a packet get past the label. A node whose metadata is
//     malformed is logged and ignored, never a panic. With SecretKey set,
//     gossip is encrypted and a silo without the key cannot join.
//   - Leave and Close return after the Service's own goroutines have
//     ended, and no onEvent call happens after they return. memberlist's
//     Shutdown stops its goroutines without waiting for them; the few in
//     flight end within about a ProbeInterval (a probe) or a TCPTimeout (a
//     stream being served), reach no socket (the transport is closed
//     first and waited for) and reach no onEvent (the event queue is
//     stopped). That is the one exception to "every goroutine has an
//     owner who waits for it", and it is memberlist's.
//   - Start may be called once; if it fails, the Service is closed.
//     Update before Start returns ErrNotStarted, after Leave or Close
//     ErrClosed. Close is idempotent; Leave after Close does nothing.
//
// # Failure detection
//
// memberlist declares a silo dead after it failed a probe (direct, then
// indirect through others) and stayed suspect for the suspicion timeout.
// DefaultLANConfig is tuned so a SIGKILLed silo is declared dead in about
// 2 to 3 seconds, which leaves the cluster time to re-place its grains
// within 5; Config's comment gives the formula, and
// docs/benchmarks.md#failure-detection the measured times.
package membership
