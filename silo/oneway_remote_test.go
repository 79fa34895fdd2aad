package silo

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/types/known/emptypb"
)

// TestOneWayRequestsFromAnotherSiloRunInTheOrderSent: one-way requests
// that four senders on one silo send to a grain on another run in each
// sender's order, none lost, and a call a sender makes between them runs
// after all it sent before.
func TestOneWayRequestsFromAnotherSiloRunInTheOrderSent(t *testing.T) {
	t.Parallel()
	caller, _ := probePair(t, func() probe.ProbeGrain { return &sequenceProbe{last: map[string]int64{}} }, func(name string) func(*Config) {
		// The senders outrun the grain: no request may be refused at a
		// queue limit (which would show as a gap, not as disorder).
		return func(cfg *Config) { cfg.QueueLimits = QueueLimits{} }
	})
	sendInOrder(t, probe.NewProbeRef(caller, "ordered"), 4, 100_000, 10_000)
}

// contextProbe notes the header "k" and the deadline each one-way
// request sees, by the request's N.
type contextProbe struct {
	probe.UnimplementedProbeGrain
	mu  *sync.Mutex
	got map[int64]seenContext
}

func (g *contextProbe) Call(grain.Context, *probe.Request) (*probe.Reply, error) {
	return &probe.Reply{}, nil
}

func (g *contextProbe) Tell(ctx grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	d, _ := ctx.Deadline()
	g.mu.Lock()
	g.got[req.N] = seenContext{grain.Header(ctx, "k"), d}
	g.mu.Unlock()
	return empty, nil
}

// TestOneWayRequestsFromAnotherSiloCarryTheirSendersContext: one-way
// requests from a silo to an active grain on another carry their own
// sender's headers and deadline, and a request whose context has neither
// carries none of those of the request before it.
func TestOneWayRequestsFromAnotherSiloCarryTheirSendersContext(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[int64]seenContext{}
	caller, _ := probePair(t, func() probe.ProbeGrain { return &contextProbe{mu: &mu, got: got} }, func(string) func(*Config) { return nil })
	checkOneWayContexts(t, probe.NewProbeRef(caller, "p"), "", &mu, got, "within a second of", nearDeadline)
}

// TestOneWayRequestsFromAClientCarryTheirSendersContext: the same, from a
// client through a gateway.
func TestOneWayRequestsFromAClientCarryTheirSendersContext(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[int64]seenContext{}
	c := gatewayAndClient(t, func() probe.ProbeGrain { return &contextProbe{mu: &mu, got: got} }, nil)
	checkOneWayContexts(t, probe.NewProbeRef(c, "p"), "", &mu, got, "within a second of", nearDeadline)
}

// nearDeadline: a deadline crosses processes as the time left, read
// from each one's clock, so it arrives a little off.
func nearDeadline(d, deadline time.Time) bool { return d.Sub(deadline).Abs() < time.Second }

// TestUndecodableOneWayRequestFromAnotherSiloIsCountedAndLogged: a
// one-way request from another silo whose request does not decode as its
// method's fails in its grain's turn: counted and logged as a failed
// one-way request with InvalidArgument, and the grain goes on.
func TestUndecodableOneWayRequestFromAnotherSiloIsCountedAndLogged(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.WarnLevel)
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{tweak: func(cfg *Config) { cfg.Logger = zap.New(core) }})
	a, b := tc.silo("a"), tc.silo("b")
	k := tc.keyOn(b) // active on b
	tell := -1
	for i, m := range probe.Probe_ServiceDesc.Methods {
		if m.Name == "Tell" {
			tell = i
		}
	}
	env := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY, GrainType: probe.ProbeGrainType, GrainKey: k,
		Method: "Tell", MethodIndex: uint32(tell), Payload: []byte{0xff, 0xff, 0xff}}
	if err := a.cl.Tport.Send(b.Member(), env, time.Time{}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "the failure counted", func() bool { return b.Stats().OneWayFailures == 1 })
	logged := logs.FilterMessageSnippet("one-way request failed").AllUntimed()
	if len(logged) != 1 || logged[0].ContextMap()["code"] != "InvalidArgument" {
		t.Fatalf("logs of the failure: %v, want one with code InvalidArgument", logged)
	}
	if _, err := probe.NewProbeRef(a, k).Tell(testCtx(t), &probe.Request{}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "a good one-way request to run", func() bool {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		return tc.told[k] == 1
	})
}

// TestOneWayRequestsFromAnotherSiloOutliveDeactivations: one-way requests
// from another silo, posted to an activation that deactivates over and
// over, all run, on whichever activation follows, and none is lost.
func TestOneWayRequestsFromAnotherSiloOutliveDeactivations(t *testing.T) {
	t.Parallel()
	var ran, activations atomic.Int64
	caller, callee := probePair(t, func() probe.ProbeGrain { return &countingProbe{ran: &ran, activations: &activations} }, func(string) func(*Config) {
		return func(cfg *Config) {
			cfg.QueueLimits = QueueLimits{} // the sender outruns the grain: none may be refused
			cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
		}
	})
	tellThroughChurn(t, caller, 50_000, &ran, &activations, callee)
}

// TestOneWayRequestsFromAClientRunInTheOrderSent: one-way requests that
// four senders send through one client and a gateway to a grain run in
// each sender's order, none lost, and a call a sender makes between them
// runs after all it sent before.
func TestOneWayRequestsFromAClientRunInTheOrderSent(t *testing.T) {
	t.Parallel()
	c := gatewayAndClient(t, func() probe.ProbeGrain { return &sequenceProbe{last: map[string]int64{}} }, func(cfg *Config) {
		// The senders outrun the grain: no request may be refused at a
		// queue limit (which would show as a gap, not as disorder).
		cfg.QueueLimits = QueueLimits{}
	})
	sendInOrder(t, probe.NewProbeRef(c, "ordered"), 4, 50_000, 10_000)
}
