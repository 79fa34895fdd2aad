package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
)

// TestCallThroughGateway: generated references work through a client as
// they do in a silo: replies, state kept between calls, one-way calls,
// headers, and a grain type no silo hosts.
func TestCallThroughGateway(t *testing.T) {
	c := newCluster(t, "a")
	cl := c.dial()
	ctx := grain.WithHeader(testCtx(t), "who", "tester")
	ref := probe.NewProbeRef(cl, "k")
	for want := int64(1); want <= 3; want++ {
		r, err := ref.Call(ctx, &probe.Request{Tag: "call"})
		if err != nil {
			t.Fatal(err)
		}
		if r.N != want || r.Text != "a" {
			t.Fatalf("call %d: got n=%d from %q, want n=%d from a", want, r.N, r.Text, want)
		}
	}
	c.l.mu.Lock()
	who := c.l.headers["call"]
	c.l.mu.Unlock()
	if who != "tester" {
		t.Fatalf("the grain saw header who=%q, want tester", who)
	}
	if _, err := ref.Tell(ctx, &probe.Request{Tag: "told"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the one-way call", func() bool { return c.l.toldCount("told") == 1 })

	_, err := probe.NewIntProbeRef(cl, 7).Call(ctx, &probe.Request{})
	if grain.Code(err) != codes.NotFound {
		t.Fatalf("a type no silo hosts: got %v, want NotFound", err)
	}
}

// TestDeadlineReachesTheGrain: the call's deadline travels with it, and
// the caller gets DeadlineExceeded when it passes.
func TestDeadlineReachesTheGrain(t *testing.T) {
	c := newCluster(t, "a")
	cl := c.dial()
	ref := probe.NewProbeRef(cl, "d")
	// No context deadline: the call option's timeout is the call's.
	if _, err := ref.Call(context.Background(), &probe.Request{Tag: "dl"}, grain.WithTimeout(time.Minute)); err != nil {
		t.Fatal(err)
	}
	c.l.mu.Lock()
	left := c.l.deadlines["dl"]
	c.l.mu.Unlock()
	if left <= 50*time.Second || left > time.Minute {
		t.Fatalf("the grain's deadline was %v away, want about a minute", left)
	}

	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ref.Slow(ctx, &probe.Request{Tag: "slow"})
	if grain.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the call took %v to time out", d)
	}
	if got := recv(t, c.l.cancelled, "the grain's context to end"); !strings.HasPrefix(got, "slow: ") {
		t.Fatalf("the grain reported %q", got)
	}
}

// TestCancelReachesTheGrain: cancelling the caller's context fails the
// call at once with Canceled and cancels the grain's context.
func TestCancelReachesTheGrain(t *testing.T) {
	c := newCluster(t, "a")
	cl := c.dial()
	for _, async := range []bool{false, true} {
		ctx, cancel := context.WithCancel(testCtx(t))
		tag := "sync"
		if async {
			tag = "async"
		}
		errc := make(chan error, 1)
		go func() {
			if async {
				f := probe.NewProbeRef(cl, tag).SlowAsync(ctx, &probe.Request{Tag: tag}, grain.WithTimeout(time.Hour))
				_, err := f.Await(context.Background())
				errc <- err
				return
			}
			_, err := probe.NewProbeRef(cl, tag).Slow(ctx, &probe.Request{Tag: tag}, grain.WithTimeout(time.Hour))
			errc <- err
		}()
		if got := recv(t, c.l.started, "the grain to start"); got != tag {
			t.Fatalf("started %q, want %q", got, tag)
		}
		cancel()
		select {
		case err := <-errc:
			if grain.Code(err) != codes.Canceled {
				t.Fatalf("%s: got %v, want Canceled", tag, err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("%s: the cancelled call did not return", tag)
		}
		select {
		case got := <-c.l.cancelled:
			if got != tag+": context canceled" {
				t.Fatalf("the grain reported %q", got)
			}
		case <-time.After(testTimeout):
			t.Fatalf("%s: the grain's context was not cancelled", tag)
		}
	}
}

// TestClientLearnsEveryGateway: a client given one gateway learns the
// others, and calls through them (TestPickSpreadsGrains checks the
// spreading itself).
func TestClientLearnsEveryGateway(t *testing.T) {
	c := newCluster(t, "a", "b", "c")
	cl, err := client.Dial(testCtx(t), client.WithGateways(c.silo("a").GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if got := len(cl.Gateways()); got != 3 {
		t.Fatalf("the client knows %d gateways, want 3", got)
	}
	for i := range 30 {
		if _, err := probe.NewProbeRef(cl, string(rune('a'+i))).Call(testCtx(t), &probe.Request{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDialErrors: Dial refuses bad options, naming them, and fails with
// Unavailable when no gateway answers before its context ends.
func TestDialErrors(t *testing.T) {
	for _, tc := range []struct {
		opts []client.Option
		want string
	}{
		{nil, "WithGateways or WithGatewayDNS"},
		{[]client.Option{client.WithGateways("nohost")}, "WithGateways"},
		{[]client.Option{client.WithGateways("h:1"), client.WithCallTimeout(0)}, "WithCallTimeout"},
		{[]client.Option{client.WithGateways("h:1"), client.WithMaxMessageSize(10)}, "WithMaxMessageSize"},
		{[]client.Option{client.WithGatewayDNS("name-without-port")}, "WithGatewayDNS"},
	} {
		_, err := client.Dial(testCtx(t), tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error naming %s", err, tc.want)
		}
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err := client.Dial(ctx, client.WithGateways("127.0.0.1:1"))
	if grain.Code(err) != codes.Unavailable {
		t.Fatalf("no gateway: got %v, want Unavailable", err)
	}
	var ce *client.ConfigError
	_, err = client.Dial(testCtx(t), client.WithGateways("x"))
	if !errors.As(err, &ce) || ce.Option != "WithGateways" {
		t.Fatalf("got %v, want a ConfigError naming WithGateways", err)
	}
}
