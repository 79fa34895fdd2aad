package placement_test

import (
	"fmt"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/placement"
	"google.golang.org/grpc/status"
)

// A silo asks where to activate a grain with no activation, then records
// the placement so that ActivationCount counts it before the next load
// report.
func Example() {
	p, err := placement.New(placement.DefaultConfig())
	if err != nil {
		panic(err)
	}
	req := placement.Request{
		Grain:    grain.NewID("bank.Account", "alice"),
		Strategy: placement.ActivationCount,
		Local:    "silo-a",
		Candidates: []placement.Candidate{
			{ID: "silo-a", Activations: 1200},
			{ID: "silo-b", Activations: 300},
		},
	}
	to, err := p.Place(req)
	if err != nil {
		panic(err)
	}
	p.Placed(to)
	fmt.Println(to)

	// A grain type pinned to a role no active silo has.
	req.Strategy, req.Role = placement.SiloRole, "gpu"
	_, err = p.Place(req)
	fmt.Println(status.Code(err), err)
	// Output:
	// silo-b
	// FailedPrecondition placement: no active silo hosts grain type bank.Account with role "gpu"
}

// Hash sends a grain to the same silo whatever order the silo lists the
// candidates in.
func Example_hash() {
	p, _ := placement.New(placement.DefaultConfig())
	id := grain.NewID("chat.Room", "lobby")
	a, _ := p.Place(placement.Request{Grain: id, Strategy: placement.Hash,
		Candidates: []placement.Candidate{{ID: "silo-a"}, {ID: "silo-b"}, {ID: "silo-c"}}})
	b, _ := p.Place(placement.Request{Grain: id, Strategy: placement.Hash,
		Candidates: []placement.Candidate{{ID: "silo-c"}, {ID: "silo-a"}, {ID: "silo-b"}}})
	fmt.Println(a == b)
	// Output: true
}
