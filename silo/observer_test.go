package silo

import (
	"context"
	"fmt"

	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/silo/internal/gateway"
	"github.com/granaryio/granary/silo/internal/local"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// TestObserverEnvelopeToGrainTypeIsRefused: an envelope marked Observer
// that names a grain type this silo hosts is bad input (observers run in
// clients): it is routed as an observer call, not to the hosted type, and
// refused, and no grain code runs.
func TestObserverEnvelopeToGrainTypeIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpt{cfg: func(c *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		c.Gateway = &g
	}})
	rc := dialRaw(t, gateway.LocalClusterID, h.s.GatewayAddr())
	payload, _ := proto.Marshal(&probe.Request{})
	_, ans := rc.call(&granaryv1.Envelope{
		Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST, GrainType: probe.ProbeGrainType, GrainKey: "victim",
		Method: "Call", MethodIndex: 0, Payload: payload, Observer: true, TimeoutNanos: int64(5 * time.Second),
	})
	r := testwait.Recv(t, ans, defaultTestTimeout, "the answer to the observer envelope")
	if code := codes.Code(r.Code); code != codes.InvalidArgument {
		t.Errorf("an observer envelope to grain type %s with key %q got %v %q; want InvalidArgument (not an observer's ID) before any grain runs",
			probe.ProbeGrainType, "victim", code, r.Message)
	}
	for _, e := range h.eventLog() {
		if e == "activate "+probe.ProbeGrainType+"/victim" {
			t.Errorf("the bad envelope activated the grain: events %q", h.eventLog())
		}
	}
}

// obsClient is a client, speaking the gateway protocol directly, whose
// observer of type probe.ProbeObserver and key <id>/1 answers Ask with
// "ok:" and the question and records the numbers Notify brings.
type obsClient struct {
	t     *transport.Transport
	id    string
	notes chan int64
}

func (o *obsClient) Deliver(_ string, env *granaryv1.Envelope, r transport.Responder) {
	if !env.Observer || env.GrainKey != o.id+"/1" {
		if r.Expects() {
			r.Reply(&granaryv1.Envelope{Code: uint32(codes.NotFound)})
		}
		return
	}
	var req probe.Request
	if err := proto.Unmarshal(env.Payload, &req); err != nil {
		r.Reply(&granaryv1.Envelope{Code: uint32(codes.InvalidArgument)})
		return
	}
	switch env.Method {
	case "Notify":
		select {
		case o.notes <- req.N:
		default:
		}
		if r.Expects() {
			r.Reply(&granaryv1.Envelope{})
		}
	case "Ask":
		b, _ := proto.Marshal(&probe.Reply{Text: "ok:" + req.Text})
		r.Reply(&granaryv1.Envelope{Payload: b})
	}
}

// observer returns the ID of o's observer.
func (o *obsClient) observer() grain.ID {
	return grain.ID{Type: probe.ProbeObserverObserverType, Key: o.id + "/1"}
}

// dialObs makes a client called id that knows the gateways of silos.
func dialObs(t *testing.T, id string, silos ...*Silo) *obsClient {
	t.Helper()
	cfg := transport.DefaultConfig()
	cfg.ClusterID, cfg.Self = "test", id
	n := transport.NewGRPCServiceNetwork(transport.GatewayService, cfg)
	o := &obsClient{id: id, notes: make(chan int64, 1<<16)}
	tp, err := transport.New(cfg, n, o)
	if err != nil {
		t.Fatal(err)
	}
	o.t = tp
	for _, s := range silos {
		tp.SetPeer(s.cfg.Name, s.GatewayAddr())
	}
	t.Cleanup(func() { tp.Close(); n.Close() })
	return o
}

// home makes the gateway of silo name o's home.
func (o *obsClient) home(t *testing.T, name string) {
	t.Helper()
	done := make(chan *granaryv1.Envelope, 1)
	o.t.Call(name, &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_HOME}, time.Now().Add(defaultTestTimeout), func(resp *granaryv1.Envelope, err error) {
		if err != nil {
			done <- &granaryv1.Envelope{Code: uint32(codes.Unavailable), Message: err.Error()}
			return
		}
		done <- proto.Clone(resp).(*granaryv1.Envelope)
	})
	if r := testwait.Recv(t, done, defaultTestTimeout, "the answer to HOME at "+name); r.Code != 0 {
		t.Fatalf("HOME at %s: %v %s", name, codes.Code(r.Code), r.Message)
	}
}

// clientOwnedBy returns a client ID whose directory entry s owns.
func clientOwnedBy(t *testing.T, s *Silo, prefix string) string {
	t.Helper()
	for i := range 1000 {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if ownerOf(s, local.ClientGrainID(id)) == s.Member() {
			return id
		}
	}
	t.Fatalf("no client ID owned by %s", s.cfg.Name)
	return ""
}

func gatewayTweak(cfg *Config) {
	g := DefaultGatewayConfig()
	g.Listen = "127.0.0.1:0"
	cfg.Gateway = &g
}

// ask has silo from ask o's observer.
func ask(t *testing.T, from *Silo, o *obsClient) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	r, err := probe.ProbeObserverRefFromID(from, o.observer()).Ask(ctx, &probe.Request{Text: "hi"})
	if err == nil && r.Text != "ok:hi" {
		t.Fatalf("the observer answered %q", r.Text)
	}
	return err
}

// TestStaleHomeRegistrationDoesNotStealEntry: a gateway whose
// registration of a client is retried (the directory could not answer)
// after the client's stream to it ended and the client moved home to
// another gateway must not take the entry over: it is not the client's
// home any more, or calls to the client's observers would fail with
// NotFound while the client, connected to its home, never learns it
// should move.
func TestStaleHomeRegistrationDoesNotStealEntry(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, nil, clusterOpt{tweak: gatewayTweak})
	a := tc.startNoWait("a", nil)
	b := tc.startNoWait("b", nil)
	tc.waitConverged()
	id := clientOwnedBy(t, a, "steal") // so a's directory answers at once
	o := dialObs(t, id, a, b)
	o.home(t, "b")
	if err := ask(t, a, o); err != nil {
		t.Fatalf("the observer, home at b: %v", err)
	}
	// What a's retry timer runs: a HOME a took earlier, whose Register
	// failed, after StreamsEnded dropped the client from a's homes.
	eA := directory.Entry{Silo: a.Member(), Activation: a.rt.NextActID.Add(1)}
	a.gw.RegisterHome(id, eA, transport.Responder{}, 1, 0)
	if err := ask(t, a, o); err != nil {
		e, _ := a.cl.Dir.CachedLookup(local.ClientGrainID(id))
		t.Fatalf("the client is connected and home at b, but its observer fails: %v (directory entry %v, a's stale one %v)", err, e, eA)
	}
}

// TestObserverCallRacingHomeKeepsEntry: resolveObserver runs for a call
// whose routeObserver found the client not home here; if the client made
// this gateway its home in between (HOME is delivered on the client's
// stream reader, the call on another goroutine), the lookup names this
// silo, and the call must go to the client, not take the home's fresh
// entry for a stale one and unregister it (after which the client would
// be home here but unknown to the directory, and calls from other silos
// would fail with NotFound while the client never learns to move).
func TestObserverCallRacingHomeKeepsEntry(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, nil, clusterOpt{tweak: gatewayTweak})
	a := tc.startNoWait("a", nil)
	b := tc.startNoWait("b", nil)
	tc.waitConverged()
	id := clientOwnedBy(t, a, "race")
	o := dialObs(t, id, a, b)
	o.home(t, "a") // lands between routeObserver's isHome and the lookup
	c := a.rt.NewCall(2)
	c.ID, c.Method, c.Req = o.observer(), &probe.ProbeObserver_ServiceDesc.Methods[1], &probe.Request{Text: "hi"}
	c.Due, c.Waiter = a.rt.CallNow()+defaultTestTimeout, local.OutsideWaiter
	a.cl.ResolveObserver(c, id)
	<-c.Donec
	err := c.Err
	c.Release()
	if err != nil {
		t.Errorf("a call to the observer of a client home here failed: %v", err)
	}
	if err := ask(t, b, o); err != nil {
		t.Fatalf("the client is connected and home at a, but a call from b fails: %v", err)
	}
}

// TestObserverOneWayCallsKeepOrder: one-way calls that one caller makes
// to one observer reach it in the order they were made (grain.ObserverHost
// promises arrival order, and the caller is sequential). From a silo that
// neither is the client's home nor owns its directory entry, the first
// calls wait for a directory lookup by message; later ones queue behind
// it rather than find the entry cached and overtake them.
func TestObserverOneWayCallsKeepOrder(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, nil, clusterOpt{tweak: gatewayTweak})
	a := tc.startNoWait("a", nil)
	b := tc.startNoWait("b", nil)
	c := tc.startNoWait("c", nil)
	tc.waitConverged()
	id := clientOwnedBy(t, a, "order") // owner a, home b, caller c
	o := dialObs(t, id, a, b, c)
	o.home(t, "b")
	ref := probe.ProbeObserverRefFromID(c, o.observer())
	const n = 2000
	ctx := testCtx(t)
	for i := int64(1); i <= n; i++ {
		if _, err := ref.Notify(ctx, &probe.Request{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	var got []int64
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%d of %d notifications arrived", len(got), n)
		}
	})
	testwait.Until(t, o.notes, defaultTestTimeout, fmt.Sprintf("%d notifications", n), func(v int64) bool {
		got = append(got, v)
		return len(got) == n
	})
	for i, v := range got {
		if v != int64(i+1) {
			t.Fatalf("notification %d carried %d: out of order (%v)", i+1, v, got[max(0, i-3):min(len(got), i+4)])
		}
	}
}
