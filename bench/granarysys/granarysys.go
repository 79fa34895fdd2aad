// Package granarysys runs the benchmark scenarios of bench/scenario on
// Granary: silos in this process, with the configuration a user gets from
// silo.DefaultConfig, and the Pinger grain of proto/bench.
//
// Settings beyond the defaults: listeners on 127.0.0.1 with ports the
// system picks; the two silos of Remote gossip with
// membership.DefaultLocalConfig, the profile for silos on one host.
// Nothing else is tuned.
//
// The stream scenarios (Stream) turn streams on: one memory stream
// provider with its defaults (StreamProviderConfig{}: a buffer of 1024
// events a subscriber, deliveries of up to 64), the stream's events
// benchpb.Events. A subscriber is a pinger that subscribes the handler
// countEvents, registered with the type (streams.WithHandlers), when it
// is asked to (Subscribe); the handler counts into the harness's tally.
// The publisher publishes through the typed handle, streams.Get on the
// publisher's silo, one Publish at a time. The stream's activation is
// placed as any grain is, beside the silo that first calls it: setup
// publishes one event, before anyone subscribes, from the publisher's
// silo, as a stream whose publisher starts first is placed. The two silos
// of the cross-silo stream keep the subscriptions in one in-memory store
// that both share (StreamsConfig.Storage), as a cluster's silos must share
// theirs; the publisher's silo hosts no pingers, so the subscribers live
// on the other and every delivery crosses between them.
package granarysys

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/bench/scenario"
	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	benchpb "github.com/granaryio/granary/proto/bench"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/membership"
	"github.com/granaryio/granary/silo/storage"
	"google.golang.org/protobuf/types/known/emptypb"
)

// System is Granary as a scenario.System.
type System struct{}

// New returns Granary's System.
func New() System { return System{} }

// Name is "granary".
func (System) Name() string { return "granary" }

// setupTimeout bounds starting and stopping silos and clients.
const setupTimeout = time.Minute

// env is what the pingers of one setup share with the harness: the
// counters and recorders they report into.
type env struct {
	handled atomic.Int64
	// relay is where the grain-to-grain caller records its calls: set by
	// Loop before the call that starts the loop, read by that call alone.
	relay *scenario.Recorder
	late  *scenario.SyncRecorder
	// tally counts the events the stream subscribers handle; gaps counts
	// the events they found missing, dropped by the memory provider.
	tally *scenario.Tally
	gaps  atomic.Int64
}

// pinger is the benchmark grain.
type pinger struct {
	benchpb.UnimplementedPingerGrain
	env *env
	// due is when the timer's next tick is due.
	due time.Time
	// events counts the stream events this pinger handled, once it
	// handled one; last is the sequence of the last.
	events *scenario.Counter
	last   uint64
}

var empty = &emptypb.Empty{}

func (g *pinger) Ping(_ grain.Context, req *benchpb.PingRequest) (*benchpb.PingReply, error) {
	return &benchpb.PingReply{N: req.N}, nil
}

func (g *pinger) Tell(grain.Context, *benchpb.PingRequest) (*emptypb.Empty, error) {
	g.env.handled.Add(1)
	return empty, nil
}

func (g *pinger) Fanout(ctx grain.Context, req *benchpb.FanoutRequest) (*benchpb.PingReply, error) {
	ping := &benchpb.PingRequest{}
	calls := make([]grain.Future[*benchpb.PingReply], len(req.Keys))
	for i, k := range req.Keys {
		calls[i] = benchpb.NewPingerRef(ctx.Caller(), k).PingAsync(ctx, ping)
	}
	if err := grain.AwaitFutures(ctx, calls); err != nil {
		return nil, err
	}
	return &benchpb.PingReply{N: int64(len(calls))}, nil
}

func (g *pinger) Relay(ctx grain.Context, req *benchpb.RelayRequest) (*benchpb.PingReply, error) {
	rec := g.env.relay
	callee := benchpb.NewPingerRef(ctx.Caller(), req.To)
	ping := &benchpb.PingRequest{}
	prev := time.Now()
	for range req.N {
		if _, err := callee.Ping(ctx, ping); err != nil {
			return nil, err
		}
		now := time.Now()
		rec.Record(now.Sub(prev))
		prev = now
	}
	return &benchpb.PingReply{N: req.N}, nil
}

// StartTimer starts a timer. A Granary timer's next tick is due a period
// after the previous one ended, so each tick's due time is the end of
// the one before plus the period.
func (g *pinger) StartTimer(ctx grain.Context, req *benchpb.TimerRequest) (*emptypb.Empty, error) {
	period := time.Duration(req.PeriodNanos)
	late := g.env.late
	g.due = time.Now().Add(period)
	_, err := ctx.RegisterTimer("tick", func(grain.Context) error {
		late.Record(time.Since(g.due))
		g.due = time.Now().Add(period)
		return nil
	}, period, period)
	return empty, err
}

// The stream scenarios' stream: provider, namespace and key.
const (
	streamProvider  = "memory"
	streamNamespace = "bench"
	streamKey       = "events"
)

// countEvents is the stream handler of the subscribers: it counts each
// event the pinger handles into the harness's tally, and the events
// missing before it, which the publisher reports.
var countEvents = streams.NewHandler("count", func(g *pinger, ctx grain.Context, ev streams.Event[*benchpb.Event]) error {
	if g.events == nil {
		if g.events = g.env.tally.Counter(ctx.ID().Key); g.events == nil {
			return fmt.Errorf("granarysys: %s is not a subscriber of the tally", ctx.ID())
		}
	} else if seq := ev.Token.Sequence; seq > g.last+1 {
		g.env.gaps.Add(int64(seq - g.last - 1))
	}
	g.last = ev.Token.Sequence
	g.events.Count()
	return nil
})

// events returns the handle of the stream events named key, through c.
func events(c grain.Caller, key string) streams.Stream[*benchpb.Event] {
	return streams.Get[*benchpb.Event](c, streamProvider, streamNamespace, key)
}

// Subscribe subscribes countEvents to the stream the request names.
func (g *pinger) Subscribe(ctx grain.Context, req *benchpb.SubscribeRequest) (*emptypb.Empty, error) {
	_, err := events(ctx.Caller(), req.Stream).Subscribe(ctx, countEvents)
	return empty, err
}

// startSilo starts a silo of cfg hosting pingers that share e.
func startSilo(ctx context.Context, cfg silo.Config, e *env) (*silo.Silo, error) {
	s, err := silo.New(cfg)
	if err != nil {
		return nil, err
	}
	if e != nil {
		if err := benchpb.RegisterPingerGrain(s, func(grain.ID) benchpb.PingerGrain { return &pinger{env: e} },
			streams.WithHandlers(countEvents)); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// closers closes several things in order and reports the first error.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// refs hands each caller index its own pinger reference, made once:
// references named prefix and the index.
type refs = scenario.Indexed[benchpb.PingerRef]

func newRefs(c grain.Caller, prefix string) *refs {
	return scenario.NewIndexed(4096, func(i int) benchpb.PingerRef {
		return benchpb.NewPingerRef(c, prefix+strconv.Itoa(i))
	})
}

// pings is a Caller that pings caller i's own pinger.
type pings struct {
	refs *refs
	io.Closer
}

var ping = &benchpb.PingRequest{N: 1}

func (p pings) Call(ctx context.Context, i int) error {
	_, err := p.refs.Get(i).Ping(ctx, ping)
	return err
}

// Local starts one silo.
func (System) Local(ctx context.Context) (scenario.Caller, error) {
	s, err := startSilo(ctx, silo.DefaultConfig(), &env{})
	if err != nil {
		return nil, err
	}
	return pings{refs: newRefs(s, "p"), Closer: s}, nil
}

// clusterConfig is a silo of the benchmark's cluster on loopback.
func clusterConfig(name string, seeds []string) silo.Config {
	cfg := silo.DefaultConfig()
	cfg.Name = name
	cc := silo.DefaultClusterConfig()
	cc.Membership = membership.DefaultLocalConfig()
	cc.Membership.ClusterID = "bench"
	cc.Membership.Seeds = seeds
	cc.GRPCListen = "127.0.0.1:0"
	cfg.Cluster = &cc
	return cfg
}

// Remote starts two silos: the callee hosts the pingers, the caller none,
// so every call crosses between them.
func (System) Remote(ctx context.Context) (scenario.Caller, error) {
	callee, err := startSilo(ctx, clusterConfig("callee", nil), &env{})
	if err != nil {
		return nil, err
	}
	gossip, _ := callee.ClusterAddrs()
	caller, err := startSilo(ctx, clusterConfig("caller", []string{gossip}), nil)
	if err != nil {
		_ = callee.Close()
		return nil, err
	}
	c := pings{refs: newRefs(caller, "r"), Closer: closers{caller, callee}}
	if err := firstCall(ctx, c); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// firstCall calls until a call succeeds: a silo that has only just joined
// may not yet see where the grain type is hosted.
func firstCall(ctx context.Context, c scenario.Caller) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	for {
		err := c.Call(ctx, 0)
		if err == nil {
			return nil
		}
		if grain.Sleep(ctx, 10*time.Millisecond) != nil {
			return fmt.Errorf("no call went through while the silos joined: %w", err)
		}
	}
}

// Gateway starts a silo with a gateway and a client of it.
func (System) Gateway(ctx context.Context) (scenario.Caller, error) {
	cfg := silo.DefaultConfig()
	gc := silo.DefaultGatewayConfig()
	gc.Listen = "127.0.0.1:0"
	cfg.Gateway = &gc
	s, err := startSilo(ctx, cfg, &env{})
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	cl, err := client.Dial(dctx, client.WithGateways(s.GatewayAddr()))
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return pings{refs: newRefs(cl, "c"), Closer: closers{cl, s}}, nil
}

// tells sends one-way pings to a fixed set of pingers.
type tells struct {
	e    *env
	refs []benchpb.PingerRef
	io.Closer
}

func (t tells) Send(ctx context.Context, _ int, n int64) error {
	_, err := t.refs[n%int64(len(t.refs))].Tell(ctx, ping)
	return err
}

func (t tells) Handled() int64 { return t.e.handled.Load() }

// Tell starts a silo whose grains count the one-way pings they handle.
func (System) Tell(ctx context.Context, grains int) (scenario.Teller, error) {
	e := &env{}
	s, err := startSilo(ctx, silo.DefaultConfig(), e)
	if err != nil {
		return nil, err
	}
	t := tells{e: e, refs: make([]benchpb.PingerRef, grains), Closer: s}
	for i := range t.refs {
		t.refs[i] = benchpb.NewPingerRef(s, "t"+strconv.Itoa(i))
	}
	return t, nil
}

// fanouts asks caller i's pinger to fan out to the same width pingers.
type fanouts struct {
	refs *refs
	req  *benchpb.FanoutRequest
	io.Closer
}

func (f fanouts) Call(ctx context.Context, i int) error {
	_, err := f.refs.Get(i).Fanout(ctx, f.req)
	return err
}

// Fanout starts a silo whose pingers fan out to width others.
func (System) Fanout(ctx context.Context, width int) (scenario.Caller, error) {
	s, err := startSilo(ctx, silo.DefaultConfig(), &env{})
	if err != nil {
		return nil, err
	}
	req := &benchpb.FanoutRequest{Keys: make([]string, width)}
	for i := range req.Keys {
		req.Keys[i] = "leaf" + strconv.Itoa(i)
	}
	return fanouts{refs: newRefs(s, "f"), req: req, Closer: s}, nil
}

// relays has pinger "a" ping pinger "b".
type relays struct {
	e *env
	a benchpb.PingerRef
	io.Closer
}

func (r relays) Loop(ctx context.Context, n int, rec *scenario.Recorder) error {
	r.e.relay = rec
	_, err := r.a.Relay(ctx, &benchpb.RelayRequest{To: "b", N: int64(n)})
	return err
}

// GrainToGrain starts a silo where pinger "a" pings pinger "b".
func (System) GrainToGrain(ctx context.Context) (scenario.Looper, error) {
	e := &env{}
	s, err := startSilo(ctx, silo.DefaultConfig(), e)
	if err != nil {
		return nil, err
	}
	return relays{e: e, a: benchpb.NewPingerRef(s, "a"), Closer: s}, nil
}

// activations pings a pinger never pinged before.
type activations struct {
	s *silo.Silo
	io.Closer
}

func (a activations) Call(ctx context.Context, i int) error {
	_, err := benchpb.NewPingerRef(a.s, strconv.Itoa(i)).Ping(ctx, ping)
	return err
}

// Activations starts a silo for new grains.
func (System) Activations(ctx context.Context) (scenario.Caller, error) {
	s, err := startSilo(ctx, silo.DefaultConfig(), &env{})
	if err != nil {
		return nil, err
	}
	return activations{s: s, Closer: s}, nil
}

// withStreams turns on the stream scenarios' memory provider, with the
// subscriptions kept in subs when it is not nil.
func withStreams(cfg silo.Config, subs storage.Provider) silo.Config {
	cfg.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{streamProvider: {}}}
	if subs != nil {
		cfg.Storage = map[string]storage.Provider{"subscriptions": subs}
		cfg.Streams.Storage = "subscriptions"
	}
	return cfg
}

// publisher publishes the stream's events, one at a time.
type publisher struct {
	e      *env
	stream streams.Stream[*benchpb.Event]
	io.Closer
}

// Publish publishes event n, or fails once a subscriber found an event
// missing: the harness would wait for it in vain.
func (p publisher) Publish(ctx context.Context, n int64) error {
	if gaps := p.e.gaps.Load(); gaps > 0 {
		return fmt.Errorf("granarysys: the memory stream dropped %d events: a subscriber fell a buffer behind", gaps)
	}
	_, err := p.stream.Publish(ctx, &benchpb.Event{N: n})
	return err
}

// Stream starts a silo, or with remote a publisher's silo and a
// subscribers' silo, and subscribes the tally's subscribers to a stream
// activated on the publisher's silo.
func (System) Stream(ctx context.Context, tally *scenario.Tally, remote bool) (scenario.Publisher, error) {
	e := &env{tally: tally}
	var pub, sub *silo.Silo
	var c io.Closer
	if !remote {
		s, err := startSilo(ctx, withStreams(silo.DefaultConfig(), nil), e)
		if err != nil {
			return nil, err
		}
		pub, sub, c = s, s, s
	} else {
		subs := storage.NewMemory(0)
		var err error
		if pub, err = startSilo(ctx, withStreams(clusterConfig("publisher", nil), subs), nil); err != nil {
			return nil, err
		}
		gossip, _ := pub.ClusterAddrs()
		if sub, err = startSilo(ctx, withStreams(clusterConfig("subscribers", []string{gossip}), subs), e); err != nil {
			_ = pub.Close()
			return nil, err
		}
		c = closers{sub, pub}
	}
	p := publisher{e: e, stream: events(pub, streamKey), Closer: c}
	if err := subscribe(ctx, p, sub, tally); err != nil {
		_ = c.Close()
		return nil, err
	}
	return p, nil
}

// subscribe activates the stream beside its publisher with a first
// event, which has no subscriber yet, then subscribes each of the
// tally's subscribers, pingers reached through the subscribers' silo. A
// silo that has only just joined may not yet see where the stream is, so
// the first subscription is tried until it goes through.
func subscribe(ctx context.Context, p publisher, sub *silo.Silo, tally *scenario.Tally) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if err := p.Publish(ctx, -1); err != nil {
		return fmt.Errorf("activating the stream: %w", err)
	}
	req := &benchpb.SubscribeRequest{Stream: streamKey}
	for i := range tally.Subscribers() {
		for {
			_, err := benchpb.NewPingerRef(sub, tally.Name(i)).Subscribe(ctx, req)
			if err == nil {
				break
			}
			if i > 0 || grain.Sleep(ctx, 10*time.Millisecond) != nil {
				return fmt.Errorf("subscribing %s: %w", tally.Name(i), err)
			}
		}
	}
	return nil
}

// timerStarters is how many goroutines start the timers.
const timerStarters = 8

// Timers starts a silo and n pingers, each running a timer.
func (System) Timers(ctx context.Context, n int, period time.Duration, late *scenario.SyncRecorder) (io.Closer, error) {
	s, err := startSilo(ctx, silo.DefaultConfig(), &env{late: late})
	if err != nil {
		return nil, err
	}
	req := &benchpb.TimerRequest{PeriodNanos: int64(period)}
	err = scenario.Parallel(ctx, n, timerStarters, func(i int) error {
		_, err := benchpb.NewPingerRef(s, "timer"+strconv.Itoa(i)).StartTimer(ctx, req)
		return err
	})
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}
