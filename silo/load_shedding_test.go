package silo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/grpcapi"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/overload"
	"github.com/jonboulle/clockwork"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

const (
	shedWindow   = 5 * time.Second
	shedInterval = shedWindow / overload.DefaultSamples
	shedRetry    = 2 * time.Second
)

// shedConfig turns load shedding on: over 80% of a core, retry in 2 s.
func shedConfig(cfg *Config) {
	cfg.LoadShedding = LoadSheddingConfig{Enabled: true, CPULimit: 0.8, Window: shedWindow, Hysteresis: 0.9, RetryAfter: shedRetry}
}

// loadRig drives a silo's load-shedding monitor: a fake clock of its own
// and a CPU the test says how busy it is.
type loadRig struct {
	t     *testing.T
	s     *Silo
	clock *clockwork.FakeClock
	cpu   atomic.Int64 // nanoseconds of CPU used so far, on one core
}

// rigLoad has s, made with shedConfig and not started yet, sample the
// load the rig feeds.
func rigLoad(t *testing.T, s *Silo) *loadRig {
	r := &loadRig{t: t, s: s, clock: clockwork.NewFakeClock()}
	s.sampleLoadWith(r.clock, func() time.Duration { return time.Duration(r.cpu.Load()) }, func() int { return 1 }, func() uint64 { return 0 })
	return r
}

// setShedding feeds a window of a busy (95%) or idle (10%) core and
// checks the silo then sheds, or not.
func (r *loadRig) setShedding(on bool) {
	r.t.Helper()
	cpu := 0.1
	if on {
		cpu = 0.95
	}
	ctx := testwait.Context(r.t, defaultTestTimeout)
	for i := 0; i <= overload.DefaultSamples; i++ {
		// The monitor's timer is set once it has taken the sample before.
		if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
			r.t.Fatalf("the load monitor took no sample %d: %v", i, err)
		}
		if i == overload.DefaultSamples {
			break
		}
		r.cpu.Add(int64(cpu * float64(shedInterval)))
		r.clock.Advance(shedInterval)
	}
	if got := r.s.Stats().Overload.Shedding; got != on {
		r.t.Fatalf("after a window at %v%% CPU the silo sheds: %v, want %v", cpu*100, got, on)
	}
}

// shedLedger is what the test's grains report, across silos.
type shedLedger struct {
	started chan string // the tag of each held Call once it runs
	ended   chan string // "<tag> released" or "<tag> cancelled"
	told    chan string // each Tell's tag
	ticks   chan string // each reminder tick's name
	release chan struct{}
	once    sync.Once
}

// releaseHeld lets every held call return.
func (l *shedLedger) releaseHeld() { l.once.Do(func() { close(l.release) }) }

func newShedLedger() *shedLedger {
	return &shedLedger{
		started: make(chan string, 16), ended: make(chan string, 16), told: make(chan string, 16),
		ticks: make(chan string, 16), release: make(chan struct{}),
	}
}

// shedProbe is a reentrant probe placed on the silo that calls it first.
// A Call tagged "hold..." reports that it runs and waits until the test
// releases it or its context ends; then, like every Call, it calls the
// grain its path names next, and answers with where it ran.
type shedProbe struct {
	probe.UnimplementedReentrantProbeGrain
	l    *shedLedger
	silo string
}

func registerShedProbe(s *Silo, l *shedLedger) error {
	return probe.RegisterReentrantProbeGrain(s, func(grain.ID) probe.ReentrantProbeGrain { return &shedProbe{l: l, silo: s.cfg.Name} },
		grain.WithPlacement(grain.PlacementPreferLocal))
}

func (g *shedProbe) Call(ctx grain.Context, req *probe.Request) (*probe.Reply, error) {
	if strings.HasPrefix(req.Tag, "hold") {
		g.l.started <- req.Tag
		how := "released"
		grain.Blocking(ctx, func() {
			select {
			case <-g.l.release:
			case <-ctx.Done():
				how = "cancelled"
			}
		})
		g.l.ended <- req.Tag + " " + how
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	r := &probe.Reply{Text: g.silo, Trace: []string{g.silo}}
	if len(req.Path) > 0 {
		next, err := probe.NewReentrantProbeRef(ctx.Caller(), req.Path[0]).Call(ctx, &probe.Request{Path: req.Path[1:]})
		if err != nil {
			return nil, err
		}
		r.Trace = append(r.Trace, next.Trace...)
	}
	return r, nil
}

func (g *shedProbe) Tell(_ grain.Context, req *probe.Request) (*emptypb.Empty, error) {
	g.l.told <- req.Tag
	return &emptypb.Empty{}, nil
}

func (g *shedProbe) ReceiveReminder(_ grain.Context, name string, _ grain.TickStatus) error {
	g.l.ticks <- name
	return nil
}

// wantOverloaded checks that err is a refusal for overload by silo: code,
// message, RetryInfo and ErrorInfo.
func wantOverloaded(t *testing.T, err error, silo string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("error %v, want ResourceExhausted", err)
	}
	wantMsg := fmt.Sprintf("granary: silo %s is overloaded (cpu 95%% over limit 80%%); retry in 2s", silo)
	if st.Message() != wantMsg {
		t.Fatalf("message %q, want %q", st.Message(), wantMsg)
	}
	var retry *errdetails.RetryInfo
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.ErrorInfo:
			info = d
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != shedRetry {
		t.Fatalf("RetryInfo %v, want a delay of %v", retry, shedRetry)
	}
	if info == nil || info.Reason != "OVERLOADED" || info.Domain != "granary.io" || info.Metadata["silo"] != silo {
		t.Fatalf("ErrorInfo %v, want OVERLOADED in granary.io for silo %s", info, silo)
	}
}

// overloadedSilo returns the silo a refusal for overload names.
func overloadedSilo(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Metadata["silo"]
		}
	}
	return ""
}

// TestGatewayShedsNewCallsButNotAdmittedWork: while a silo sheds load,
// its gateway refuses new calls, from Go clients and plain gRPC clients,
// with ResourceExhausted, a RetryInfo, an ErrorInfo naming the silo and
// (for gRPC) the pushback trailer, and counts each refusal, one-way calls
// included; a call admitted before goes on and is answered, a
// cancellation reaches its grain, and a client may still make the
// gateway its home. Once the load falls, calls are taken again.
func TestGatewayShedsNewCallsButNotAdmittedWork(t *testing.T) {
	l := newShedLedger()
	cfg := DefaultConfig()
	cfg.Name = "solo"
	shedConfig(&cfg)
	gc := DefaultGatewayConfig()
	gc.Listen = "127.0.0.1:0"
	cfg.Gateway = &gc
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := registerShedProbe(s, l); err != nil {
		t.Fatal(err)
	}
	load := rigLoad(t, s)
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.releaseHeld() // a test that failed early may hold calls
		ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	cl, err := client.Dial(testCtx(t), client.WithGateways(s.GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ref := func(key string) probe.ReentrantProbeRef { return probe.NewReentrantProbeRef(cl, key) }

	held := ref("held").CallAsync(testCtx(t), &probe.Request{Tag: "hold-answer"})
	testwait.Recv(t, l.started, defaultTestTimeout, "the held call to start")
	cctx, cancel := context.WithCancel(testCtx(t))
	doomed := ref("doomed").CallAsync(cctx, &probe.Request{Tag: "hold-cancel"})
	testwait.Recv(t, l.started, defaultTestTimeout, "the call to cancel to start")

	load.setShedding(true)
	_, err = ref("new").Call(testCtx(t), &probe.Request{})
	gw := overloadedSilo(err)
	if !strings.HasPrefix(gw, "solo-") {
		t.Fatalf("a new call while shedding: %v; want a refusal naming the gateway's silo", err)
	}
	wantOverloaded(t, err, gw)
	if n := s.Stats().Overload.Shed; n != 1 {
		t.Fatalf("Overload.Shed %d after one refusal", n)
	}

	// A one-way call has no answer to carry the refusal: it is counted.
	// It comes from a client the silo has not refused yet, as the first
	// one now refuses calls itself, unsent, until the retry delay ends.
	fresh, err := client.Dial(testCtx(t), client.WithGateways(s.GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := probe.NewReentrantProbeRef(fresh, "told").Tell(testCtx(t), &probe.Request{Tag: "told while shedding"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "the one-way call's refusal to be counted", func() bool { return s.Stats().Overload.Shed == 2 })

	// A plain gRPC call is refused the same way, with the pushback trailer.
	cc, err := grpc.NewClient(s.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var trailer metadata.MD
	ctx := metadata.AppendToOutgoingContext(testCtx(t), grpcapi.KeyHeader, "grpc")
	err = cc.Invoke(ctx, "/"+probe.ReentrantProbeGrainType+"/Call", &probe.Request{}, new(probe.Reply), grpc.Trailer(&trailer))
	wantOverloaded(t, err, gw)
	if got := trailer.Get(grpcapi.PushbackTrailer); len(got) != 1 || got[0] != "2000" {
		t.Fatalf("pushback trailer %q, want [2000]", got)
	}
	if n := s.Stats().Overload.Shed; n != 3 {
		t.Fatalf("Overload.Shed %d after three refusals", n)
	}

	// HOME is not new work.
	if _, err := probe.CreateProbeObserver(cl, observerFunc{}); err != nil {
		t.Fatalf("making the gateway the client's home while shedding: %v", err)
	}
	// Cancellations pass, and admitted calls are answered.
	cancel()
	testwait.Until(t, l.ended, defaultTestTimeout, "the cancelled call's grain to see it", func(e string) bool { return e == "hold-cancel cancelled" })
	if _, err := doomed.Await(testCtx(t)); status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call: %v, want Canceled", err)
	}
	l.releaseHeld()
	if r, err := held.Await(testCtx(t)); err != nil || r.Text != "solo" {
		t.Fatalf("the call admitted before shedding: %v, %v; want its answer", r, err)
	}
	if n := s.Stats().Overload.Shed; n != 3 {
		t.Fatalf("Overload.Shed %d: admitted work, a cancel or HOME was refused", n)
	}

	load.setShedding(false)
	// fresh's one-way call was refused unseen, so it did not learn to wait.
	if _, err := probe.NewReentrantProbeRef(fresh, "new").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatalf("a call once the load fell: %v", err)
	}
}

// observerFunc is a ProbeObserver that does nothing.
type observerFunc struct{}

func (observerFunc) Notify(context.Context, *probe.Request) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (observerFunc) Ask(context.Context, *probe.Request) (*probe.Reply, error) {
	return &probe.Reply{}, nil
}

// TestSiloReceiverShedsNewCallsOnly: while silo b sheds load, it refuses
// the new calls other silos send it, with ResourceExhausted naming b, and
// counts them, one-way ones included. It still serves the directory
// (a grain whose entry b owns activates elsewhere), reminder ticks,
// answers and cancellations of calls it admitted before, calls whose
// chain comes back through it, and calls another silo passed on.
func TestSiloReceiverShedsNewCallsOnly(t *testing.T) {
	l := newShedLedger()
	var load *loadRig
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{
		tweak: func(cfg *Config) {
			if cfg.Name == "b" {
				shedConfig(cfg)
			}
		},
		register: func(s *Silo, name string) {
			if err := registerShedProbe(s, l); err != nil {
				t.Fatal(err)
			}
			if name == "b" {
				load = rigLoad(t, s)
			}
		},
	})
	t.Cleanup(l.releaseHeld) // before the cluster stops: a test that failed early may hold calls
	a, b := tc.silo("a"), tc.silo("b")
	onB := func(key string) probe.ReentrantProbeRef { return probe.NewReentrantProbeRef(b, key) }
	fromA := func(key string) probe.ReentrantProbeRef { return probe.NewReentrantProbeRef(a, key) }
	for _, k := range []string{"busy", "held", "doomed", "chain", "back"} {
		if r, err := onB(k).Call(testCtx(t), &probe.Request{}); err != nil || r.Text != "b" {
			t.Fatalf("activating %s on b: %v, %v", k, r, err)
		}
	}
	if r, err := fromA("there").Call(testCtx(t), &probe.Request{}); err != nil || r.Text != "a" {
		t.Fatalf("activating there on a: %v, %v", r, err)
	}
	// A grain whose directory entry b owns, not activated yet.
	var owned string
	for _, k := range keys("dir", 200) {
		if ownerOf(b, grain.ID{Type: probe.ReentrantProbeGrainType, Key: k}) == b.Member() {
			owned = k
			break
		}
	}
	if owned == "" {
		t.Fatal("b owns no directory entry of 200 keys")
	}

	held := fromA("held").CallAsync(testCtx(t), &probe.Request{Tag: "hold-answer"})
	cctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	doomed := fromA("doomed").CallAsync(cctx, &probe.Request{Tag: "hold-cancel"})
	// chain, on b, calls "there" on a, which calls back on b.
	chain := fromA("chain").CallAsync(testCtx(t), &probe.Request{Tag: "hold-chain", Path: []string{"there", "back"}})
	for range 3 {
		testwait.Recv(t, l.started, defaultTestTimeout, "the calls admitted before shedding to start")
	}

	load.setShedding(true)
	_, err := fromA("busy").Call(testCtx(t), &probe.Request{})
	wantOverloaded(t, err, b.Member())
	if _, err := fromA("busy").Tell(testCtx(t), &probe.Request{Tag: "refused"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, defaultTestTimeout, "the one-way call's refusal to be counted", func() bool { return b.Stats().Overload.Shed == 2 })

	// Directory traffic: the grain activates on a and registers with b.
	if r, err := fromA(owned).Call(testCtx(t), &probe.Request{}); err != nil || r.Text != "a" {
		t.Fatalf("a grain whose entry b owns, called through a: %v, %v; want it on a", r, err)
	}
	// A reminder tick, sent as the reminder service sends it.
	if _, err := a.rt.Invoke(testCtx(t), grain.ID{Type: probe.ReentrantProbeGrainType, Key: "busy"}, &local.ReminderMethod, &granaryv1.ReminderTick{Name: "nightly"}); err != nil {
		t.Fatalf("a reminder tick to a grain on b: %v", err)
	}
	testwait.Until(t, l.ticks, defaultTestTimeout, "the tick", func(n string) bool { return n == "nightly" })

	cancel()
	testwait.Until(t, l.ended, defaultTestTimeout, "the cancelled call's grain to see it", func(e string) bool { return e == "hold-cancel cancelled" })
	if _, err := doomed.Await(testCtx(t)); status.Code(err) != codes.Canceled {
		t.Fatalf("the cancelled call: %v, want Canceled", err)
	}
	l.releaseHeld()
	if r, err := held.Await(testCtx(t)); err != nil || r.Text != "b" {
		t.Fatalf("the call admitted before shedding: %v, %v; want its answer", r, err)
	}
	if r, err := chain.Await(testCtx(t)); err != nil || strings.Join(r.Trace, ",") != "b,a,b" {
		t.Fatalf("a chain that comes back through b: %v, %v; want trace b,a,b", r, err)
	}

	// A call another silo passed on (one hop) was taken already.
	tell := &granaryv1.Envelope{
		Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY, GrainType: probe.ReentrantProbeGrainType, GrainKey: "busy",
		Method: "Tell", MethodIndex: methodIndex(t, &probe.ReentrantProbe_ServiceDesc, "Tell"), Hops: 1,
		TimeoutNanos: int64(defaultTestTimeout),
	}
	if tell.Payload, err = proto.Marshal(&probe.Request{Tag: "passed on"}); err != nil {
		t.Fatal(err)
	}
	b.cl.Deliver(a.Member(), tell, transport.Responder{})
	testwait.Until(t, l.told, defaultTestTimeout, "the passed-on call", func(tag string) bool { return tag == "passed on" })

	if n := b.Stats().Overload.Shed; n != 2 {
		t.Fatalf("Overload.Shed %d: b refused more than the two new calls", n)
	}
	load.setShedding(false)
	if _, err := fromA("busy").Call(testCtx(t), &probe.Request{}); err != nil {
		t.Fatalf("a call once b's load fell: %v", err)
	}
}

func methodIndex(t *testing.T, d *grain.ServiceDesc, name string) uint32 {
	t.Helper()
	for i := range d.Methods {
		if d.Methods[i].Name == name {
			return uint32(i)
		}
	}
	t.Fatalf("%s has no method %s", d.Type, name)
	return 0
}

// TestGoClientAvoidsASheddingGateway: a Go client whose calls reach a
// gateway whose silo sheds load has the first such call refused there
// and answered through the other gateway, and sends the rest to the
// other gateway while the refusal's retry delay lasts (the client's
// clock does not move).
func TestGoClientAvoidsASheddingGateway(t *testing.T) {
	l := newShedLedger()
	var load *loadRig
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{
		tweak: func(cfg *Config) {
			gc := DefaultGatewayConfig()
			gc.Listen = "127.0.0.1:0"
			cfg.Gateway = &gc
			if cfg.Name == "b" {
				shedConfig(cfg)
			}
		},
		register: func(s *Silo, name string) {
			if err := registerShedProbe(s, l); err != nil {
				t.Fatal(err)
			}
			if name == "b" {
				load = rigLoad(t, s)
			}
		},
	})
	a, b := tc.silo("a"), tc.silo("b")
	load.setShedding(true)
	clock := clockwork.NewFakeClock()
	var cl *client.Client
	testwait.For(t, defaultTestTimeout, "a client to learn both gateways", func() bool {
		c, err := client.Dial(testCtx(t), client.WithGateways(a.GatewayAddr(), b.GatewayAddr()), client.WithClock(clock))
		if err != nil {
			return false
		}
		if len(c.Gateways()) == 2 {
			cl = c
			return true
		}
		c.Close()
		return false
	})
	defer cl.Close()
	for i := range 32 {
		if r, err := probe.NewReentrantProbeRef(cl, fmt.Sprintf("k%d", i)).Call(testCtx(t), &probe.Request{}); err != nil || r.Text != "a" {
			t.Fatalf("call %d: %v, %v; want it run on a", i, r, err)
		}
	}
	if n := b.Stats().Overload.Shed; n != 1 {
		t.Fatalf("b refused %d calls; want the first it was offered only, then the client to avoid it", n)
	}
}

// TestNewRequestsCountWhereTheyRun: with a latency limit, a client's
// request holds a place in the limit of the silo its grain runs on, not
// in that of the gateway's silo that passed it on, and gives it back
// when it ends.
func TestNewRequestsCountWhereTheyRun(t *testing.T) {
	l := newShedLedger()
	tc := newTestCluster(t, []string{"a", "b"}, clusterOpt{
		tweak: func(cfg *Config) {
			gc := DefaultGatewayConfig()
			gc.Listen = "127.0.0.1:0"
			cfg.Gateway = &gc
			// A limit no latency here reaches: the places are counted,
			// and nothing is refused.
			cfg.LoadShedding = LoadSheddingConfig{Enabled: true, LatencyLimit: time.Hour, MinConcurrency: 1,
				Window: shedWindow, Hysteresis: 0.9, RetryAfter: shedRetry}
		},
		register: func(s *Silo, name string) {
			if err := registerShedProbe(s, l); err != nil {
				t.Fatal(err)
			}
		},
	})
	t.Cleanup(l.releaseHeld)
	a, b := tc.silo("a"), tc.silo("b")
	// Called from b's own grain code, the grain is placed on b.
	if r, err := probe.NewReentrantProbeRef(b, "on-b").Call(testCtx(t), &probe.Request{}); err != nil || r.Text != "b" {
		t.Fatalf("placing the grain on b: %v, %v", r, err)
	}
	concurrency := func() (int64, int64) { return a.Stats().Overload.Concurrency, b.Stats().Overload.Concurrency }
	if ca, cb := concurrency(); ca != 0 || cb != 0 {
		t.Fatalf("before any client call, a runs %d and b %d new requests; want none", ca, cb)
	}
	// A plain gRPC client reaches a's gateway alone.
	cc, err := grpc.NewClient(a.GatewayAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	held := make(chan error, 1)
	go func() {
		ctx := metadata.AppendToOutgoingContext(testCtx(t), grpcapi.KeyHeader, "on-b")
		var r probe.Reply
		err := cc.Invoke(ctx, "/"+probe.ReentrantProbeGrainType+"/Call", &probe.Request{Tag: "hold-answer"}, &r)
		if err == nil && r.Text != "b" {
			err = fmt.Errorf("it ran on %s", r.Text)
		}
		held <- err
	}()
	testwait.Recv(t, l.started, defaultTestTimeout, "the held call to start")
	if ca, cb := concurrency(); ca != 0 || cb != 1 {
		t.Fatalf("with a client's call through a held on b, a runs %d and b %d new requests; want 0 and 1", ca, cb)
	}
	l.releaseHeld()
	if err := testwait.Recv(t, held, defaultTestTimeout, "the held call's answer"); err != nil {
		t.Fatalf("the held call: %v; want it run on b", err)
	}
	testwait.For(t, defaultTestTimeout, "b to give the place back", func() bool {
		ca, cb := concurrency()
		return ca == 0 && cb == 0
	})
}
