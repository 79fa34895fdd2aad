package silo_test

import (
	"context"
	"fmt"

	"github.com/granaryio/granary/grain"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/storage"
)

// greeter is a grain: its fields are touched by its own turns only, so it
// needs no lock.
type greeter struct {
	hellopb.UnimplementedGreeterGrain
	count int64
}

func (g *greeter) SayHello(ctx grain.Context, req *hellopb.HelloRequest) (*hellopb.HelloReply, error) {
	g.count++
	return &hellopb.HelloReply{Message: "Hello, " + req.GetName() + "!", Count: g.count}, nil
}

// A silo hosts a grain type; a generated reference calls a grain, which is
// activated on its first call.
func Example() {
	s, err := silo.New(silo.DefaultConfig())
	if err != nil {
		panic(err)
	}
	err = hellopb.RegisterGreeterGrain(s, func(grain.ID) hellopb.GreeterGrain { return &greeter{} })
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		panic(err)
	}
	defer s.Stop(ctx)

	ref := hellopb.NewGreeterRef(s, "en")
	for _, name := range []string{"Ada", "Grace"} {
		reply, err := ref.SayHello(ctx, &hellopb.HelloRequest{Name: name})
		if err != nil {
			panic(err)
		}
		fmt.Println(ref.ID(), reply.GetMessage(), reply.GetCount())
	}
	// Output:
	// hello.Greeter/en Hello, Ada! 1
	// hello.Greeter/en Hello, Grace! 2
}

// greetings is the persistent state of a countingGreeter: the reply it
// gave last, whose Count is the greetings given so far.
var greetings = grain.NewStateSpec[*hellopb.HelloReply]("greetings", "")

// countingGreeter keeps its count as persistent state.
type countingGreeter struct {
	hellopb.UnimplementedGreeterGrain
	state *grain.State[*hellopb.HelloReply]
}

func (g *countingGreeter) OnActivate(ctx grain.Context) error {
	g.state = greetings.Of(ctx) // read before OnActivate
	return nil
}

func (g *countingGreeter) SayHello(ctx grain.Context, req *hellopb.HelloRequest) (*hellopb.HelloReply, error) {
	next := &hellopb.HelloReply{Message: "Hello, " + req.GetName() + "!", Count: g.state.Value().GetCount() + 1}
	prev := g.state.Value()
	g.state.Set(next)
	if err := g.state.Write(ctx); err != nil { // FailedPrecondition if another activation wrote first
		g.state.Set(prev)
		return nil, err
	}
	return next, nil
}

// A grain's persistent state outlives its silo: a second silo over the
// same store goes on from the count the first one stored.
func Example_persistentState() {
	store := storage.NewMemory(0) // silo/storage/boltstore or pgstore in production
	cfg := silo.DefaultConfig()
	cfg.Storage = map[string]storage.Provider{grain.DefaultStorage: store}
	ctx := context.Background()
	for _, name := range []string{"Ada", "Grace"} {
		s, err := silo.New(cfg)
		if err != nil {
			panic(err)
		}
		err = hellopb.RegisterGreeterGrain(s, func(grain.ID) hellopb.GreeterGrain { return &countingGreeter{} }, grain.WithState(greetings))
		if err != nil {
			panic(err)
		}
		if err := s.Start(ctx); err != nil {
			panic(err)
		}
		reply, err := hellopb.NewGreeterRef(s, "en").SayHello(ctx, &hellopb.HelloRequest{Name: name})
		if err != nil {
			panic(err)
		}
		fmt.Println(reply.GetMessage(), reply.GetCount())
		if err := s.Stop(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// Hello, Ada! 1
	// Hello, Grace! 2
}
