package directory_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sampleIDs returns n grain IDs with sequential keys, as applications make
// them.
func sampleIDs(n int) []grain.ID {
	ids := make([]grain.ID, n)
	for i := range ids {
		ids[i] = grain.NewID("bank.Account", strconv.Itoa(i))
	}
	return ids
}

func siloNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("10.0.0.%d:11111/1700000000", i+1)
	}
	return s
}

func TestRingDeterministic(t *testing.T) {
	tests := []struct {
		name string
		a, b []string
	}{
		{"order", []string{"a", "b", "c"}, []string{"c", "a", "b"}},
		{"duplicates", []string{"a", "b", "c"}, []string{"b", "a", "c", "a", "b"}},
		{"empty names", []string{"a", "b"}, []string{"", "b", "a", ""}},
	}
	ids := sampleIDs(5000)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ra, rb := directory.NewRing(tt.a, 64), directory.NewRing(tt.b, 64)
			if !slices.Equal(ra.Silos(), rb.Silos()) || !ra.Equal(rb) {
				t.Fatalf("Silos() = %v and %v, want the same", ra.Silos(), rb.Silos())
			}
			for _, id := range ids {
				if oa, ob := ra.OwnerOf(id), rb.OwnerOf(id); oa != ob {
					t.Fatalf("OwnerOf(%v) = %q and %q", id, oa, ob)
				}
			}
			r := rand.New(rand.NewPCG(1, 2))
			for range 5000 {
				h := r.Uint64()
				if oa, ob := ra.Owner(h), rb.Owner(h); oa != ob {
					t.Fatalf("Owner(%#x) = %q and %q", h, oa, ob)
				}
			}
		})
	}
}

// TestRingStable pins a few owners: every process of a cluster, of any
// version, must place grains alike, so the hashing may never change.
func TestRingStable(t *testing.T) {
	r := directory.NewRing([]string{"a", "b", "c"}, 64)
	for _, tt := range []struct {
		key, owner string
	}{
		{"alice", "a"}, {"bob", "b"}, {"carol", "b"}, {"0", "b"}, {"1", "c"},
	} {
		if got := r.OwnerOf(grain.NewID("bank.Account", tt.key)); got != tt.owner {
			t.Errorf("OwnerOf(bank.Account/%s) = %q, want %q", tt.key, got, tt.owner)
		}
	}
	if got, want := directory.Position(grain.NewID("bank.Account", "alice")), uint64(0x84289a008cf89566); got != want {
		t.Errorf("Position(bank.Account/alice) = %#x, want %#x", got, want)
	}
}

func TestRingBalance(t *testing.T) {
	ids := sampleIDs(200_000)
	for n := 3; n <= 5; n++ {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			silos := siloNames(n)
			r := directory.NewRing(silos, 64)
			count := make(map[string]int)
			for _, id := range ids {
				count[r.OwnerOf(id)]++
			}
			var total float64
			for _, s := range silos {
				// With 64 virtual nodes a share varies by about 12% of
				// 1/N; 30% is more than twice that.
				got := float64(count[s]) / float64(len(ids)) * float64(n)
				if got < 0.7 || got > 1.3 {
					t.Errorf("%s owns %.3f/N of the sample, want 0.7/N to 1.3/N", s, got)
				}
				share := r.Share(s)
				total += share
				if math.Abs(share*float64(n)-got) > 0.05 {
					t.Errorf("%s: Share() = %.4f, but it owns %.4f of the sample", s, share, got/float64(n))
				}
			}
			if math.Abs(total-1) > 1e-9 {
				t.Errorf("shares sum to %v, want 1", total)
			}
		})
	}
}

// TestRingSequentialKeysSpread: keys that differ only in their last byte
// fall close together under FNV-1a alone; Position spreads them.
func TestRingSequentialKeysSpread(t *testing.T) {
	r := directory.NewRing(siloNames(4), 64)
	seen := make(map[string]int)
	for i := range 10 {
		seen[r.OwnerOf(grain.NewID("user", "user"+strconv.Itoa(i)))]++
	}
	if len(seen) < 3 {
		t.Errorf("user0..user9 fall on %d silos (%v), want at least 3 of 4", len(seen), seen)
	}
}

func TestRingMinimalMovement(t *testing.T) {
	ids := sampleIDs(50_000)
	for n := 1; n <= 6; n++ {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			silos := siloNames(n + 1)
			before := directory.NewRing(silos[:n], 64)
			after := directory.NewRing(silos, 64)
			joined := silos[n]
			moved := 0
			for _, id := range ids {
				ob, oa := before.OwnerOf(id), after.OwnerOf(id)
				if ob != oa {
					moved++
					if oa != joined {
						t.Fatalf("%v moved from %s to %s when %s joined", id, ob, oa, joined)
					}
				}
			}
			// The newcomer takes about 1/(n+1) of the keys.
			frac := float64(moved) / float64(len(ids)) * float64(n+1)
			if frac < 0.6 || frac > 1.4 {
				t.Errorf("%.3f/(N+1) of the keys moved to %s, want about 1/(N+1)", frac, joined)
			}
			// Leaving is the reverse: only the leaver's keys move.
			left := after.Without(joined)
			if !left.Equal(before) {
				t.Fatalf("Without(%s) = %v, want %v", joined, left.Silos(), before.Silos())
			}
		})
	}
}

func TestRingEmptyAndSingle(t *testing.T) {
	empty := directory.NewRing(nil, 64)
	id := grain.NewID("t", "k")
	if empty.Len() != 0 || len(empty.Silos()) != 0 || empty.Owner(42) != "" || empty.OwnerOf(id) != "" || empty.Share("a") != 0 {
		t.Errorf("empty ring: Len %d, Silos %v, Owner %q, OwnerOf %q, Share %v; want nothing",
			empty.Len(), empty.Silos(), empty.Owner(42), empty.OwnerOf(id), empty.Share("a"))
	}
	if !directory.NewRing([]string{""}, 64).Equal(empty) {
		t.Error("a ring of the empty name is not empty")
	}
	one := directory.NewRing([]string{"a"}, 0) // vnodes < 1 is 1
	if one.VirtualNodes() != 1 {
		t.Errorf("VirtualNodes() = %d, want 1", one.VirtualNodes())
	}
	for _, h := range []uint64{0, 1, 1 << 63, math.MaxUint64} {
		if got := one.Owner(h); got != "a" {
			t.Errorf("Owner(%#x) = %q on a ring of a alone", h, got)
		}
	}
	if one.Share("a") != 1 || one.Share("b") != 0 || !one.Contains("a") || one.Contains("b") {
		t.Errorf("Share(a) = %v, Share(b) = %v, Contains(a), Contains(b) = %t, %t", one.Share("a"), one.Share("b"), one.Contains("a"), one.Contains("b"))
	}
	if w := one.Without("a"); w.Len() != 0 {
		t.Errorf("Without(a) has %v", w.Silos())
	}
	if w := one.Without("z"); w != one {
		t.Error("Without of an absent silo built a new ring")
	}
}

func BenchmarkRingOwnerOf(b *testing.B) {
	r := directory.NewRing(siloNames(10), 64)
	ids := sampleIDs(1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.OwnerOf(ids[i%len(ids)])
	}
}

// TestRingArcs checks Arcs against Owner on random rings: a position is in
// one of a silo's arcs exactly when the silo owns it, and the arcs of all
// silos cover the ring once, without gap or overlap.
func TestRingArcs(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 11))
	for trial := range 200 {
		n := 1 + trial%5
		silos := make([]string, n)
		for i := range silos {
			silos[i] = fmt.Sprintf("s%d-%x", i, rnd.Uint64())
		}
		r := directory.NewRing(silos, 1+rnd.IntN(8))
		arcs := make(map[string][]directory.Arc, n)
		var all []directory.Arc
		for _, s := range silos {
			a := r.Arcs(s)
			if len(a) == 0 {
				t.Fatalf("ring %v: Arcs(%q) is empty", silos, s)
			}
			for i, x := range a {
				if x.Lo > x.Hi {
					t.Fatalf("Arcs(%q)[%d] = %+v: Lo > Hi", s, i, x)
				}
				if i > 0 && (a[i-1].Hi == math.MaxUint64 || a[i-1].Hi+1 >= x.Lo) {
					t.Fatalf("Arcs(%q) = %+v: not sorted, or adjacent arcs not merged, at %d", s, a, i)
				}
			}
			arcs[s] = a
			all = append(all, a...)
		}
		if n == 1 && !slices.Equal(arcs[silos[0]], []directory.Arc{{0, math.MaxUint64}}) {
			t.Fatalf("ring of one: Arcs = %+v, want the whole ring", arcs[silos[0]])
		}

		// The arcs of all silos partition [0, MaxUint64].
		slices.SortFunc(all, func(a, b directory.Arc) int { return cmp.Compare(a.Lo, b.Lo) })
		if all[0].Lo != 0 || all[len(all)-1].Hi != math.MaxUint64 {
			t.Fatalf("ring %v: arcs span [%#x, %#x], want the whole ring", silos, all[0].Lo, all[len(all)-1].Hi)
		}
		for i := 1; i < len(all); i++ {
			if all[i-1].Hi == math.MaxUint64 || all[i-1].Hi+1 != all[i].Lo {
				t.Fatalf("ring %v: arcs %+v and %+v leave a gap or overlap", silos, all[i-1], all[i])
			}
		}

		// Owner agrees with Arcs at the ends of the ring, at every arc
		// boundary (each arc's Hi is a point, its Lo one past a point) and
		// one either side of it, and at random positions.
		probes := []uint64{0, math.MaxUint64}
		for _, x := range all {
			probes = append(probes, x.Lo, x.Lo-1, x.Lo+1, x.Hi, x.Hi-1, x.Hi+1)
		}
		for range 200 {
			probes = append(probes, rnd.Uint64())
		}
		for _, h := range probes {
			owner := r.Owner(h)
			for _, s := range silos {
				in := slices.ContainsFunc(arcs[s], func(a directory.Arc) bool { return a.Lo <= h && h <= a.Hi })
				if in != (owner == s) {
					t.Fatalf("ring %v: Owner(%#x) = %q, but %#x in Arcs(%q) is %v", silos, h, owner, h, s, in)
				}
			}
		}
	}
}

func TestRingArcsEmpty(t *testing.T) {
	if a := directory.NewRing(nil, 8).Arcs("a"); a != nil {
		t.Errorf("empty ring: Arcs = %+v, want nil", a)
	}
	if a := directory.NewRing([]string{"a", "b"}, 8).Arcs("c"); a != nil {
		t.Errorf("silo not on the ring: Arcs = %+v, want nil", a)
	}
	if a := directory.NewRing([]string{"a"}, 1).Arcs("a"); !slices.Equal(a, []directory.Arc{{0, math.MaxUint64}}) {
		t.Errorf("ring of one with one point: Arcs = %+v, want [{0 MaxUint64}]", a)
	}
}
