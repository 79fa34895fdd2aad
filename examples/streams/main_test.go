package main

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
)

// defaultTestTimeout bounds a test: one that needs it has failed.
const defaultTestTimeout = 20 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun checks the program's whole output, which is the same on every
// run: each room's greeter greets whoever entered it, and the client sees
// the kitchen's events from the first, then a newcomer live.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, t.TempDir(), &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	const want = `entered kitchen: Ann (event 1)
entered garden: Bob (event 1)
entered kitchen: Cyd (event 2)
the kitchen's greeter greeted [Ann Cyd]
the garden's greeter greeted [Bob]
the client saw Ann (event 1) enter the kitchen
the client saw Cyd (event 2) enter the kitchen
the client saw Dee (event 3) enter the kitchen
silo stopped
`
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

// TestGreeterHearsOnlyItsRoom shows a grain author testing an implicit
// subscription with granarytest: two silos sharing one memory store, a
// memory stream provider, and each room's events reaching that room's
// greeter only, in order.
func TestGreeterHearsOnlyItsRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c := granarytest.New(t, granarytest.Silos(2),
		granarytest.Configure(func(cfg *silo.Config) {
			cfg.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{provider: {}}}
		}),
		granarytest.Register(func(s *silo.Silo) error {
			return hellopb.RegisterGreeterGrain(s, func(grain.ID) hellopb.GreeterGrain { return &greeter{} },
				streams.Implicit(namespace, onEnter))
		}))
	names := []string{"Ann", "Bob", "Cyd", "Dee"}
	for _, n := range names {
		if _, err := room(c.Caller(), "hall").Publish(ctx, &hellopb.HelloRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := room(c.Caller(), "attic").Publish(ctx, &hellopb.HelloRequest{Name: "Eve"}); err != nil {
		t.Fatal(err)
	}
	got, err := greeted(ctx, c.Caller(), "hall", len(names))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, names) {
		t.Fatalf("the hall's greeter greeted %v, want %v in order", got, names)
	}
	if attic, err := greeted(ctx, c.Caller(), "attic", 1); err != nil || !slices.Equal(attic, []string{"Eve"}) {
		t.Fatalf("the attic's greeter greeted %v (%v), want [Eve]", attic, err)
	}
}
