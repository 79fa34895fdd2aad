// Package directory is Granary's distributed grain directory: the
// cluster-wide map from grain ID to the one silo and activation that holds
// the grain, partitioned over the silos as in Orleans.
//
// # Ownership
//
// Every silo builds the same Ring from the same list of active silos: a
// consistent-hash ring with Config.VirtualNodes points per silo. A grain
// stands on it at Position(id), its ID's FNV-1a hash, mixed; the silo of
// the first point at or after that position owns the grain's entry and
// holds it in its Partition. A silo that joins takes over only arcs that
// move to it; a silo that leaves gives its arcs to the silos after them.
//
// # Protocol
//
// Register is first-wins at the owner: the first entry recorded for a
// grain holds until it is unregistered by itself or purged with its silo,
// and every later registration is answered with it, so the losing silo
// discards its activation and forwards its queued requests to the winner.
// Unregister removes only the recorded entry, never a newer one. Lookup
// asks the owner; callers cache the answers (Cache, bounded, expiring
// after Config.CacheTTL) and invalidate an entry when they find no
// activation where it pointed.
//
// A request that reaches a silo that does not own its grain, because the
// sender's view of the ring is older or newer, is passed on to the owner
// the receiving silo believes in, at most Config.MaxHops times; past that
// the views disagree and the request fails with Unavailable, to be retried,
// rather than be recorded where the owner will not look.
//
// On a membership change (SetMembers) each silo hands the entries it no
// longer owns to their new owners (OpHandoff), and registers its own
// activations again where their owner changed. The second half rebuilds
// the entries that died with an owner and meets the duplicates made while
// views disagreed: both kinds of message merge first-wins at the new
// owner, and an activation whose entry loses there is reported to
// Config.Lost, so the silo deactivates it. SiloDead purges entries naming
// a failed silo, which frees its grains to activate elsewhere. A silo that
// shuts down installs a view without itself (or calls HandOffAll) and so
// hands its whole partition on; best once the others have dropped it from
// their views, since until then they pass its entries back.
//
// The promise, which TestConvergence checks on random histories of joins,
// leaves, crashes and registrations with messages delivered in random
// order: once every silo has installed the same view and every message
// has been delivered, each grain has at most one entry, held by its owner
// and naming a live silo. When the silos install each view at about the
// same moment (their messages may still cross the change in any order),
// also every activation a silo still holds is its grain's entry: each of
// the others was reported lost or lost its Register. When views are
// installed far apart, an activation can be left without an entry (its
// registration bounced between disagreeing views past the hop bound, or
// its handoff failed); it is registered again when its owner next changes,
// and until then a caller may activate the grain a second time. Entries
// can also be stale (an activation unregistered while its entry was in
// flight to a new owner): a caller that finds no activation where an entry
// points unregisters that entry.
//
// The membership layer gives every silo the same views in the same order;
// a joining silo installs the view with itself first, and learns of the
// silos that died recently (SiloDead), as their messages may still arrive.
// Member IDs are unique per process: a restarted silo has a new one.
//
// # Purity
//
// The package does no I/O and starts no goroutine. A Directory sends
// through an injected Sender, reads time from an injected clock (the
// cache's TTL and the recovery window), and calls back on the goroutine of its caller or of the
// Sender's done; it never calls back with its lock held. The silo carries
// requests over its transport (granary.v1.DirectoryRequest) and hands
// the requests it receives to Handle. The directorytest package has an
// in-memory network whose messages a test delivers, fails and reorders
// one by one.
package directory
