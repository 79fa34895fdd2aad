package directory

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/hashmix"
)

// Ring is a consistent-hash ring over a set of silos. Each silo stands on
// the ring at a number of points, its virtual nodes; the owner of a
// position is the silo of the first point at or after it, wrapping around.
// A silo that joins takes over only the arcs just before its own points,
// so only keys that move to it change owner, and a silo that leaves gives
// its arcs to the silos after them.
//
// A Ring is immutable once built, and safe for concurrent use.
type Ring struct {
	silos  []string // sorted, distinct, non-empty
	points []uint64 // the virtual nodes' positions, ascending
	owners []int32  // owners[i] indexes silos: the silo standing at points[i]
	vnodes int
}

// NewRing builds the ring of silos with vnodes virtual nodes each (at least
// one). Duplicate and empty names are ignored, and the order of silos does
// not matter: the same set always gives the same ring, on every process.
func NewRing(silos []string, vnodes int) *Ring {
	vnodes = max(vnodes, 1)
	names := make([]string, 0, len(silos))
	for _, s := range silos {
		if s != "" {
			names = append(names, s)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)

	type point struct {
		pos  uint64
		silo int32
	}
	pts := make([]point, 0, len(names)*vnodes)
	for i, name := range names {
		for v := range vnodes {
			pts = append(pts, point{vnodePosition(name, v), int32(i)})
		}
	}
	// Two points at one position are all but impossible; if it happens, the
	// silo first by name stands first, so the ring stays deterministic.
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.silo, b.silo)
	})
	r := &Ring{
		silos:  names,
		points: make([]uint64, len(pts)),
		owners: make([]int32, len(pts)),
		vnodes: vnodes,
	}
	for i, p := range pts {
		r.points[i], r.owners[i] = p.pos, p.silo
	}
	return r
}

// Position returns where id stands on the ring: its FNV-1a hash, mixed.
// FNV-1a alone puts keys that differ only in their last bytes ("user1",
// "user2", ...) close together in the high bits, so a run of such keys
// would fall on one arc and one silo; the mixer spreads them.
func Position(id grain.ID) uint64 { return hashmix.Mix64(id.Hash()) }

// Owner returns the silo that owns ring position h, or "" when the ring is
// empty.
func (r *Ring) Owner(h uint64) string {
	if len(r.points) == 0 {
		return ""
	}
	i, _ := slices.BinarySearch(r.points, h)
	if i == len(r.points) {
		i = 0
	}
	return r.silos[r.owners[i]]
}

// OwnerOf returns the silo that owns id's directory entry: the owner of
// Position(id), or "" when the ring is empty.
func (r *Ring) OwnerOf(id grain.ID) string { return r.Owner(Position(id)) }

// Silos returns the ring's silos, sorted. The caller must not modify the
// slice.
func (r *Ring) Silos() []string { return r.silos }

// Len returns how many silos the ring has.
func (r *Ring) Len() int { return len(r.silos) }

// VirtualNodes returns the number of points each silo stands at.
func (r *Ring) VirtualNodes() int { return r.vnodes }

// Contains reports whether silo is on the ring.
func (r *Ring) Contains(silo string) bool {
	_, ok := slices.BinarySearch(r.silos, silo)
	return ok
}

// Without returns the ring without silo (r itself when silo is not on it).
func (r *Ring) Without(silo string) *Ring {
	if !r.Contains(silo) {
		return r
	}
	rest := make([]string, 0, len(r.silos)-1)
	for _, s := range r.silos {
		if s != silo {
			rest = append(rest, s)
		}
	}
	return NewRing(rest, r.vnodes)
}

// Equal reports whether r and o have the same silos and virtual nodes, and
// so the same owners everywhere.
func (r *Ring) Equal(o *Ring) bool {
	return r.vnodes == o.vnodes && slices.Equal(r.silos, o.silos)
}

// Share returns the fraction of the ring's positions that silo owns, 0 to
// 1.
func (r *Ring) Share(silo string) float64 {
	if len(r.points) == 0 {
		return 0
	}
	idx, ok := slices.BinarySearch(r.silos, silo)
	if !ok {
		return 0
	}
	if len(r.silos) == 1 {
		return 1
	}
	const ringSize = 1 << 64 // as a float64
	var share float64
	for i, p := range r.points {
		if r.owners[i] != int32(idx) {
			continue
		}
		// Point i owns the positions after its predecessor, up to itself;
		// the first point's predecessor is the last, across the wrap.
		prev := r.points[(i+len(r.points)-1)%len(r.points)]
		share += float64(p-prev) / ringSize
	}
	return share
}

// Arc is the inclusive range [Lo, Hi] of ring positions; Lo <= Hi.
type Arc struct{ Lo, Hi uint64 }

// Arcs returns the positions silo owns: the h with Owner(h) == silo,
// as arcs sorted by Lo, adjacent ones merged. The arc that wraps past the
// top of the ring is given as two, [x, MaxUint64] and [0, y]. A ring of one
// silo gives that silo [{0, MaxUint64}]; an empty ring, or a silo not on
// it, gives nil.
func (r *Ring) Arcs(silo string) []Arc {
	idx, ok := slices.BinarySearch(r.silos, silo)
	if !ok || len(r.points) == 0 {
		return nil
	}
	me := int32(idx)
	var arcs []Arc
	add := func(lo, hi uint64) {
		if n := len(arcs); n > 0 && arcs[n-1].Hi != math.MaxUint64 && arcs[n-1].Hi+1 == lo {
			arcs[n-1].Hi = hi
			return
		}
		arcs = append(arcs, Arc{lo, hi})
	}
	// Point i owns the positions after its predecessor up to itself,
	// (points[i-1], points[i]]: empty when the two stand at one position,
	// where Owner finds the first of them. The first point owns [0,
	// points[0]] and, across the wrap, (points[last], MaxUint64].
	if r.owners[0] == me {
		add(0, r.points[0])
	}
	for i := 1; i < len(r.points); i++ {
		if r.owners[i] == me && r.points[i-1] < r.points[i] {
			add(r.points[i-1]+1, r.points[i])
		}
	}
	if last := r.points[len(r.points)-1]; r.owners[0] == me && last < math.MaxUint64 {
		add(last+1, math.MaxUint64)
	}
	return arcs
}

// vnodePosition places the v-th virtual node of silo: FNV-1a of
// silo+"#"+v, mixed, so that the points of similar names spread over the
// whole ring.
func vnodePosition(silo string, v int) uint64 {
	h := hashmix.AddByte(hashmix.FNV1a(silo), '#')
	var buf [20]byte
	for _, c := range strconv.AppendInt(buf[:0], int64(v), 10) {
		h = hashmix.AddByte(h, c)
	}
	return hashmix.Mix64(h)
}
