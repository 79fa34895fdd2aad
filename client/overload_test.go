package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/jonboulle/clockwork"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// shedRetry is the delay the test gateways' refusals ask for.
const shedRetry = 2 * time.Second

// overloadError is the refusal of a silo that sheds load, as a silo's
// gateway writes it.
func overloadError(silo string) error {
	st, err := status.Newf(codes.ResourceExhausted, "granary: silo %s is overloaded (cpu 97%% over limit 95%%); retry in 2s", silo).WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(shedRetry)},
		&errdetails.ErrorInfo{Reason: "OVERLOADED", Domain: "granary.io", Metadata: map[string]string{"silo": silo}},
	)
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// shedGateway serves the gateway protocol as silo id, one of the gateways
// its test lists. It answers each call with its id, or fails it with the
// error refusal holds: marked not run, as a gateway's own refusal is, or
// not, as the error of a grain that ran.
type shedGateway struct {
	id      string
	addr    string
	refusal atomic.Pointer[refusal]
	calls   atomic.Int64 // requests it received
}

type refusal struct {
	err    error
	notRun bool
}

func (g *shedGateway) refuse(err error)       { g.refusal.Store(&refusal{err, true}) }
func (g *shedGateway) failAfterRun(err error) { g.refusal.Store(&refusal{err, false}) }
func (g *shedGateway) answer()                { g.refusal.Store(nil) }

func (g *shedGateway) Deliver(_ string, env *granaryv1.Envelope, r transport.Responder) {
	if !r.Expects() {
		return
	}
	if env.Kind != granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST {
		r.Reply(&granaryv1.Envelope{})
		return
	}
	g.calls.Add(1)
	if rf := g.refusal.Load(); rf != nil {
		r.Reply(transport.SetStatus(&granaryv1.Envelope{NotRun: rf.notRun}, rf.err))
		return
	}
	b, _ := proto.Marshal(&probe.Reply{Text: g.id})
	r.Reply(&granaryv1.Envelope{Payload: b})
}

// startShedGateways starts gateways with the given IDs, each listing them
// all, and a client of them on a fake clock.
func startShedGateways(t *testing.T, ids ...string) (*client.Client, *clockwork.FakeClock, map[string]*shedGateway) {
	t.Helper()
	var list atomic.Pointer[[]*granaryv1.GatewayEndpoint]
	gws := map[string]*shedGateway{}
	var eps []*granaryv1.GatewayEndpoint
	for _, id := range ids {
		g := &shedGateway{id: id}
		cfg := transport.DefaultConfig()
		cfg.ClusterID, cfg.Self = "shed", id
		lists := grpc.MethodDesc{
			MethodName: "Gateways",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := dec(new(granaryv1.GatewaysRequest)); err != nil {
					return nil, err
				}
				return &granaryv1.GatewaysResponse{ClusterId: "shed", Gateways: *list.Load()}, nil
			},
		}
		lis, err := transport.ListenGRPCService("127.0.0.1:0", transport.GatewayService, []grpc.MethodDesc{lists}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		tp, err := transport.New(cfg, noDial{}, g)
		if err != nil {
			t.Fatal(err)
		}
		if err := lis.Serve(tp); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tp.Close(); lis.Stop() })
		g.addr = lis.Addr()
		gws[id] = g
		eps = append(eps, &granaryv1.GatewayEndpoint{Silo: id, Address: g.addr})
	}
	list.Store(&eps)
	clock := clockwork.NewFakeClock()
	cl, err := client.Dial(testCtx(t), client.WithGateways(gws[ids[0]].addr), client.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if len(cl.Gateways()) != len(ids) {
		t.Fatalf("the client knows %v, want %d gateways", cl.Gateways(), len(ids))
	}
	return cl, clock, gws
}

// call calls probe key through cl and returns who answered.
func call(t *testing.T, cl *client.Client, key string) (string, error) {
	t.Helper()
	r, err := probe.NewProbeRef(cl, key).Call(testCtx(t), &probe.Request{})
	return r.GetText(), err
}

// keyVia returns a key whose calls the client offers to gateway g first:
// it calls keys until g receives one, and returns that call's outcome and
// how many calls the other gateway received during it.
func keyVia(t *testing.T, cl *client.Client, g, other *shedGateway) (key, who string, toOther int64, err error) {
	t.Helper()
	for i := range 64 {
		key = fmt.Sprintf("k%d", i)
		before, otherBefore := g.calls.Load(), other.calls.Load()
		who, err = call(t, cl, key)
		if g.calls.Load() > before {
			return key, who, other.calls.Load() - otherBefore, err
		}
	}
	t.Fatalf("no call of 64 keys went to gateway %s", g.id)
	return "", "", 0, nil
}

// TestShedCallMovesToAnotherGatewayAndTheGatewayIsAvoided: a call the
// gateway's own silo refused for overload never ran, so the client
// offers it to another gateway, which answers; until the delay the
// refusal asked has passed, the client sends no call to the refusing
// gateway, then it prefers it again for the grains that hash to it.
func TestShedCallMovesToAnotherGatewayAndTheGatewayIsAvoided(t *testing.T) {
	t.Parallel()
	cl, clock, gws := startShedGateways(t, "g1", "g2")
	g1, g2 := gws["g1"], gws["g2"]
	g1.refuse(overloadError("g1"))

	key, who, _, err := keyVia(t, cl, g1, g2)
	if err != nil || who != "g2" {
		t.Fatalf("a call g1 shed: answered by %q, %v; want g2", who, err)
	}
	for i := range 20 {
		if who, err := call(t, cl, fmt.Sprintf("other%d", i)); err != nil || who != "g2" {
			t.Fatalf("a call while g1 is marked overloaded: answered by %q, %v; want g2", who, err)
		}
	}
	if who, err := call(t, cl, key); err != nil || who != "g2" {
		t.Fatalf("the shed grain called again: answered by %q, %v; want g2", who, err)
	}
	if n := g1.calls.Load(); n != 1 {
		t.Fatalf("g1 received %d calls; want only the one it refused, while it is marked", n)
	}
	g1.answer()
	clock.Advance(shedRetry - time.Millisecond)
	if who, err := call(t, cl, key); err != nil || who != "g2" {
		t.Fatalf("just before the retry delay ends: answered by %q, %v; want g2", who, err)
	}
	clock.Advance(time.Millisecond)
	if who, err := call(t, cl, key); err != nil || who != "g1" {
		t.Fatalf("after the retry delay: answered by %q, %v; want g1 again", who, err)
	}
}

// TestEveryGatewayShedding: when every gateway's silo sheds the call, it
// fails with the last refusal, its details intact, having been offered to
// each once; a later call within the retry delays is refused by the
// client itself, unsent, with the time left to wait; once the delays are
// over, calls go out again.
func TestEveryGatewayShedding(t *testing.T) {
	t.Parallel()
	cl, clock, gws := startShedGateways(t, "g1", "g2")
	for id, g := range gws {
		g.refuse(overloadError(id))
	}
	_, err := call(t, cl, "k")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("error %v, want ResourceExhausted", err)
	}
	info, retry := refusalDetails(err)
	if info == nil || info.Reason != "OVERLOADED" || gws[info.Metadata["silo"]] == nil || retry.GetRetryDelay().AsDuration() != shedRetry {
		t.Fatalf("details %v, %v; want the refusal's ErrorInfo and RetryInfo", info, retry)
	}
	if a, b := gws["g1"].calls.Load(), gws["g2"].calls.Load(); a != 1 || b != 1 {
		t.Fatalf("the gateways received %d and %d calls, want one each", a, b)
	}
	clock.Advance(shedRetry / 4)
	_, err = call(t, cl, "k")
	info, retry = refusalDetails(err)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "not sent") ||
		info.GetReason() != "OVERLOADED" || retry.GetRetryDelay().AsDuration() != shedRetry-shedRetry/4 {
		t.Fatalf("a second call within the delay: %v (details %v, %v), want ResourceExhausted, not sent, retry in %v",
			err, info, retry, shedRetry-shedRetry/4)
	}
	if total := gws["g1"].calls.Load() + gws["g2"].calls.Load(); total != 2 {
		t.Fatalf("the gateways received %d calls in all, want 2: the second call not sent", total)
	}
	clock.Advance(shedRetry)
	if _, err := call(t, cl, "k"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call after the delay: %v, want the gateways' refusal", err)
	}
	if total := gws["g1"].calls.Load() + gws["g2"].calls.Load(); total != 4 {
		t.Fatalf("the gateways received %d calls in all, want 4: a call after the delay offered to each again", total)
	}
}

// refusalDetails returns the ErrorInfo and RetryInfo err carries, nil
// for either it lacks.
func refusalDetails(err error) (info *errdetails.ErrorInfo, retry *errdetails.RetryInfo) {
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retry = d
		}
	}
	return info, retry
}

// TestRefusalNotByTheGatewaysSiloIsTheCallersError: a refusal for
// overload by a silo behind the gateway, and a ResourceExhausted that is
// not a refusal for overload, reach the caller as they are: the call is
// not offered to another gateway, and the gateway is not avoided.
func TestRefusalNotByTheGatewaysSiloIsTheCallersError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		notRun bool
	}{
		{"another silo shed it", overloadError("behind"), true},
		{"a full queue", status.Error(codes.ResourceExhausted, "granary: queue full"), true},
		// A grain that ran and returned a refusal it met deeper down, with
		// every detail of the gateway's own: the call ran, so it is never
		// sent again.
		{"a grain returned the gateway silo's refusal", overloadError("g1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, _, gws := startShedGateways(t, "g1", "g2")
			g1, g2 := gws["g1"], gws["g2"]
			if tc.notRun {
				g1.refuse(tc.err)
			} else {
				g1.failAfterRun(tc.err)
			}
			key, _, toG2, err := keyVia(t, cl, g1, g2)
			if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != status.Convert(tc.err).Message() {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if toG2 != 0 {
				t.Fatalf("the call was offered to g2 too (%d calls)", toG2)
			}
			g2before := g2.calls.Load()
			if _, err := call(t, cl, key); status.Code(err) != codes.ResourceExhausted || g1.calls.Load() != 2 || g2.calls.Load() != g2before {
				t.Fatalf("the grain called again: %v, g1 received %d calls; want it through g1 again, and only g1", err, g1.calls.Load())
			}
		})
	}
}
