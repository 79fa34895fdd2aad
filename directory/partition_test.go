package directory_test

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
)

var (
	g1 = grain.NewID("t", "g1")
	g2 = grain.NewID("t", "g2")
	g3 = grain.NewID("t", "g3")
)

func ent(silo string, act uint64) directory.Entry {
	return directory.Entry{Silo: silo, Activation: act}
}

func TestPartition(t *testing.T) {
	// Each step is a call and what it must answer; the partition carries
	// over from step to step.
	type step struct {
		op    string // "register", "unregister", "lookup", "purge", "extract", "len"
		id    grain.ID
		e     directory.Entry
		silo  string
		want  any
		extra []directory.Item // extract: the partition's items after
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first registration wins", []step{
			{op: "register", id: g1, e: ent("a", 1), want: ent("a", 1)},
			{op: "register", id: g1, e: ent("b", 2), want: ent("a", 1)},
			{op: "register", id: g1, e: ent("a", 2), want: ent("a", 1)},
			{op: "lookup", id: g1, want: ent("a", 1)},
			{op: "len", want: 1},
		}},
		{"re-registering the same entry returns it", []step{
			{op: "register", id: g1, e: ent("a", 1), want: ent("a", 1)},
			{op: "register", id: g1, e: ent("a", 1), want: ent("a", 1)},
			{op: "len", want: 1},
		}},
		{"unregister only the recorded entry", []step{
			{op: "register", id: g1, e: ent("a", 2), want: ent("a", 2)},
			{op: "unregister", id: g1, e: ent("a", 1), want: false}, // an older activation
			{op: "unregister", id: g1, e: ent("b", 2), want: false}, // another silo's
			{op: "unregister", id: g2, e: ent("a", 2), want: false}, // another grain
			{op: "lookup", id: g1, want: ent("a", 2)},
			{op: "unregister", id: g1, e: ent("a", 2), want: true},
			{op: "lookup", id: g1, want: nil},
			{op: "unregister", id: g1, e: ent("a", 2), want: false},
			{op: "register", id: g1, e: ent("b", 3), want: ent("b", 3)},
		}},
		{"purge a silo", []step{
			{op: "register", id: g1, e: ent("a", 1), want: ent("a", 1)},
			{op: "register", id: g2, e: ent("b", 1), want: ent("b", 1)},
			{op: "register", id: g3, e: ent("a", 2), want: ent("a", 2)},
			{op: "purge", silo: "a", want: 2},
			{op: "purge", silo: "a", want: 0},
			{op: "lookup", id: g1, want: nil},
			{op: "lookup", id: g2, want: ent("b", 1)},
			{op: "register", id: g1, e: ent("c", 1), want: ent("c", 1)},
		}},
		{"extract", []step{
			{op: "register", id: g3, e: ent("a", 3), want: ent("a", 3)},
			{op: "register", id: g1, e: ent("a", 1), want: ent("a", 1)},
			{op: "register", id: g2, e: ent("b", 2), want: ent("b", 2)},
			{op: "extract", id: g2, want: []directory.Item{{ID: g1, Entry: ent("a", 1)}, {ID: g3, Entry: ent("a", 3)}},
				extra: []directory.Item{{ID: g2, Entry: ent("b", 2)}}},
			{op: "len", want: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := directory.NewPartition()
			for i, s := range tt.steps {
				var got any
				switch s.op {
				case "register":
					got = p.Register(s.id, s.e)
				case "unregister":
					got = p.Unregister(s.id, s.e)
				case "lookup":
					if e, ok := p.Lookup(s.id); ok {
						got = e
					}
				case "purge":
					got = p.PurgeSilo(s.silo)
				case "extract":
					keep := s.id
					got = p.Extract(func(id grain.ID) bool { return id == keep })
					if items := p.Items(); !slices.Equal(items, s.extra) {
						t.Fatalf("step %d: after Extract, Items() = %v, want %v", i, items, s.extra)
					}
				case "len":
					got = p.Len()
				}
				if fmt.Sprint(got) != fmt.Sprint(s.want) {
					t.Fatalf("step %d: %s(%v, %v, %q) = %v, want %v", i, s.op, s.id, s.e, s.silo, got, s.want)
				}
			}
		})
	}
}

func TestPartitionRegisterWithoutSiloPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Register of an entry without a silo did not panic")
		}
	}()
	directory.NewPartition().Register(g1, directory.Entry{Activation: 1})
}

// TestPartitionMatchesModel plays random operations on a Partition and on
// a plain map that states the rules as simply as they go, and compares
// every answer.
func TestPartitionMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 99))
		p := directory.NewPartition()
		model := make(map[grain.ID]directory.Entry)
		ids := make([]grain.ID, 12)
		for i := range ids {
			ids[i] = grain.NewID("t", fmt.Sprint(i))
		}
		silos := []string{"a", "b", "c"}
		randEntry := func() directory.Entry { return ent(silos[r.IntN(len(silos))], uint64(r.IntN(3))) }
		for step := range 2000 {
			id := ids[r.IntN(len(ids))]
			fail := func(format string, args ...any) {
				t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
			}
			switch op := r.IntN(10); {
			case op < 4:
				e := randEntry()
				want, ok := model[id]
				if !ok {
					want = e
					model[id] = e
				}
				if got := p.Register(id, e); got != want {
					fail("Register(%v, %v) = %v, want %v", id, e, got, want)
				}
			case op < 7:
				e := randEntry()
				want := model[id] == e
				if want {
					delete(model, id)
				}
				if got := p.Unregister(id, e); got != want {
					fail("Unregister(%v, %v) = %t, want %t", id, e, got, want)
				}
			case op < 8:
				want, wok := model[id]
				if got, ok := p.Lookup(id); got != want || ok != wok {
					fail("Lookup(%v) = %v, %t, want %v, %t", id, got, ok, want, wok)
				}
			case op < 9 && r.IntN(4) == 0:
				silo := silos[r.IntN(len(silos))]
				want := 0
				maps.DeleteFunc(model, func(_ grain.ID, e directory.Entry) bool {
					if e.Silo == silo {
						want++
						return true
					}
					return false
				})
				if got := p.PurgeSilo(silo); got != want {
					fail("PurgeSilo(%s) = %d, want %d", silo, got, want)
				}
			case op == 9 && r.IntN(4) == 0:
				odd := r.IntN(2)
				keep := func(id grain.ID) bool { return len(id.Key)%2 == odd || id.Key < "5" }
				var want []directory.Item
				for id, e := range model {
					if !keep(id) {
						want = append(want, directory.Item{ID: id, Entry: e})
						delete(model, id)
					}
				}
				slices.SortFunc(want, func(a, b directory.Item) int { return compareIDs(a.ID, b.ID) })
				if got := p.Extract(keep); !slices.Equal(got, want) {
					fail("Extract = %v, want %v", got, want)
				}
			}
			if p.Len() != len(model) {
				fail("Len() = %d, want %d", p.Len(), len(model))
			}
		}
	}
}

func compareIDs(a, b grain.ID) int {
	return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Key, b.Key))
}
