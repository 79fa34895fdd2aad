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
	"github.com/jonboulle/clockwork"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

// TestSiloLimitsNewRequestsForLatency: with a latency limit, a silo whose
// requests from outside took longer than it limits how many it runs at
// once, in proportion, and refuses a new request past that number with
// ResourceExhausted and a RetryInfo; calls made inside the silo are not
// counted, and a place comes free when a request ends.
func TestSiloLimitsNewRequestsForLatency(t *testing.T) {
	t.Parallel()
	q, cl := newWaitTest(t, func(c *Config) {
		c.LoadShedding = LoadSheddingConfig{Enabled: true, LatencyLimit: 200 * time.Millisecond, MinConcurrency: 1,
			Window: shedWindow, Hysteresis: 0.9, RetryAfter: shedRetry}
	}, nil)
	// The monitor samples on a clock of its own, so that its intervals
	// and the latencies the silo's clock times move apart.
	mon := clockwork.NewFakeClock()
	// The harness started the silo; the monitor is started again on the
	// test's clock, as rigLoad would before Start.
	q.s.shed.Close()
	q.s.sampleLoadWith(mon, func() time.Duration { return 0 }, func() int { return 1 }, func() uint64 { return 0 })
	q.s.shed.Start(q.ctx)
	sample := func() {
		t.Helper()
		if err := mon.BlockUntilContext(q.ctx, 1); err != nil {
			t.Fatalf("the load monitor took no sample: %v", err)
		}
		mon.Advance(shedInterval)
		if err := mon.BlockUntilContext(q.ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Two requests from the client, one of which waits 1 s behind a turn
	// of the silo's own, so they end at a mean of 500 ms: 2.5 times the
	// limit. A limit is set at 0.4 of the 2 in progress at the peak, and
	// at its floor, 1.
	g := q.hold("block")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	a := q.fromClient(cl, "", 1)
	q.clock.Advance(time.Second)
	if _, err := probe.NewProbeRef(cl, "quick").Call(q.ctx, &probe.Request{}, grain.WithTimeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if st := q.s.Stats().Overload; st.ConcurrencyLimit != 0 || st.Concurrency != 1 {
		t.Fatalf("before any sample, limit %d with %d running; want none, with 1", st.ConcurrencyLimit, st.Concurrency)
	}
	g.open()
	q.await(first)
	if _, err := a.Await(q.ctx); err != nil {
		t.Fatal(err)
	}
	sample()
	if st := q.s.Stats().Overload; st.ConcurrencyLimit != 1 || st.Concurrency != 0 {
		t.Fatalf("after a mean of 500ms, limit %d with %d running; want 1, with 0", st.ConcurrencyLimit, st.Concurrency)
	}

	// The one place is taken: a new request is refused, a call from a
	// grain of the silo is not.
	g = q.hold("block2")
	first = q.send(probe.ProbeGrainType, "k", "block2")
	q.waitEvent("block2 start")
	a = q.fromClient(cl, "", 1)
	_, err := probe.NewProbeRef(cl, "other").Call(q.ctx, &probe.Request{}, grain.WithTimeout(time.Hour))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "runs 1 new requests at once, as many as keep their latency under 200ms") {
		t.Fatalf("a new call at the limit: %v, want ResourceExhausted naming the limit", err)
	}
	if retry := retryDelay(st); retry != 200*time.Millisecond {
		t.Fatalf("the refusal asks for a retry in %v, want 200ms", retry)
	}
	inside := q.send(probe.ProbeGrainType, "other", "")
	q.await(inside)
	if got := q.s.Stats().Overload.LimitRefusals; got != 1 {
		t.Fatalf("LimitRefusals = %d, want 1", got)
	}
	if n := q.logs.FilterMessageSnippet("refused new requests").Len(); n != 1 {
		t.Fatalf("%d warnings of the refusal, want 1", n)
	}
	g.open()
	q.await(first)
	if _, err := a.Await(q.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := probe.NewProbeRef(cl, "other").Call(q.ctx, &probe.Request{}, grain.WithTimeout(time.Hour)); err != nil {
		t.Fatalf("a new call once the place came free: %v", err)
	}
}

// retryDelay is the delay st's RetryInfo asks for; 0 without one.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			return r.GetRetryDelay().AsDuration()
		}
	}
	return 0
}
