// Command streams shows Granary's streams in one process: a silo alone
// with a durable stream provider on the embedded store, grains that
// subscribe to a namespace implicitly, and a client outside the cluster
// that follows a stream through the gateway, rewound to its start.
//
// Each room is a stream "logged/rooms/<room>" of hello.HelloRequest
// events, one per person who enters. The Greeter grain with the room's
// key subscribes to every room implicitly: it greets each person as the
// events come, as turns of the grain. The program enters a few people in
// two rooms, asks each room's greeter whom it greeted, then follows the
// first room from its first event through a client, and sees a person
// who enters afterwards arrive live.
//
// Results go to stdout and are the same on every run; logs go to stderr.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
)

// provider and namespace name the rooms' streams.
const (
	provider  = "logged"
	namespace = "rooms"
)

// timeout bounds the whole run.
const timeout = 30 * time.Second

func main() {
	dir, err := os.MkdirTemp("", "granary-streams-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "streams:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	if err := run(context.Background(), dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "streams:", err)
		os.Exit(1)
	}
}

// greeter is the hello.Greeter grain of one room: it greets whoever enters
// the room, from the room's stream.
type greeter struct {
	hellopb.UnimplementedGreeterGrain
	names []string
}

// onEnter is the greeters' stream handler: each event is a turn of the
// grain whose key is the room's.
var onEnter = streams.NewHandler("on-enter", func(g *greeter, ctx grain.Context, ev streams.Event[*hellopb.HelloRequest]) error {
	g.names = append(g.names, ev.Message.GetName())
	return nil
})

func (g *greeter) Greetings(grain.Context, *hellopb.GreetingsRequest) (*hellopb.GreetingsReply, error) {
	return &hellopb.GreetingsReply{Names: slices.Clone(g.names)}, nil
}

// room is the stream of room name.
func room(c grain.Caller, name string) streams.Stream[*hellopb.HelloRequest] {
	return streams.Get[*hellopb.HelloRequest](c, provider, namespace, name)
}

// run starts the silo on the embedded store in dir, drives the rooms and
// a client, stops the silo and writes what happened to stdout.
func run(ctx context.Context, dir string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	logger, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }() // syncing stderr may fail; nothing to do about it

	cfg := silo.DefaultConfig()
	cfg.Name = "streams"
	cfg.Logger = logger
	cfg.DataDir = dir
	cfg.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{provider: {Kind: "durable"}}}
	gw := silo.DefaultGatewayConfig()
	gw.Listen = "127.0.0.1:0"
	cfg.Gateway = &gw
	s, err := silo.New(cfg)
	if err != nil {
		return err
	}
	err = hellopb.RegisterGreeterGrain(s, func(grain.ID) hellopb.GreeterGrain { return &greeter{} },
		streams.Implicit(namespace, onEnter))
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Close() // a no-op after Stop

	// Enter people in two rooms; each greeter hears its own room's.
	for _, e := range []struct{ room, name string }{{"kitchen", "Ann"}, {"garden", "Bob"}, {"kitchen", "Cyd"}} {
		tok, err := room(s, e.room).Publish(ctx, &hellopb.HelloRequest{Name: e.name})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "entered %s: %s (event %d)\n", e.room, e.name, tok.Sequence)
	}
	for _, r := range []string{"kitchen", "garden"} {
		names, err := greeted(ctx, s, r, map[string]int{"kitchen": 2, "garden": 1}[r])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "the %s's greeter greeted %v\n", r, names)
	}

	// A client follows the kitchen from its first event, then sees a
	// newcomer live.
	c, err := client.Dial(ctx, client.WithGateways(s.GatewayAddr()), client.WithLogger(logger))
	if err != nil {
		return err
	}
	defer c.Close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	seen := make(chan string)
	done := make(chan error, 1)
	go func() {
		done <- room(nil, "kitchen").Watch(watchCtx, c, func(ev streams.Event[*hellopb.HelloRequest]) error {
			seen <- fmt.Sprintf("%s (event %d)", ev.Message.GetName(), ev.Token.Sequence)
			return nil
		}, streams.FromToken(streams.Token{Sequence: 1}))
	}()
	for i := range 3 {
		if i == 2 {
			if _, err := room(s, "kitchen").Publish(ctx, &hellopb.HelloRequest{Name: "Dee"}); err != nil {
				return err
			}
		}
		select {
		case who := <-seen:
			fmt.Fprintf(stdout, "the client saw %s enter the kitchen\n", who)
		case err := <-done:
			return fmt.Errorf("the client's watch ended: %w", err)
		}
	}
	stopWatch()
	<-done

	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelStop()
	if err := s.Stop(stopCtx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "silo stopped")
	return nil
}

// greeted waits until room's greeter has greeted want people, and returns
// them: events reach the grain as their own turns, after Publish returns.
func greeted(ctx context.Context, c grain.Caller, room string, want int) ([]string, error) {
	g := hellopb.NewGreeterRef(c, room)
	for {
		r, err := g.Greetings(ctx, &hellopb.GreetingsRequest{})
		if err != nil {
			return nil, err
		}
		if len(r.GetNames()) >= want {
			return r.GetNames(), nil
		}
		if err := grain.Sleep(ctx, 10*time.Millisecond); err != nil {
			return nil, fmt.Errorf("waiting for the %s's greeter: %w", room, err)
		}
	}
}
