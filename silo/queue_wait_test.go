package silo

import (
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/grpcapi"
	"github.com/granaryio/granary/silo/overload"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// newWaitTest is a queue test on a fake clock whose silo serves a gateway
// and a Go client of it, which sends requests from outside the silo.
func newWaitTest(t *testing.T, cfg func(*Config), register map[string][]grain.RegisterOption) (*queueTest, *client.Client) {
	t.Helper()
	q := newQueueTest(t, true, func(c *Config) {
		gc := DefaultGatewayConfig()
		gc.Listen = "127.0.0.1:0"
		c.Gateway = &gc
		if cfg != nil {
			cfg(c)
		}
	}, register)
	cl, err := client.Dial(q.ctx, client.WithGateways(q.s.GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return q, cl
}

// fromClient sends a request tagged tag to probe k through the client,
// and waits until it has queued at k's activation as the depth-th.
func (q *queueTest) fromClient(cl *client.Client, tag string, depth int) grain.Future[*probe.Reply] {
	q.t.Helper()
	p := probe.NewProbeRef(cl, "k").CallAsync(q.ctx, &probe.Request{Tag: tag}, grain.WithTimeout(time.Hour))
	testwait.For(q.t, defaultTestTimeout, "the client's request "+tag+" to queue", func() bool {
		return q.depth(probe.ProbeGrainType, "k") == depth
	})
	return p
}

// TestQueueWaitLimitRefusesRequestsThatWaitedTooLong: a request from a
// client that waited for its turn past the queue wait limit is refused
// with ResourceExhausted when its turn comes and never runs; one that
// came later and waited less runs, and so does a call from a grain of the
// silo, whatever its wait.
func TestQueueWaitLimitRefusesRequestsThatWaitedTooLong(t *testing.T) {
	t.Parallel()
	q, cl := newWaitTest(t, func(c *Config) { c.QueueLimits.Wait = time.Second }, nil)
	g := q.hold("block")
	for _, tag := range []string{"late", "fresh", "inside"} {
		q.countRuns(tag)
	}
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	late := q.fromClient(cl, "late", 1)
	inside := q.send(probe.ProbeGrainType, "k", "inside")
	q.wantDepth(probe.ProbeGrainType, "k", 2)
	q.clock.Advance(1500 * time.Millisecond)
	fresh := q.fromClient(cl, "fresh", 3)
	g.open()

	_, err := late.Await(q.ctx)
	if status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(status.Convert(err).Message(), "probe.Probe/k.Call waited 1.5s for its turn, past the queue wait limit 1s; it did not run") {
		t.Fatalf("the late request: %v, want ResourceExhausted saying it waited 1.5s past the 1s limit", err)
	}
	q.await(first, inside)
	if _, err := fresh.Await(q.ctx); err != nil {
		t.Fatalf("the request that waited under the limit: %v", err)
	}
	if n := q.runs("late"); n != 0 {
		t.Errorf("the refused request ran %d times", n)
	}
	if a, b := q.runs("fresh"), q.runs("inside"); a != 1 || b != 1 {
		t.Errorf("the fresh request ran %d times and the silo's own %d, want once each", a, b)
	}
	if got := q.s.Stats().Overload.WaitRefusals; got != 1 {
		t.Errorf("WaitRefusals = %d, want 1", got)
	}
	if n := q.logs.FilterMessage("requests waited past their type's queue wait limit and were refused").Len(); n != 1 {
		t.Errorf("%d warnings of the refusal, want 1", n)
	}
}

// TestQueueWaitLimitBoundsPlainGRPCCalls: a call of the gateway's plain
// gRPC services is a request from outside too, bounded by the wait limit
// with load shedding off.
func TestQueueWaitLimitBoundsPlainGRPCCalls(t *testing.T) {
	t.Parallel()
	q, _ := newWaitTest(t, func(c *Config) { c.QueueLimits.Wait = time.Second }, nil)
	g := q.hold("block")
	q.countRuns("late")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	cc, err := grpc.NewClient(q.s.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	done := make(chan error, 1)
	go func() {
		ctx := metadata.AppendToOutgoingContext(q.ctx, grpcapi.KeyHeader, "k")
		done <- cc.Invoke(ctx, "/"+probe.ProbeGrainType+"/Call", &probe.Request{Tag: "late"}, new(probe.Reply))
	}()
	testwait.For(t, defaultTestTimeout, "the gRPC call to queue", func() bool {
		return q.depth(probe.ProbeGrainType, "k") == 1
	})
	q.clock.Advance(1500 * time.Millisecond)
	g.open()
	q.await(first)
	err = testwait.Recv(t, done, defaultTestTimeout, "the gRPC call's answer")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "past the queue wait limit 1s") {
		t.Fatalf("the gRPC call: %v, want ResourceExhausted past the wait limit", err)
	}
	if n := q.runs("late"); n != 0 {
		t.Errorf("the refused gRPC call ran %d times", n)
	}
}

// TestQueueWaitLimitPerTypeOverridesTheSilos: a type's option lengthens
// the silo's wait limit for its requests alone.
func TestQueueWaitLimitPerTypeOverridesTheSilos(t *testing.T) {
	t.Parallel()
	q, cl := newWaitTest(t, func(c *Config) { c.QueueLimits.Wait = time.Second }, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueWaitLimit(time.Minute)},
	})
	g := q.hold("block")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	patient := q.fromClient(cl, "", 1)
	q.clock.Advance(30 * time.Second)
	g.open()
	q.await(first)
	if _, err := patient.Await(q.ctx); err != nil {
		t.Fatalf("the request that waited under its type's limit: %v", err)
	}
	if got := q.s.Stats().Overload.WaitRefusals; got != 0 {
		t.Errorf("WaitRefusals = %d, want 0", got)
	}
}

// TestSiloShedsForLatency: with a latency limit, a silo whose requests
// from outside took longer than it on average in the window, waiting for
// their turns, sheds new requests, naming the latency, and stops after a
// window in which none ended.
func TestSiloShedsForLatency(t *testing.T) {
	t.Parallel()
	q, cl := newWaitTest(t, func(c *Config) {
		c.LoadShedding = LoadSheddingConfig{Enabled: true, LatencyLimit: 200 * time.Millisecond,
			Window: shedWindow, Hysteresis: 0.9, RetryAfter: shedRetry}
	}, nil)
	// The monitor samples on a clock of its own, so that its windows and
	// the waits the silo's clock times move apart.
	mon := clockwork.NewFakeClock()
	// The harness started the silo; the monitor is started again on the
	// test's clock, as rigLoad would before Start.
	q.s.shed.Close()
	q.s.sampleLoadWith(mon, func() time.Duration { return 0 }, func() int { return 1 }, func() uint64 { return 0 })
	q.s.shed.Start(q.ctx)
	window := func() {
		t.Helper()
		for i := 0; i < overload.DefaultSamples; i++ {
			if err := mon.BlockUntilContext(q.ctx, 1); err != nil {
				t.Fatalf("the load monitor took no sample %d: %v", i, err)
			}
			mon.Advance(shedInterval)
		}
		if err := mon.BlockUntilContext(q.ctx, 1); err != nil {
			t.Fatal(err)
		}
	}

	// Two requests from the client wait 400 ms and 0 ms behind a held
	// turn: a mean of 200 ms, at the limit, does not shed.
	g := q.hold("block")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	a := q.fromClient(cl, "", 1)
	q.clock.Advance(400 * time.Millisecond)
	b := q.fromClient(cl, "", 2)
	g.open()
	q.await(first)
	for _, p := range []grain.Future[*probe.Reply]{a, b} {
		if _, err := p.Await(q.ctx); err != nil {
			t.Fatal(err)
		}
	}
	window()
	if q.s.Stats().Overload.Shedding {
		t.Fatal("the silo sheds at a mean wait of 200ms, its limit")
	}

	g = q.hold("block2")
	first = q.send(probe.ProbeGrainType, "k", "block2")
	q.waitEvent("block2 start")
	a = q.fromClient(cl, "", 1)
	q.clock.Advance(time.Second)
	g.open()
	q.await(first)
	if _, err := a.Await(q.ctx); err != nil {
		t.Fatal(err)
	}
	window()
	if !q.s.Stats().Overload.Shedding {
		t.Fatal("the silo does not shed after a request waited 1s, over the 200ms limit")
	}
	_, err := probe.NewProbeRef(cl, "other").Call(q.ctx, &probe.Request{}, grain.WithTimeout(time.Hour))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "latency 1s over limit 200ms") {
		t.Fatalf("a new call while shedding: %v, want ResourceExhausted naming the latency", err)
	}

	// A window in which nothing waited ends the shedding.
	window()
	if q.s.Stats().Overload.Shedding {
		t.Fatal("the silo still sheds after a window in which no request waited")
	}
	// From a client the silo has not refused: the first waits out the
	// retry delay the refusal asked for.
	fresh, err := client.Dial(q.ctx, client.WithGateways(q.s.GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := probe.NewProbeRef(fresh, "other").Call(q.ctx, &probe.Request{}, grain.WithTimeout(time.Hour)); err != nil {
		t.Fatalf("a call after the shedding stopped: %v", err)
	}
}
