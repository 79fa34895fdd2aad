package placement

import (
	"testing"

	"github.com/granaryio/granary/grain"
)

// benchRequests are one request per strategy over five candidates, the
// calling silo hosting the type.
func benchRequests() []Request {
	cs := make([]Candidate, 5)
	for i, id := range silos(5) {
		cs[i] = Candidate{ID: id, Roles: []string{"frontend"}, Activations: uint64(1000 * i)}
		if i%2 == 1 {
			cs[i].Roles = []string{"backend", "storage"}
		}
	}
	base := Request{Grain: grain.NewID("bank.Account", "alice"), Local: cs[2].ID, LocalHosts: true, Candidates: cs}
	reqs := make([]Request, 0, numStrategies-1)
	for s := Random; s < numStrategies; s++ {
		r := base
		r.Strategy = s
		if s == SiloRole {
			r.Role = "storage"
		}
		reqs = append(reqs, r)
	}
	return reqs
}

func BenchmarkPlace(b *testing.B) {
	for _, seed := range []uint64{0, testSeed} {
		for _, req := range benchRequests() {
			name := req.Strategy.String()
			if seed != 0 {
				name += "/seeded"
			}
			b.Run(name, func(b *testing.B) {
				p, err := New(Config{Default: Random, Seed: seed})
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range req.Candidates {
					p.LoadReported(c.ID, c.Activations)
					p.Placed(c.ID)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.Place(req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkPlaceParallel measures contention: every goroutine places on
// one unseeded Placer.
func BenchmarkPlaceParallel(b *testing.B) {
	for _, req := range benchRequests() {
		b.Run(req.Strategy.String(), func(b *testing.B) {
			p, err := New(DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := p.Place(req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkPlaced(b *testing.B) {
	p, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Placed("10.0.0.1:11111@1700000000")
	}
}
