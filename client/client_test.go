package client_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
)

// TestCallThroughGateway: generated references work through a client as
// they do in a silo: replies, state kept between calls, one-way calls,
// headers, and a grain type no silo hosts.
func TestCallThroughGateway(t *testing.T) {
	t.Parallel()
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
	testwait.For(t, testTimeout, "the one-way call", func() bool { return c.l.toldCount("told") == 1 })

	_, err := probe.NewIntProbeRef(cl, 7).Call(ctx, &probe.Request{})
	if grain.Code(err) != codes.NotFound {
		t.Fatalf("a type no silo hosts: got %v, want NotFound", err)
	}
}

// TestDeadlineReachesTheGrain: the call's deadline travels with it, and
// the caller gets DeadlineExceeded when it passes.
func TestDeadlineReachesTheGrain(t *testing.T) {
	t.Parallel()
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
	if got := testwait.Recv(t, c.l.cancelled, testTimeout, "the grain's context to end"); !strings.HasPrefix(got, "slow: ") {
		t.Fatalf("the grain reported %q", got)
	}
}

// TestCancelReachesTheGrain: cancelling the caller's context fails the
// call at once with Canceled and cancels the grain's context.
func TestCancelReachesTheGrain(t *testing.T) {
	t.Parallel()
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
		if got := testwait.Recv(t, c.l.started, testTimeout, "the grain to start"); got != tag {
			t.Fatalf("started %q, want %q", got, tag)
		}
		cancel()
		if err := testwait.Recv(t, errc, testTimeout, tag+": the cancelled call to return"); grain.Code(err) != codes.Canceled {
			t.Fatalf("%s: got %v, want Canceled", tag, err)
		}
		if got := testwait.Recv(t, c.l.cancelled, testTimeout, tag+": the grain's context to end"); got != tag+": context canceled" {
			t.Fatalf("the grain reported %q", got)
		}
	}
}

// TestClientLearnsEveryGateway: a client given one gateway learns the
// others, and calls through them (TestPickSpreadsGrains checks the
// spreading itself).
func TestClientLearnsEveryGateway(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// hold starts a Slow call on ref that runs until the returned function
// is called, so that later calls to the grain wait in its queue and the
// gateway answers none of them before the client's timer fires.
func hold(t *testing.T, c *cluster, ref probe.ProbeRef) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	f := ref.SlowAsync(ctx, &probe.Request{Tag: "hold"}, grain.WithTimeout(time.Hour))
	if got := testwait.Recv(t, c.l.started, testTimeout, "the held call to start"); got != "hold" {
		t.Fatalf("started %q, want hold", got)
	}
	return func() {
		cancel()
		if _, err := f.Await(testCtx(t)); grain.Code(err) != codes.Canceled {
			t.Errorf("the held call ended with %v, want Canceled", err)
		}
		testwait.Recv(t, c.l.cancelled, testTimeout, "the held call's context to end")
	}
}

// TestDeadlineTimerFailsConcurrentCalls: calls that only the client's
// own deadline timer ends, many at once, fail with DeadlineExceeded; a
// timer that fires while its call is still starting reads nothing the
// start writes unguarded (the race detector checks).
func TestDeadlineTimerFailsConcurrentCalls(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	cl := c.dial()
	ref := probe.NewProbeRef(cl, "busy")
	release := hold(t, c, ref)
	defer release()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 10 {
				_, err := ref.Call(context.Background(), &probe.Request{}, grain.WithTimeout(time.Duration(1+i)*time.Millisecond))
				if grain.Code(err) != codes.DeadlineExceeded {
					t.Errorf("got %v, want DeadlineExceeded", err)
				}
			}
		})
	}
	wg.Wait()
}

// watchedCtx is a cancellable context, with no deadline, that counts the
// context.AfterFunc registrations on it that are neither fired nor
// stopped. It is not a *context.cancelCtx, so context.AfterFunc uses its
// AfterFunc method.
type watchedCtx struct {
	done chan struct{}
	once sync.Once
	live atomic.Int64
	mu   sync.Mutex
	fns  map[*int]func()
}

func newWatchedCtx() *watchedCtx {
	return &watchedCtx{done: make(chan struct{}), fns: map[*int]func(){}}
}

func (w *watchedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *watchedCtx) Done() <-chan struct{}       { return w.done }
func (w *watchedCtx) Value(any) any               { return nil }
func (w *watchedCtx) Err() error {
	select {
	case <-w.done:
		return context.Canceled
	default:
		return nil
	}
}

func (w *watchedCtx) cancel() {
	w.once.Do(func() {
		close(w.done)
		w.mu.Lock()
		fns := w.fns
		w.fns = nil
		w.mu.Unlock()
		for _, f := range fns {
			w.live.Add(-1)
			go f()
		}
	})
}

func (w *watchedCtx) AfterFunc(f func()) func() bool {
	k := new(int)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		go f()
		return func() bool { return false }
	}
	w.fns[k] = f
	w.live.Add(1)
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.fns[k]; !ok {
			return false
		}
		delete(w.fns, k)
		w.live.Add(-1)
		return true
	}
}

// TestAsyncTimeoutStopsContextWatch: an asynchronous call that the
// client's timer fails unregisters its watch on the caller's context, so
// a long-lived context does not keep every timed-out call reachable. The
// client's clock passes the deadline long before the gateway's does.
func TestAsyncTimeoutStopsContextWatch(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	clock := clockwork.NewFakeClock()
	cl := c.dial(client.WithClock(clock))
	ref := probe.NewProbeRef(cl, "busy")
	release := hold(t, c, ref)
	ctx := newWatchedCtx()
	defer ctx.cancel()
	const timeout = time.Minute
	f := ref.CallAsync(ctx, &probe.Request{}, grain.WithTimeout(timeout))
	clock.Advance(timeout) // CallAsync has set the call's timer
	_, err := f.Await(testCtx(t))
	n := ctx.live.Load()
	release()
	if grain.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if n != 0 {
		t.Fatalf("%d watch(es) on the call's context left after the call timed out", n)
	}
}

// TestHugeTimeoutDoesNotFailAtOnce: a timeout near math.MaxInt64 is cut
// to the longest a call may have; the deadline arithmetic does not wrap
// negative and fail the call at once.
func TestHugeTimeoutDoesNotFailAtOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	cl := c.dial()
	_, err := probe.NewProbeRef(cl, "huge").Call(context.Background(), &probe.Request{}, grain.WithTimeout(math.MaxInt64))
	if err != nil {
		t.Fatalf("a call with the largest timeout: %v", err)
	}
}

// TestDialPastDeadSeeds: seeds that refuse connections fail at once, so
// Dial reaches a live seed shuffled behind three dead ones well within a
// short context.
func TestDialPastDeadSeeds(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "a")
	live := c.silo("a").GatewayAddr()
	for range 4 {
		ctx, cancel := context.WithTimeout(testCtx(t), 2*time.Second)
		start := time.Now()
		cl, err := client.Dial(ctx, client.WithGateways("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", live))
		cancel()
		if err != nil {
			t.Fatalf("Dial with one live seed of four failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		}
		cl.Close()
	}
}
