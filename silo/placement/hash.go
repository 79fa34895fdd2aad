package placement

import "github.com/granaryio/granary/internal/hashmix"

// Rendezvous (highest-random-weight) hashing. Each candidate gets a weight
// that depends only on the grain ID and the candidate's ID, and the grain
// goes to the heaviest. So the choice does not depend on the order of the
// candidates, and when a silo leaves only the grains whose heaviest
// candidate it was move (each to its own runner-up), while a silo that
// joins takes about 1/n of the grains, from every other silo alike. A
// consistent-hash ring gives the same properties with a precomputed ring;
// with the handful of silos that host a type, scoring them all per
// placement is cheaper than keeping a ring per candidate set, and it
// allocates nothing.

// placeHash picks the candidate of the highest weight for req.Grain; equal
// weights (a 2⁻⁶⁴ event, or duplicate IDs) go to the smaller ID, so the
// choice stays independent of order.
func placeHash(req Request) (string, error) {
	if len(req.Candidates) == 0 {
		return "", noSilo(req)
	}
	g := hashmix.Mix64(req.Grain.Hash())
	best := req.Candidates[0].ID
	bestW := weight(g, best)
	for i := 1; i < len(req.Candidates); i++ {
		id := req.Candidates[i].ID
		w := weight(g, id)
		if w > bestW || (w == bestW && id < best) {
			best, bestW = id, w
		}
	}
	return best, nil
}

// weight is the rendezvous weight of a silo for a grain whose mixed hash
// is g. Both hashes are mixed before they are combined, because FNV-1a on
// its own spreads the last bytes of similar keys poorly.
func weight(g uint64, silo string) uint64 {
	return hashmix.Mix64(g ^ hashmix.Mix64(hashmix.FNV1a(silo)))
}
