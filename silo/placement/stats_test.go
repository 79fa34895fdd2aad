package placement

import (
	"fmt"
	"sync"
	"testing"
)

const draws = 10000

// count places req draws times and counts the choices.
func count(t *testing.T, p *Placer, req Request) map[string]int {
	t.Helper()
	c := map[string]int{}
	for range draws {
		got, err := p.Place(req)
		if err != nil {
			t.Fatalf("Place: %v", err)
		}
		c[got]++
	}
	return c
}

// TestRandomSpread: the random strategies spread uniformly over the
// silos they may pick. With 10k draws the count of each of n silos has a
// standard deviation below 50, so a band of ±10% (≥ 4 deviations for
// n ≤ 5) holds for an unseeded Placer too.
func TestRandomSpread(t *testing.T) {
	five := cands("a", "b", "c", "d", "e")
	roled := []Candidate{
		{ID: "a", Roles: []string{"x"}},
		{ID: "b"},
		{ID: "c", Roles: []string{"y", "x"}},
		{ID: "d", Roles: []string{"x"}},
		{ID: "e", Roles: []string{"y"}},
	}
	tests := []struct {
		name string
		req  Request
		want []string
	}{
		{"random", Request{Strategy: Random, Candidates: five}, []string{"a", "b", "c", "d", "e"}},
		{"default", Request{Candidates: five}, []string{"a", "b", "c", "d", "e"}},
		{"prefer local elsewhere", Request{Strategy: PreferLocal, Local: "z", Candidates: five}, []string{"a", "b", "c", "d", "e"}},
		{"stateless worker elsewhere", Request{Strategy: StatelessWorker, Local: "z", Candidates: five}, []string{"a", "b", "c", "d", "e"}},
		{"silo role", Request{Strategy: SiloRole, Role: "x", Candidates: roled}, []string{"a", "c", "d"}},
		{"activation count, equal loads", Request{Strategy: ActivationCount, Candidates: five}, []string{"a", "b", "c", "d", "e"}},
		{"activation count, two", Request{Strategy: ActivationCount, Candidates: five[:2]}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		for _, seed := range []uint64{testSeed, 0} {
			t.Run(fmt.Sprintf("%s/seed=%d", tt.name, seed), func(t *testing.T) {
				p, err := New(Config{Default: Random, Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				c := count(t, p, tt.req)
				want := draws / len(tt.want)
				for _, s := range tt.want {
					if c[s] < want*90/100 || c[s] > want*110/100 {
						t.Errorf("%s chosen %d times of %d; want %d ± 10%% (%v)", s, c[s], draws, want, c)
					}
				}
				if len(c) != len(tt.want) {
					t.Errorf("chose %v; want only %q", c, tt.want)
				}
			})
		}
	}
}

// TestActivationCountPrefersLessLoaded: with loads 0 < 100 < ... < 400 and
// no placements recorded, a silo wins exactly when it is drawn with a more
// loaded one: 4/10, 3/10, 2/10, 1/10 and 0 of the time.
func TestActivationCountPrefersLessLoaded(t *testing.T) {
	p := newTestPlacer(t, Default)
	cs := make([]Candidate, 5)
	for i := range cs {
		cs[i] = Candidate{ID: fmt.Sprintf("s%d", i), Activations: uint64(100 * i)}
	}
	c := count(t, p, Request{Strategy: ActivationCount, Candidates: cs})
	for i, want := range []int{4000, 3000, 2000, 1000, 0} {
		got := c[cs[i].ID]
		if got < want-300 || got > want+300 {
			t.Errorf("%s (load %d) chosen %d times; want %d ± 300 (%v)", cs[i].ID, cs[i].Activations, got, want, c)
		}
	}
	if c["s4"] != 0 {
		t.Errorf("the most loaded silo was chosen %d times", c["s4"])
	}
}

// TestActivationCountBurst: a burst of placements between two load
// reports spreads over the silos when each is recorded with Placed, and
// herds onto the silo that looked least loaded when none is.
func TestActivationCountBurst(t *testing.T) {
	const burst = 3000
	cs := []Candidate{{ID: "a", Activations: 0}, {ID: "b", Activations: 500}, {ID: "c", Activations: 500}}
	base := map[string]uint64{"a": 0, "b": 500, "c": 500}
	run := func(record bool) (spread uint64, final map[string]uint64) {
		p := newTestPlacer(t, Default)
		final = map[string]uint64{}
		for k, v := range base {
			final[k] = v
		}
		for range burst {
			got, err := p.Place(Request{Strategy: ActivationCount, Candidates: cs})
			if err != nil {
				t.Fatal(err)
			}
			final[got]++
			if record {
				p.Placed(got)
			}
		}
		lo, hi := ^uint64(0), uint64(0)
		for _, v := range final {
			lo, hi = min(lo, v), max(hi, v)
		}
		return hi - lo, final
	}
	// Recorded: a catches up with b and c, then the three stay within
	// a few activations of each other (the power of two choices keeps the
	// gap at O(log log n)).
	if spread, final := run(true); spread > 4 {
		t.Errorf("with Placed, loads after the burst are %v: spread %d, want ≤ 4", final, spread)
	}
	// Not recorded: a wins every draw it is in, 2/3 of them.
	if spread, final := run(false); final["a"] < burst*60/100 || spread < 1000 {
		t.Errorf("without Placed, loads after the burst are %v; want a herded to about %d", final, burst*2/3)
	}
}

// TestLoadReported: a report replaces the request's figure and clears the
// placements recorded before it; Forget drops it all.
func TestLoadReported(t *testing.T) {
	cs := []Candidate{{ID: "a", Activations: 10}, {ID: "b", Activations: 20}}
	req := Request{Strategy: ActivationCount, Candidates: cs}
	steps := []struct {
		name string
		do   func(p *Placer)
		want string
	}{
		{"request loads", func(*Placer) {}, "a"},
		{"placed on a", func(p *Placer) {
			for range 11 {
				p.Placed("a")
			}
		}, "b"},
		{"a reports", func(p *Placer) { p.LoadReported("a", 15) }, "a"},
		{"placed on a again", func(p *Placer) {
			for range 6 {
				p.Placed("a")
			}
		}, "b"},
		{"b reports more", func(p *Placer) { p.LoadReported("b", 30) }, "a"},
		{"b reports less", func(p *Placer) { p.LoadReported("b", 5) }, "b"},
		{"b forgotten", func(p *Placer) { p.Forget("b") }, "b"}, // a: 15+6 vs b: 20 again
		{"a forgotten", func(p *Placer) { p.Forget("a") }, "a"}, // a: 10 vs b: 20
		{"forget unknown", func(p *Placer) { p.Forget("zz") }, "a"},
		{"report of a stranger", func(p *Placer) { p.LoadReported("zz", 0) }, "a"},
	}
	p := newTestPlacer(t, Default)
	for _, st := range steps {
		st.do(p)
		for range 20 {
			if got, err := p.Place(req); err != nil || got != st.want {
				t.Fatalf("after %q: Place = %q, %v; want %q", st.name, got, err, st.want)
			}
		}
	}
}

// TestConcurrent places, records and reports from many goroutines at once,
// for the race detector, on a seeded and an unseeded Placer.
func TestConcurrent(t *testing.T) {
	const (
		goroutines = 8
		rounds     = 2000
	)
	cs := []Candidate{
		{ID: "a", Roles: []string{"r"}}, {ID: "b", Activations: 3}, {ID: "c", Roles: []string{"r"}, Activations: 1},
	}
	for _, seed := range []uint64{testSeed, 0} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			p, err := New(Config{Default: ActivationCount, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errc := make(chan error, goroutines)
			for g := range goroutines {
				wg.Go(func() {
					for i := range rounds {
						req := Request{
							Grain:      testGrain,
							Strategy:   Strategy(i % int(numStrategies)),
							Role:       "r",
							Local:      "a",
							LocalHosts: g%2 == 0,
							Candidates: cs,
						}
						got, err := p.Place(req)
						if err != nil {
							errc <- fmt.Errorf("goroutine %d, %v: %w", g, req.Strategy, err)
							return
						}
						p.Placed(got)
						switch i % 97 {
						case 0:
							p.LoadReported(got, uint64(i))
						case 1:
							p.Forget(got)
						}
					}
				})
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
		})
	}
}
