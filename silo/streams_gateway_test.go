package silo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/proctest"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
)

// withGateway gives a test silo a gateway on a free loopback port.
func withGateway(cfg *Config) {
	g := DefaultGatewayConfig()
	g.Listen = "127.0.0.1:0"
	cfg.Gateway = &g
}

// watch follows stream o through c in a goroutine, sending each tick's N
// on the channel it returns; the test's end stops it.
func watch(t *testing.T, c *client.Client, o *probe.ListenOp, opts ...streams.SubscribeOption) <-chan int64 {
	t.Helper()
	got := make(chan int64, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ticks(nil, o).Watch(ctx, c, func(ev streams.Event[*probe.Tick]) error {
			got <- ev.Message.N
			return nil
		}, opts...)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; status.Code(err) != codes.Canceled {
			t.Errorf("Watch ended with %v, want Canceled when its context ends", err)
		}
	})
	return got
}

// expectTicks waits for ticks first..last on got, in order.
func expectTicks(t *testing.T, got <-chan int64, first, last int64) {
	t.Helper()
	for n := first; n <= last; n++ {
		if g := testwait.Recv(t, got, defaultTestTimeout, fmt.Sprintf("tick %d", n)); g != n {
			t.Fatalf("the watch got tick %d where %d was due", g, n)
		}
	}
}

// TestClientWatchResumesThroughAnotherGatewayWhenItsGatewayDies: a Go
// client follows a durable stream through a gateway; when that gateway's
// silo dies, it resumes through another from the event after the last it
// got, so it sees every event once, in order.
func TestClientWatchResumesThroughAnotherGatewayWhenItsGatewayDies(t *testing.T) {
	rec := newStreamRecord()
	store := storage.NewMemory(0)
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{
		tweak: func(cfg *Config) {
			memoryStore(store)(cfg)
			withGateway(cfg)
			cfg.Streams = &StreamsConfig{Providers: map[string]StreamProviderConfig{
				"logged": {Kind: "durable", Partitions: 4, SweepInterval: 20 * time.Millisecond},
			}}
		},
		register: func(s *Silo, _ string) {
			if err := probe.RegisterListenerGrain(s, func(grain.ID) probe.ListenerGrain { return &listener{rec: rec} }, streams.WithHandlers(recordTicks)); err != nil {
				t.Fatal(err)
			}
		},
	})
	var addrs []string
	for _, s := range tc.live() {
		addrs = append(addrs, s.GatewayAddr())
	}
	ctx := testCtx(t)
	c, err := client.Dial(ctx, client.WithGateways(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := &probe.ListenOp{Provider: "logged", Namespace: "feed", Key: "w1"}
	got := watch(t, c, o)
	var via *Silo
	testwait.For(t, defaultTestTimeout, "the watch to reach a gateway", func() bool {
		for _, s := range tc.live() {
			if s.streams.Tails() == 1 {
				via = s
				return true
			}
		}
		return false
	})
	pub := otherThan(tc, via)
	publishTicks(t, pub, o, 0, 49)
	expectTicks(t, got, 0, 49)
	tc.kill(via.cfg.Name)
	publishTicks(t, pub, o, 50, 99)
	expectTicks(t, got, 50, 99)
	select {
	case n := <-got:
		t.Fatalf("the watch got tick %d again", n)
	default:
	}
}

// TestGRPCurlSubscribesToADurableStreamAndSeesTypedJSON: a client in any
// language subscribes to a durable stream over plain gRPC; grpcurl, with
// nothing but reflection, shows each event as JSON of its own type.
// Without grpcurl (see proctest.Grpcurl) the test is skipped, or fails when
// GRANARY_TEST_GRPCURL_REQUIRED=1.
func TestGRPCurlSubscribesToADurableStreamAndSeesTypedJSON(t *testing.T) {
	bin := proctest.Grpcurl(t)
	rec := newStreamRecord()
	s := durableSilo(t, rec, t.TempDir(), StreamProviderConfig{}, withGateway)
	o := op("feed", "g1")
	toks := publishTicks(t, s, o, 0, 2)
	req := fmt.Sprintf(`{"stream": "default/feed/g1", "from": {"sequence": "%d"}}`, toks[1].Sequence)
	out, errOut, _ := runGrpcurl(t, bin, "-plaintext", "-max-time", "2", "-d", req, s.GatewayAddr(), "granary.v1.StreamGateway/Subscribe")
	for _, want := range []string{`"@type": "type.googleapis.com/probe.Tick"`, `"n": "1"`, `"n": "2"`} {
		if !strings.Contains(out, want) {
			t.Fatalf("grpcurl's output lacks %s\nstdout:\n%s\nstderr:\n%s", want, out, errOut)
		}
	}
	if strings.Contains(out, `"n": "0"`) {
		t.Fatalf("grpcurl got an event before the token asked for\nstdout:\n%s", out)
	}
}

// TestWatchingAMemoryStreamIsRefused: a memory stream's events go to
// grains only; a client that watches one is told so at once.
func TestWatchingAMemoryStreamIsRefused(t *testing.T) {
	s := streamSilo(t, newStreamRecord(), StreamProviderConfig{}, withGateway)
	ctx := testCtx(t)
	c, err := client.Dial(ctx, client.WithGateways(s.GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = ticks(nil, op("feed", "m1")).Watch(ctx, c, func(streams.Event[*probe.Tick]) error { return nil })
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("watching a memory stream: %v, want FailedPrecondition", err)
	}
}
