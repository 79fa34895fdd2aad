package reminders

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/granaryio/granary/silo/storage"
)

// TestRangeSets checks the range-set functions against a reference model:
// a set of positions in a universe of 64 positions, placed at the bottom
// of the ring and at its top so that the edges 0 and MaxUint64 are
// exercised.
func TestRangeSets(t *testing.T) {
	const size = 64
	for _, base := range []uint64{0, math.MaxUint64 - size + 1} {
		rnd := rand.New(rand.NewPCG(base, 3))
		randomSet := func() []storage.HashRange {
			var rs []storage.HashRange
			for range rnd.IntN(5) {
				lo, hi := uint64(rnd.IntN(size)), uint64(rnd.IntN(size))
				// Some ranges inverted (dropped by normalize), some
				// overlapping, some adjacent.
				rs = append(rs, storage.HashRange{Lo: base + lo, Hi: base + hi})
			}
			return rs
		}
		model := func(rs []storage.HashRange) (m uint64) {
			for _, r := range rs {
				for h := r.Lo; h >= r.Lo && h <= r.Hi; h++ { // h >= r.Lo stops at the wrap
					m |= 1 << (h - base)
				}
			}
			return m
		}
		normal := func(name string, rs []storage.HashRange) {
			t.Helper()
			for i, r := range rs {
				if r.Lo > r.Hi || i > 0 && (rs[i-1].Hi == math.MaxUint64 || rs[i-1].Hi+1 >= r.Lo) {
					t.Fatalf("%s = %+v: not in normal form at %d", name, rs, i)
				}
			}
		}
		for range 2000 {
			ra, rb := randomSet(), randomSet()
			a, b := normalize(ra), normalize(rb)
			normal("normalize", a)
			ma, mb := model(ra), model(rb)
			if got := model(a); got != ma {
				t.Fatalf("normalize(%+v) = %+v: %b, want %b", ra, a, got, ma)
			}
			u, i, d := union(a, b), intersect(a, b), subtract(a, b)
			normal("union", u)
			normal("intersect", i)
			normal("subtract", d)
			if got := model(u); got != ma|mb {
				t.Fatalf("union(%+v, %+v) = %+v", a, b, u)
			}
			if got := model(i); got != ma&mb {
				t.Fatalf("intersect(%+v, %+v) = %+v", a, b, i)
			}
			if got := model(d); got != ma&^mb {
				t.Fatalf("subtract(%+v, %+v) = %+v", a, b, d)
			}
			for h := range uint64(size) {
				if got, want := contains(a, base+h), ma&(1<<h) != 0; got != want {
					t.Fatalf("contains(%+v, %#x) = %v, want %v", a, base+h, got, want)
				}
			}
		}
	}
}

func TestRangeSetsWholeRing(t *testing.T) {
	whole := []storage.HashRange{{Lo: 0, Hi: math.MaxUint64}}
	halves := []storage.HashRange{{Lo: 1 << 63, Hi: math.MaxUint64}, {Lo: 0, Hi: 1<<63 - 1}}
	if got := normalize(halves); !slices.Equal(got, whole) {
		t.Errorf("normalize(halves) = %+v, want the whole ring", got)
	}
	if got := subtract(whole, whole); got != nil {
		t.Errorf("subtract(whole, whole) = %+v, want nil", got)
	}
	if got := subtract(whole, halves[1:]); !slices.Equal(got, halves[:1]) {
		t.Errorf("subtract(whole, low half) = %+v, want the high half", got)
	}
	if !contains(whole, 0) || !contains(whole, math.MaxUint64) || contains(nil, 0) {
		t.Errorf("contains is wrong at the edges")
	}
	if normalize(nil) != nil || normalize([]storage.HashRange{{Lo: 2, Hi: 1}}) != nil {
		t.Errorf("normalize of nothing is not nil")
	}
}
