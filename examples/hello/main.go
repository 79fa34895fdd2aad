// Command hello is the smallest Granary program: it hosts Greeter grains in
// a silo inside the process, greets a few names on two greeters, lists
// whom each greeted, and stops the silo gracefully.
//
// Results go to stdout and are the same on every run; the silo's and the
// grains' logs go to stderr.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
	"go.uber.org/zap"
)

// stopTimeout bounds the graceful stop: past it the silo is closed at once.
const stopTimeout = 10 * time.Second

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

// run starts a silo, drives two greeters, stops the silo and writes what
// happened to stdout.
func run(ctx context.Context, stdout io.Writer) error {
	logger, err := zap.NewDevelopment() // console encoding, to stderr
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }() // syncing stderr may fail; nothing to do about it

	cfg := silo.DefaultConfig()
	cfg.Name = "hello"
	cfg.Logger = logger
	var deactivated atomic.Int64
	s, err := startSilo(ctx, cfg, &deactivated)
	if err != nil {
		return err
	}
	defer s.Close() // a no-op after a graceful Stop; stops the silo on an early return

	visits := []struct{ greeter, name string }{
		{"en", "Ada"}, {"en", "Grace"}, {"fr", "Marie"}, {"en", "Alan"}, {"fr", "Pierre"},
	}
	for _, v := range visits {
		reply, err := hellopb.NewGreeterRef(s, v.greeter).SayHello(ctx, &hellopb.HelloRequest{Name: v.name})
		if err != nil {
			return fmt.Errorf("greeter %s: SayHello(%s): %w", v.greeter, v.name, err)
		}
		fmt.Fprintf(stdout, "greeter %s: %s (greeting #%d)\n", v.greeter, reply.GetMessage(), reply.GetCount())
	}
	for _, key := range []string{"en", "fr"} {
		list, err := hellopb.NewGreeterRef(s, key).Greetings(ctx, &hellopb.GreetingsRequest{})
		if err != nil {
			return fmt.Errorf("greeter %s: Greetings: %w", key, err)
		}
		fmt.Fprintf(stdout, "greeter %s greeted: %v\n", key, list.GetNames())
	}

	stopCtx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		return fmt.Errorf("graceful stop: %w", err)
	}
	fmt.Fprintf(stdout, "silo stopped: OnDeactivate ran for %d greeters\n", deactivated.Load())
	return nil
}

// startSilo makes a silo from cfg, registers the Greeter type on it, its
// greeters counting their deactivations in deactivated, and starts it.
func startSilo(ctx context.Context, cfg silo.Config, deactivated *atomic.Int64) (*silo.Silo, error) {
	s, err := silo.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := registerGreeter(s, deactivated); err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// registerGreeter registers the Greeter type on s, its greeters counting
// their deactivations in deactivated: the program's registration, which
// the tests use too.
func registerGreeter(s *silo.Silo, deactivated *atomic.Int64) error {
	newGreeter := func(grain.ID) hellopb.GreeterGrain { return &greeter{deactivated: deactivated} }
	return hellopb.RegisterGreeterGrain(s, newGreeter)
}
