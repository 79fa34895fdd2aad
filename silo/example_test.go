package silo_test

import (
	"context"
	"fmt"

	"github.com/granaryio/granary/grain"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
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
