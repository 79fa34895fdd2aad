package reminders

import (
	"cmp"
	"slices"

	"github.com/granaryio/granary/silo/storage"
)

// Range sets: a set of ring positions is a []storage.HashRange in normal
// form, sorted by Lo, disjoint and not adjacent (no range starts just past
// another's Hi). The functions below take and return sets in normal form,
// except normalize, which makes one. They are pure.

// normalize returns rs as a set in normal form; see
// storage.NormalizeRanges.
func normalize(rs []storage.HashRange) []storage.HashRange { return storage.NormalizeRanges(rs) }

// contains reports whether h is in the set rs.
func contains(rs []storage.HashRange, h uint64) bool {
	// The first range whose Hi is at or past h is the only one that may
	// hold it.
	i, _ := slices.BinarySearchFunc(rs, h, func(r storage.HashRange, h uint64) int { return cmp.Compare(r.Hi, h) })
	return i < len(rs) && rs[i].Lo <= h
}

// union returns the positions in a or b.
func union(a, b []storage.HashRange) []storage.HashRange {
	return normalize(append(slices.Clip(a), b...))
}

// intersect returns the positions in both a and b.
func intersect(a, b []storage.HashRange) []storage.HashRange {
	var out []storage.HashRange
	for i, j := 0, 0; i < len(a) && j < len(b); {
		if lo, hi := max(a[i].Lo, b[j].Lo), min(a[i].Hi, b[j].Hi); lo <= hi {
			out = append(out, storage.HashRange{Lo: lo, Hi: hi})
		}
		if a[i].Hi < b[j].Hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// subtract returns the positions in a but not in b.
func subtract(a, b []storage.HashRange) []storage.HashRange {
	var out []storage.HashRange
	j := 0
	for _, r := range a {
		for j < len(b) && b[j].Hi < r.Lo {
			j++
		}
		lo, covered := r.Lo, false
		for k := j; k < len(b) && b[k].Lo <= r.Hi; k++ {
			if b[k].Lo > lo {
				out = append(out, storage.HashRange{Lo: lo, Hi: b[k].Lo - 1})
			}
			if b[k].Hi >= r.Hi {
				covered = true
				break
			}
			lo = b[k].Hi + 1 // b[k].Hi < r.Hi, so no overflow
		}
		if !covered {
			out = append(out, storage.HashRange{Lo: lo, Hi: r.Hi})
		}
	}
	return out
}
