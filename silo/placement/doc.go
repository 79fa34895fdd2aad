// Package placement holds the placement strategies: they pick the silo on
// which a grain that has no activation anywhere in the cluster is
// activated. It is a pure core: a Placer does no I/O and starts no
// goroutine. The silo builds a Request from its membership view (the
// active silos that host the grain's type, with their roles and their
// gossiped activation counts), asks Place, and tells the Placer what it
// placed (Placed) and what load each silo reported (LoadReported).
//
// The silo maps a grain type's options onto a Strategy:
//
//	TypeOptions.StatelessWorker      StatelessWorker
//	grain.PlacementDefault           Default (Config.Default; Random unless changed)
//	grain.PlacementRandom            Random
//	grain.PlacementPreferLocal       PreferLocal
//	grain.PlacementHash              Hash
//	grain.PlacementActivationCount   ActivationCount
//	silo-role placement              SiloRole, with Request.Role
//
// The strategies:
//
//   - Random: uniform over the candidates.
//   - PreferLocal: the calling silo when it hosts the type
//     (Request.LocalHosts), else Random.
//   - Hash: rendezvous hashing of the grain ID over the candidates' IDs.
//     The same ID picks the same silo, whatever the order of the
//     candidates, as long as the set is unchanged; when a silo leaves,
//     only the grains it had move, and a silo that joins takes only the
//     grains that now hash to it.
//   - ActivationCount: the power of two choices. Of two distinct random
//     candidates, the one with fewer activations wins, ties broken at
//     random. A silo's activations are those of its latest load report
//     (LoadReported, else Candidate.Activations) plus the placements this
//     silo recorded on it since (Placed), so that a burst of placements
//     between two gossip rounds spreads instead of herding onto the silo
//     that looked least loaded.
//   - SiloRole: Random among the candidates whose Roles hold Request.Role.
//   - StatelessWorker: like PreferLocal: a stateless worker runs where it
//     is called.
//
// The contract:
//
//   - Place returns one of the candidates' IDs, or Request.Local for
//     PreferLocal and StatelessWorker when LocalHosts is set. It never
//     panics and does not allocate on success.
//   - Errors carry a gRPC code and wrap a sentinel: no candidate is
//     Unavailable (ErrNoSilo) naming the grain type; no candidate with the
//     role is FailedPrecondition (ErrNoSiloWithRole) naming the type and
//     the role; an unknown strategy, a SiloRole request without a role, a
//     candidate without an ID or LocalHosts without Local is
//     InvalidArgument (ErrBadRequest).
//   - Every method of a Placer may be called from any goroutine. An
//     unseeded Placer draws from math/rand/v2's top-level functions and
//     takes a lock only for ActivationCount; a seeded one (Config.Seed)
//     makes the same choices for the same calls from one goroutine.
//   - The Placer remembers, per silo, the latest load report and the
//     placements since; Forget drops a silo that left.
package placement
