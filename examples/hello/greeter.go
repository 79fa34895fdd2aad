// This file holds the Greeter grain: what one greeter remembers and how it
// answers.

package main

import (
	"fmt"
	"sync/atomic"

	"github.com/granaryio/granary/grain"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"go.uber.org/zap"
)

// greeter implements the hello.Greeter grain. Its fields are touched only by
// its activation's turns, which never overlap, so it needs no lock.
type greeter struct {
	hellopb.UnimplementedGreeterGrain

	names []string // whom this greeter greeted, oldest first

	// deactivated counts OnDeactivate runs across all greeters, so the
	// program can show that a graceful stop ran them. Shared: atomic.
	deactivated *atomic.Int64
}

// Check at compile time that greeter is a complete Greeter grain with both
// lifecycle hooks.
var (
	_ hellopb.GreeterGrain = (*greeter)(nil)
	_ grain.Activator      = (*greeter)(nil)
	_ grain.Deactivator    = (*greeter)(nil)
)

// OnActivate runs as the activation's first turn, before any request.
func (g *greeter) OnActivate(ctx grain.Context) error {
	ctx.Logger().Info("greeter activated") // the logger names the grain and activation
	return nil
}

// OnDeactivate runs as the activation's last turn; here, when the silo stops.
func (g *greeter) OnDeactivate(ctx grain.Context, reason grain.DeactivationReason) error {
	ctx.Logger().Info("greeter deactivated",
		zap.Stringer("reason", reason), zap.Int("greeted", len(g.names)))
	g.deactivated.Add(1)
	return nil
}

// SayHello greets req's name and remembers it.
func (g *greeter) SayHello(ctx grain.Context, req *hellopb.HelloRequest) (*hellopb.HelloReply, error) {
	g.names = append(g.names, req.GetName())
	return &hellopb.HelloReply{
		Message: fmt.Sprintf("Hello, %s!", req.GetName()),
		Count:   int64(len(g.names)),
	}, nil
}

// Greetings lists the names greeted so far. It is read-only. It copies the
// list: the reply goes to the caller, who may keep it while later
// SayHello requests append to the greeter's own.
func (g *greeter) Greetings(ctx grain.Context, req *hellopb.GreetingsRequest) (*hellopb.GreetingsReply, error) {
	return &hellopb.GreetingsReply{Names: append([]string(nil), g.names...)}, nil
}
