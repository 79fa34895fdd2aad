package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/granaryio/granary/grain"
)

const hashGrains = 10000

func hashIDs(n int) []grain.ID {
	ids := make([]grain.ID, n)
	for i := range ids {
		ids[i] = grain.NewID("bank.Account", fmt.Sprint(i))
	}
	return ids
}

func silos(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("10.0.0.%d:11111@%d", i+1, 1700000000+i)
	}
	return s
}

// assign places every id by Hash over the silos named.
func assign(t *testing.T, p *Placer, ids []grain.ID, silos []string) map[grain.ID]string {
	t.Helper()
	cs := cands(silos...)
	m := make(map[grain.ID]string, len(ids))
	for _, id := range ids {
		got, err := p.Place(Request{Grain: id, Strategy: Hash, Candidates: cs})
		if err != nil {
			t.Fatalf("Place(%v): %v", id, err)
		}
		m[id] = got
	}
	return m
}

// TestHashStable: the same ID gets the same silo every time, from any
// Placer (seeded or not), whatever the order of the candidates.
func TestHashStable(t *testing.T) {
	seeded := newTestPlacer(t, Default)
	unseeded, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ss := silos(7)
	for _, id := range hashIDs(500) {
		want, _ := seeded.Place(Request{Grain: id, Strategy: Hash, Candidates: cands(ss...)})
		if ref := placeHashRef(id, ss...); want != ref {
			t.Fatalf("%v: Place = %q, reference = %q", id, want, ref)
		}
		for range 5 {
			shuffled := slices.Clone(ss)
			r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			for _, p := range []*Placer{seeded, unseeded} {
				if got, _ := p.Place(Request{Grain: id, Strategy: Hash, Candidates: cands(shuffled...)}); got != want {
					t.Fatalf("%v over %q: %q, over %q: %q", id, ss, want, shuffled, got)
				}
			}
		}
	}
}

// TestHashSpread: Hash spreads grains evenly over the silos.
func TestHashSpread(t *testing.T) {
	p := newTestPlacer(t, Default)
	tests := []struct {
		name  string
		silos []string
	}{
		{"five", silos(5)},
		{"similar names", []string{"silo-1", "silo-2", "silo-3", "silo-4", "silo-5"}},
		{"two", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			count := map[string]int{}
			for _, s := range assign(t, p, hashIDs(hashGrains), tt.silos) {
				count[s]++
			}
			want := hashGrains / len(tt.silos)
			for _, s := range tt.silos {
				if c := count[s]; c < want*85/100 || c > want*115/100 {
					t.Errorf("silo %s got %d of %d grains; want %d ± 15%%", s, c, hashGrains, want)
				}
			}
		})
	}
}

// TestHashMinimalMovement: when a silo leaves, only its grains move, and
// they spread over the others; when a silo joins, grains move only to it,
// about 1/n of them.
func TestHashMinimalMovement(t *testing.T) {
	p := newTestPlacer(t, Default)
	ids := hashIDs(hashGrains)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{2, 3, 5, 8} {
		t.Run(fmt.Sprintf("%d silos", n), func(t *testing.T) {
			all := silos(n + 1)
			before := all[:n]
			base := assign(t, p, ids, before)

			// Leave: remove a random silo.
			gone := before[r.IntN(n)]
			after := slices.DeleteFunc(slices.Clone(before), func(s string) bool { return s == gone })
			moved := map[string]int{}
			for id, s := range assign(t, p, ids, after) {
				switch {
				case base[id] != gone && s != base[id]:
					t.Fatalf("%v moved from %s to %s when %s left", id, base[id], s, gone)
				case base[id] == gone:
					if s == gone {
						t.Fatalf("%v stayed on %s, which left", id, gone)
					}
					moved[s]++
				}
			}
			if len(after) > 0 && len(moved) != len(after) {
				t.Errorf("the grains of %s went to %v; want all %d others", gone, moved, len(after))
			}

			// Join: add a silo.
			joined := all[n]
			took := 0
			for id, s := range assign(t, p, ids, all) {
				if s != base[id] {
					if s != joined {
						t.Fatalf("%v moved from %s to %s when %s joined", id, base[id], s, joined)
					}
					took++
				}
			}
			want := hashGrains / (n + 1)
			if took < want*80/100 || took > want*120/100 {
				t.Errorf("%s took %d of %d grains when it joined; want %d ± 20%%", joined, took, hashGrains, want)
			}
		})
	}
}

// TestHashProperty checks the leave property on random candidate sets
// against the sorting reference.
func TestHashProperty(t *testing.T) {
	p := newTestPlacer(t, Default)
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 2000 {
		n := 1 + r.IntN(9)
		ss := make([]string, n)
		for i := range ss {
			ss[i] = fmt.Sprintf("s%d", r.IntN(20)) // duplicates allowed
		}
		id := grain.NewID("t", fmt.Sprint(r.Uint64()))
		got, err := p.Place(Request{Grain: id, Strategy: Hash, Candidates: cands(ss...)})
		if err != nil || got != placeHashRef(id, ss...) {
			t.Fatalf("round %d: Place(%v over %q) = %q, %v; reference %q", round, id, ss, got, err, placeHashRef(id, ss...))
		}
		// Remove a silo other than the chosen one: the choice holds.
		other := ss[r.IntN(n)]
		if other == got {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(ss), func(s string) bool { return s == other })
		if again, _ := p.Place(Request{Grain: id, Strategy: Hash, Candidates: cands(rest...)}); again != got {
			t.Fatalf("round %d: removing %s moved %v from %s to %s", round, other, id, got, again)
		}
	}
}
