package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
	"go.uber.org/goleak"
)

// defaultTestTimeout bounds the whole program: a test that needs it has
// failed.
const defaultTestTimeout = 10 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun checks the program's whole output, which is the same on every
// run: greetings counted per greeter, each greeter's list, and the
// OnDeactivate hooks run by the graceful stop.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	const want = `greeter en: Hello, Ada! (greeting #1)
greeter en: Hello, Grace! (greeting #2)
greeter fr: Hello, Marie! (greeting #1)
greeter en: Hello, Alan! (greeting #3)
greeter fr: Hello, Pierre! (greeting #2)
greeter en greeted: [Ada Grace Alan]
greeter fr greeted: [Marie Pierre]
silo stopped: OnDeactivate ran for 2 greeters
`
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

// TestConcurrentGreetings: greetings sent to one greeter all at once are
// taken one at a time, so their counts are 1..n with none repeated or
// skipped, and another greeter's count is its own.
func TestConcurrentGreetings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	var deactivated atomic.Int64
	c := granarytest.New(t, granarytest.Register(func(s *silo.Silo) error {
		return registerGreeter(s, &deactivated)
	}))

	const n = 50
	busy := hellopb.NewGreeterRef(c.Caller(), "busy")
	replies := make([]grain.Future[*hellopb.HelloReply], n)
	waiters := make([]grain.Waiter, n)
	for i := range replies {
		replies[i] = busy.SayHelloAsync(ctx, &hellopb.HelloRequest{Name: fmt.Sprint("guest", i)})
		waiters[i] = replies[i]
	}
	quiet, err := hellopb.NewGreeterRef(c.Caller(), "quiet").SayHello(ctx, &hellopb.HelloRequest{Name: "solo"})
	if err != nil || quiet.GetCount() != 1 {
		t.Fatalf("quiet greeter: %v, %v; want count 1", quiet, err)
	}
	if err := grain.AwaitAll(ctx, waiters...); err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, f := range replies {
		r, err := f.Await(ctx)
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, r.GetCount())
	}
	slices.Sort(counts)
	for i, c := range counts {
		if c != int64(i+1) {
			t.Fatalf("sorted counts %v, want 1..%d", counts, n)
		}
	}
	list, err := busy.Greetings(ctx, &hellopb.GreetingsRequest{})
	if err != nil || len(list.GetNames()) != n {
		t.Fatalf("Greetings: %d names, %v; want %d", len(list.GetNames()), err, n)
	}

	c.Stop(0)
	if got := deactivated.Load(); got != 2 {
		t.Fatalf("OnDeactivate ran %d times, want 2", got)
	}
}
