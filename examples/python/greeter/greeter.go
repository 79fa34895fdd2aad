// Package greeter implements the hello.Greeter grain
// (proto/examples/hello) for the Python client example
// (examples/python): the hello example's greeter, which also refuses a
// request without a name with a google.rpc.BadRequest detail, so that a
// client in another language has an error with details to decode.
//
// The example silo (examples/python/silo) and the example's test both
// host it with Register.
package greeter

import (
	"fmt"

	"github.com/granaryio/granary/grain"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Register registers the Greeter grain type on s. Call it before s.Start.
func Register(s *silo.Silo) error {
	return hellopb.RegisterGreeterGrain(s, func(grain.ID) hellopb.GreeterGrain { return &greeter{} })
}

// greeter is one Greeter activation. Its fields are touched only by its
// activation's turns, which never overlap, so it needs no lock.
type greeter struct {
	hellopb.UnimplementedGreeterGrain

	names []string // whom this greeter greeted, oldest first
}

var _ hellopb.GreeterGrain = (*greeter)(nil)

// NoNameMessage is the message of the InvalidArgument error SayHello
// returns for a request without a name; its BadRequest detail names the
// field "name" with the description NoNameDescription.
const (
	NoNameMessage     = "greeter: SayHello needs a name"
	NoNameDescription = "must not be empty"
)

// SayHello greets req's name and remembers it. A request without a name
// fails with InvalidArgument and a BadRequest detail naming the field.
func (g *greeter) SayHello(ctx grain.Context, req *hellopb.HelloRequest) (*hellopb.HelloReply, error) {
	if req.GetName() == "" {
		return nil, noName()
	}
	g.names = append(g.names, req.GetName())
	return &hellopb.HelloReply{
		Message: fmt.Sprintf("Hello, %s!", req.GetName()),
		Count:   int64(len(g.names)),
	}, nil
}

// Greetings lists the names greeted so far, oldest first. It copies the
// list: the caller may keep the reply while later turns append.
func (g *greeter) Greetings(ctx grain.Context, req *hellopb.GreetingsRequest) (*hellopb.GreetingsReply, error) {
	return &hellopb.GreetingsReply{Names: append([]string(nil), g.names...)}, nil
}

// noName is SayHello's error for a request without a name.
func noName() error {
	st, err := status.New(codes.InvalidArgument, NoNameMessage).WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "name", Description: NoNameDescription}},
	})
	if err != nil {
		// WithDetails fails only for a code of OK or a detail that does
		// not marshal: neither can happen here.
		panic(fmt.Sprintf("greeter: building the BadRequest status: %v", err))
	}
	return st.Err()
}
