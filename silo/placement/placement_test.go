package placement

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/hashmix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testSeed = 42

var testGrain = grain.NewID("bank.Account", "alice")

func newTestPlacer(t testing.TB, def Strategy) *Placer {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = testSeed
	if def != Default {
		cfg.Default = def
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// cands returns candidates named by ids, with no roles and no load.
func cands(ids ...string) []Candidate {
	cs := make([]Candidate, len(ids))
	for i, id := range ids {
		cs[i] = Candidate{ID: id}
	}
	return cs
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		field string // "" means valid
	}{
		{"default", func(*Config) {}, ""},
		{"seeded", func(c *Config) { c.Seed = 7 }, ""},
		{"prefer local", func(c *Config) { c.Default = PreferLocal }, ""},
		{"hash", func(c *Config) { c.Default = Hash }, ""},
		{"activation count", func(c *Config) { c.Default = ActivationCount }, ""},
		{"zero default", func(c *Config) { c.Default = Default }, "Default"},
		{"silo role default", func(c *Config) { c.Default = SiloRole }, "Default"},
		{"stateless worker default", func(c *Config) { c.Default = StatelessWorker }, "Default"},
		{"unknown default", func(c *Config) { c.Default = 99 }, "Default"},
		{"negative default", func(c *Config) { c.Default = -1 }, "Default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			p, err := New(cfg)
			if tt.field == "" {
				if err != nil || p == nil {
					t.Fatalf("New = %v, %v; want a Placer", p, err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("New error = %v; want a *ConfigError naming %s", err, tt.field)
			}
			if want := "placement: config: " + tt.field + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q does not start with %q", err, want)
			}
			if p != nil {
				t.Errorf("New returned a Placer with an error")
			}
		})
	}
	if got := DefaultConfig().Default; got != Random {
		t.Errorf("DefaultConfig().Default = %v, want random", got)
	}
}

func TestStrategyString(t *testing.T) {
	tests := []struct {
		s    Strategy
		want string
	}{
		{Default, "default"},
		{Random, "random"},
		{PreferLocal, "prefer_local"},
		{Hash, "hash"},
		{ActivationCount, "activation_count"},
		{SiloRole, "silo_role"},
		{StatelessWorker, "stateless_worker"},
		{numStrategies, "Strategy(7)"},
		{-3, "Strategy(-3)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Strategy(%d).String() = %q, want %q", int(tt.s), got, tt.want)
		}
	}
}

// TestStrategyValuesMatchGrain: the strategies that grain.Placement also
// has share its values, so a reader of either sees the same numbers.
func TestStrategyValuesMatchGrain(t *testing.T) {
	pairs := []struct {
		p grain.Placement
		s Strategy
	}{
		{grain.PlacementDefault, Default},
		{grain.PlacementRandom, Random},
		{grain.PlacementPreferLocal, PreferLocal},
		{grain.PlacementHash, Hash},
		{grain.PlacementActivationCount, ActivationCount},
	}
	for _, pr := range pairs {
		if int(pr.p) != int(pr.s) || pr.p.String() != pr.s.String() {
			t.Errorf("grain %v = %d, placement %v = %d", pr.p, int(pr.p), pr.s, int(pr.s))
		}
	}
}

// TestPlace is the table of each strategy's choices. Where a strategy
// draws at random, the test checks the result is one of those allowed.
func TestPlace(t *testing.T) {
	roled := []Candidate{
		{ID: "a", Roles: []string{"frontend"}},
		{ID: "b", Roles: []string{"backend", "storage"}},
		{ID: "c", Roles: []string{"storage"}},
		{ID: "d"},
	}
	loaded := []Candidate{
		{ID: "busy", Activations: 1000},
		{ID: "idle", Activations: 3},
	}
	tests := []struct {
		name string
		def  Strategy // Config.Default; Default means DefaultConfig's
		req  Request
		want []string // the allowed results
	}{
		{"random one", 0, Request{Strategy: Random, Candidates: cands("a")}, []string{"a"}},
		{"random many", 0, Request{Strategy: Random, Candidates: cands("a", "b", "c")}, []string{"a", "b", "c"}},
		{"random ignores local", 0, Request{Strategy: Random, Local: "z", LocalHosts: true, Candidates: cands("a", "b")}, []string{"a", "b"}},
		{"default is random", 0, Request{Candidates: cands("a", "b")}, []string{"a", "b"}},
		{"default from config", PreferLocal, Request{Local: "b", LocalHosts: true, Candidates: cands("a", "b", "c")}, []string{"b"}},
		{"default hash from config", Hash, Request{Candidates: cands("only")}, []string{"only"}},

		{"prefer local hosts", 0, Request{Strategy: PreferLocal, Local: "b", LocalHosts: true, Candidates: cands("a", "b", "c")}, []string{"b"}},
		{"prefer local trusts LocalHosts", 0, Request{Strategy: PreferLocal, Local: "b", LocalHosts: true}, []string{"b"}},
		{"prefer local does not host", 0, Request{Strategy: PreferLocal, Local: "z", Candidates: cands("a", "c")}, []string{"a", "c"}},
		{"prefer local inactive", 0, Request{Strategy: PreferLocal, Local: "b", Candidates: cands("a", "b")}, []string{"a", "b"}},

		{"stateless worker hosts", 0, Request{Strategy: StatelessWorker, Local: "c", LocalHosts: true, Candidates: cands("a", "b", "c")}, []string{"c"}},
		{"stateless worker remote", 0, Request{Strategy: StatelessWorker, Local: "z", Candidates: cands("a", "b")}, []string{"a", "b"}},

		{"hash one", 0, Request{Strategy: Hash, Grain: testGrain, Candidates: cands("a")}, []string{"a"}},
		{"hash many", 0, Request{Strategy: Hash, Grain: testGrain, Candidates: cands("a", "b", "c")}, []string{placeHashRef(testGrain, "a", "b", "c")}},
		{"hash ignores local", 0, Request{Strategy: Hash, Grain: testGrain, Local: "x", LocalHosts: true, Candidates: cands("x", "y", "z")}, []string{placeHashRef(testGrain, "x", "y", "z")}},

		{"activation count one", 0, Request{Strategy: ActivationCount, Candidates: loaded[:1]}, []string{"busy"}},
		{"activation count two", 0, Request{Strategy: ActivationCount, Candidates: loaded}, []string{"idle"}},
		{"activation count equal", 0, Request{Strategy: ActivationCount, Candidates: cands("a", "b")}, []string{"a", "b"}},
		{"activation count max load", 0, Request{Strategy: ActivationCount, Candidates: []Candidate{{ID: "a", Activations: ^uint64(0)}, {ID: "b", Activations: ^uint64(0) - 1}}}, []string{"b"}},

		{"role single", 0, Request{Strategy: SiloRole, Role: "frontend", Candidates: roled}, []string{"a"}},
		{"role several", 0, Request{Strategy: SiloRole, Role: "storage", Candidates: roled}, []string{"b", "c"}},
		{"role second of many", 0, Request{Strategy: SiloRole, Role: "backend", Candidates: roled}, []string{"b"}},
		{"role ignores local", 0, Request{Strategy: SiloRole, Role: "frontend", Local: "d", LocalHosts: true, Candidates: roled}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestPlacer(t, tt.def)
			seen := map[string]bool{}
			for range 200 {
				got, err := p.Place(tt.req)
				if err != nil {
					t.Fatalf("Place: %v", err)
				}
				if !slices.Contains(tt.want, got) {
					t.Fatalf("Place = %q, want one of %q", got, tt.want)
				}
				seen[got] = true
			}
			// Every allowed result comes up in 200 draws (the odds
			// against are below 2⁻¹⁰⁰, and the Placer is seeded).
			if len(seen) != len(tt.want) {
				t.Errorf("Place chose %v over 200 draws; want each of %q", seen, tt.want)
			}
		})
	}
}

// placeHashRef is a reference rendezvous hash: sort the candidates by
// weight, heaviest first, and take the first.
func placeHashRef(id grain.ID, silos ...string) string {
	g := hashmix.Mix64(id.Hash())
	s := slices.Clone(silos)
	slices.SortFunc(s, func(a, b string) int {
		wa, wb := weight(g, a), weight(g, b)
		switch {
		case wa > wb:
			return -1
		case wa < wb:
			return 1
		}
		return strings.Compare(a, b)
	})
	return s[0]
}

func TestPlaceErrors(t *testing.T) {
	roled := []Candidate{{ID: "a", Roles: []string{"frontend"}}, {ID: "b"}}
	tests := []struct {
		name     string
		req      Request
		code     codes.Code
		sentinel error
		contains []string
	}{
		{"random none", Request{Strategy: Random}, codes.Unavailable, ErrNoSilo, []string{"placement: no active silo hosts grain type bank.Account"}},
		{"default none", Request{Candidates: []Candidate{}}, codes.Unavailable, ErrNoSilo, []string{"bank.Account"}},
		{"prefer local none", Request{Strategy: PreferLocal, Local: "me"}, codes.Unavailable, ErrNoSilo, []string{"bank.Account"}},
		{"stateless worker none", Request{Strategy: StatelessWorker, Local: "me"}, codes.Unavailable, ErrNoSilo, []string{"bank.Account"}},
		{"hash none", Request{Strategy: Hash}, codes.Unavailable, ErrNoSilo, []string{"bank.Account"}},
		{"activation count none", Request{Strategy: ActivationCount}, codes.Unavailable, ErrNoSilo, []string{"bank.Account"}},
		{"role none at all", Request{Strategy: SiloRole, Role: "backend"}, codes.Unavailable, ErrNoSilo, []string{"bank.Account"}},
		{"role none with role", Request{Strategy: SiloRole, Role: "backend", Candidates: roled}, codes.FailedPrecondition, ErrNoSiloWithRole,
			[]string{"placement: no active silo hosts grain type bank.Account with role \"backend\""}},
		{"role case matters", Request{Strategy: SiloRole, Role: "Frontend", Candidates: roled}, codes.FailedPrecondition, ErrNoSiloWithRole, []string{"Frontend"}},
		{"role empty", Request{Strategy: SiloRole, Candidates: roled}, codes.InvalidArgument, ErrBadRequest, []string{"bank.Account", "Role"}},
		{"unknown strategy", Request{Strategy: 99, Candidates: cands("a")}, codes.InvalidArgument, ErrBadRequest, []string{"Strategy(99)"}},
		{"negative strategy", Request{Strategy: -1, Candidates: cands("a")}, codes.InvalidArgument, ErrBadRequest, []string{"Strategy(-1)"}},
		{"empty candidate ID", Request{Strategy: Hash, Candidates: cands("a", "")}, codes.InvalidArgument, ErrBadRequest, []string{"Candidates[1]"}},
		{"local hosts without local", Request{Strategy: PreferLocal, LocalHosts: true, Candidates: cands("a")}, codes.InvalidArgument, ErrBadRequest, []string{"Local"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestPlacer(t, Default)
			tt.req.Grain = testGrain
			got, err := p.Place(tt.req)
			if err == nil {
				t.Fatalf("Place = %q; want an error", got)
			}
			if got != "" {
				t.Errorf("Place returned %q with its error", got)
			}
			if c := status.Code(err); c != tt.code {
				t.Errorf("code = %v, want %v (%v)", c, tt.code, err)
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tt.sentinel)
			}
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if s, ok := status.FromError(err); !ok || s.Message() != err.Error() {
				t.Errorf("status.FromError = %v, %v; want the error's message", s, ok)
			}
		})
	}
}

// TestPlaceNeverPanics throws odd requests at every strategy.
func TestPlaceNeverPanics(t *testing.T) {
	p := newTestPlacer(t, Default)
	odd := [][]Candidate{
		nil,
		{},
		cands(""),
		cands("a", "a", "a"),
		{{ID: "a", Activations: ^uint64(0)}, {ID: "b", Activations: ^uint64(0)}},
		{{ID: "a", Roles: []string{""}}, {ID: "b", Roles: nil}},
	}
	for s := Strategy(-2); s < numStrategies+2; s++ {
		for _, cs := range odd {
			for _, local := range []bool{false, true} {
				req := Request{Strategy: s, Candidates: cs, LocalHosts: local, Role: "r"}
				if got, err := p.Place(req); err == nil && got == "" {
					t.Errorf("Place(%v, %v) = \"\" with no error", s, cs)
				}
				p.Placed("a")
				p.Placed("")
			}
		}
	}
	// Saturation: a silo placed on past the uint64 range stays the most
	// loaded instead of wrapping to the least.
	p.loads["sat"] = load{sinceReport: ^uint64(0)}
	p.Placed("sat")
	for range 50 {
		got, err := p.Place(Request{Strategy: ActivationCount, Candidates: []Candidate{{ID: "sat", Activations: 5}, {ID: "b", Activations: 1 << 62}}})
		if err != nil || got != "b" {
			t.Fatalf("Place = %q, %v; want b", got, err)
		}
	}
}

// TestSeedDeterministic: two Placers with one seed make the same choices.
func TestSeedDeterministic(t *testing.T) {
	a, b := newTestPlacer(t, Default), newTestPlacer(t, Default)
	cs := cands("a", "b", "c", "d", "e")
	for i := range 1000 {
		req := Request{Strategy: Strategy(1 + i%2*3), Candidates: cs} // Random, ActivationCount
		x, _ := a.Place(req)
		y, _ := b.Place(req)
		if x != y {
			t.Fatalf("draw %d: %q != %q", i, x, y)
		}
	}
}
