// Package protoactor runs the benchmark scenarios of bench/scenario on
// protoactor-go's cluster grains (virtual actors), in this process.
//
// Every node is a cluster member made the way protoactor's own
// cluster_test_tool fixture makes one: cluster.New on a new actor system,
// configured by cluster.Configure with an in-memory cluster provider over
// test.InMemAgent (one agent per setup, shared by the members of that
// setup), the disthash identity lookup, and remote.Configure("127.0.0.1",
// 0), then started with cluster.StartMember. The grain is one cluster kind
// serving the Pinger service of proto/bench: a call is cluster.Request
// with the service's request message itself (benchpb.PingRequest and so
// on), and the grain answers with the reply message, or a
// cluster.GrainErrorResponse.
//
// Settings are protoactor's defaults throughout: the cluster's request
// timeout (5 s) and retries, the default dispatcher and unbounded mailbox,
// the gossip intervals. Nothing that runs while the benchmark measures is
// tuned. Its log is discarded, so that a benchmark's report is all it
// prints; at the default Info level it logs only as members start and
// stop, not while the benchmark measures. Points worth knowing:
//   - Grains have no receive timeout, so they never deactivate on their
//     own; that is the cluster's default. Kinds made by protoactor's grain
//     generator (protoc-gen-go-grain) set a 60 s receive timeout, and their
//     clients marshal each argument into a cluster.GrainRequest; neither
//     is done here. Both cost: the receive timeout resets a timer on every
//     message, which slows calls and, markedly, activations.
//   - Two changes, both to how members stop, not to how they run: the
//     provider is this package's agentProvider rather than protoactor's
//     test.Provider, which leaks a goroutine that keeps every member it
//     ever started in memory; and the disthash lookup is wrapped so that
//     shutting a member down does not stop its grains one by one, which
//     protoactor does in time quadratic in their number (half an hour or
//     more for the million grains of Activations). See provider.go.
//   - protoactor's remote.Start calls grpclog.SetLoggerV2 each time a
//     member starts, which gRPC allows only before any other gRPC call, so
//     the two members of Remote race inside protoactor under the race
//     detector (the tests skip that scenario under -race).
//
// How each scenario maps onto protoactor:
//   - Local, Activations: one member hosting the kind; a call is a
//     cluster.Request to the grain. Local's identities ("0", "1", ...) are
//     built once; Activations builds each new identity ("a" and the number)
//     as it calls, one small allocation per call.
//   - Remote: two members sharing an agent; only the callee member has the
//     kind, the caller member has none (as a client would), so every
//     request crosses the loopback TCP connections between them. Setup
//     waits until the caller's member list has the callee and a call has
//     gone through.
//   - Gateway: ErrUnsupported: protoactor has no gateway for clients
//     outside the cluster (a cluster client is a member of its own).
//   - Tell: the cluster API has no one-way request, so each grain's PID
//     is resolved once at setup with cluster.Get and the messages go by
//     the root context's Send. They stay in the process, so they are plain
//     Go values.
//   - Fanout: the grain sends its pings with the actor context's
//     RequestFuture, to PIDs found the way cluster.Request finds them (PID
//     cache, then identity lookup), and awaits each with ReenterAfter, the
//     non-blocking await protoactor's reentrant grains use. It does not
//     use cluster.RequestFuture: that keeps its call options in a package
//     variable made from the first cluster to call it, so in a process
//     that starts several clusters, as this benchmark does, it would send
//     through a cluster that has since shut down.
//   - GrainToGrain: the calling grain makes cluster.Request calls to the
//     other from inside its receive, blocking itself while each is in
//     flight, as any synchronous call from a grain does.
//   - Stream (stream.go): protoactor's cluster pub-sub, as its own pub-sub
//     fixture (cluster_test_tool) uses it. Subscribers are grains of a
//     kind of their own, subscribed by cluster identity
//     (SubscribeByClusterIdentity); the publisher is the member's
//     cluster.Publisher, publishing one event a call (Publish, which waits
//     for the topic actor's answer). The topic kind is the one protoactor
//     registers on every member, with its default settings. With two
//     members, the subscribers' kind is on one only and the topic is named
//     so that the hash places it on the other, the publisher's. Its
//     BatchingProducer, which gathers the publishes queued meanwhile into
//     one batch, is not used: Granary's streams publish one event a call.
//   - Timers: each grain starts protoactor's timer scheduler
//     (scheduler.TimerScheduler.SendRepeatedly, first tick a period after
//     it starts). That scheduler arms the next tick one period after it
//     has sent the current one, so a tick is due one period after the
//     previous tick fired (the first one period after the start); the
//     scheduler sends through a root context that stamps each tick with
//     the time it fired, and the grain records how long after that stamp
//     plus the period it handles the next tick. The due time so found is
//     early by the cost of one local send.
//
// Close stops the timers and shuts every member down with
// cluster.Shutdown(true), which pauses two seconds on purpose. The
// member's grains are left idle, running nothing, and are garbage once
// the member is; protoactor's gossiper holds the member for up to a
// minute more, through a goroutine that rate-limits its log.
package protoactor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/granaryio/granary/bench/scenario"
	"github.com/granaryio/granary/grain"
	benchpb "github.com/granaryio/granary/proto/bench"
	"google.golang.org/protobuf/types/known/emptypb"
)

// System is protoactor-go as a scenario.System.
type System struct{}

// New returns protoactor's System.
func New() System { return System{} }

// Name is "protoactor".
func (System) Name() string { return "protoactor" }

// clusterName names every benchmark cluster; each setup has its own
// InMemAgent, so clusters of different setups never meet.
const clusterName = "bench"

// setupTimeout bounds waiting for members to see each other and for the
// first call to go through.
const setupTimeout = time.Minute

// startMember starts a cluster member on agent, hosting kinds (and the
// pub-sub topic kind, which protoactor adds to every member).
func startMember(agent *test.InMemAgent, kinds ...*cluster.Kind) (c *cluster.Cluster, err error) {
	cfg := cluster.Configure(clusterName, newAgentProvider(agent), lookup(disthash.New()),
		remote.Configure("127.0.0.1", 0), cluster.WithKinds(kinds...))
	c = cluster.New(actor.NewActorSystem(actor.WithLoggerFactory(discardLog)), cfg)
	// StartMember reports failures, a port it cannot listen on say, by
	// panicking.
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("protoactor: starting a cluster member: %v", r)
		}
	}()
	c.StartMember()
	return c, nil
}

// discardLog is the actor system's logger: one that writes nothing.
func discardLog(*actor.ActorSystem) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// members shuts cluster members down, in order, when closed.
type members []*cluster.Cluster

func (ms members) Close() (err error) {
	for _, c := range ms {
		if cerr := shutdown(c); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// shutdown shuts a member down gracefully, all but its grains: see
// keptLookup.
func shutdown(c *cluster.Cluster) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("protoactor: shutting a cluster member down: %v", r)
		}
	}()
	c.Shutdown(true)
	return nil
}

// node is one member hosting the kind, with its grains' env.
type node struct {
	c   *cluster.Cluster
	env *env
}

// startNode starts a lone member hosting the kind.
func startNode() (*node, error) {
	e := &env{}
	c, err := startMember(test.NewInMemAgent(), pingerKind(e))
	if err != nil {
		return nil, err
	}
	return &node{c: c, env: e}, nil
}

// Close stops the node's timers and shuts it down.
func (n *node) Close() error {
	n.env.stopTimers()
	return shutdown(n.c)
}

// names hands out grain identities by index, each built once: prefix
// and the index in decimal.
type names = scenario.Indexed[string]

func newNames(prefix string) *names {
	return scenario.NewIndexed(4096, func(i int) string { return prefix + strconv.Itoa(i) })
}

// ping is every ping's request: a local request is passed, not copied,
// and no grain changes it (as in bench/granarysys).
var ping = &benchpb.PingRequest{N: 1}

// pings is a Caller that pings caller i's own grain through c.
type pings struct {
	c     *cluster.Cluster
	names *names
	io.Closer
}

func (p pings) Call(ctx context.Context, i int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := call[*benchpb.PingReply](p.c, p.names.Get(i), ping)
	return err
}

// Local starts one member hosting the kind.
func (System) Local(context.Context) (scenario.Caller, error) {
	n, err := startNode()
	if err != nil {
		return nil, err
	}
	return pings{c: n.c, names: newNames(""), Closer: n}, nil
}

// Remote starts two members on one InMemAgent: the callee hosts the kind,
// the caller none, and the calls go from the caller.
func (System) Remote(ctx context.Context) (scenario.Caller, error) {
	agent := test.NewInMemAgent()
	caller, err := startMember(agent)
	if err != nil {
		return nil, err
	}
	callee, err := startMember(agent, pingerKind(&env{}))
	if err != nil {
		_ = shutdown(caller)
		return nil, err
	}
	p := pings{c: caller, names: newNames(""), Closer: members{caller, callee}}
	if err := waitForCallee(ctx, caller, callee, p); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// waitForCallee waits, for setupTimeout at most, until the caller's
// member list has the callee and a call through p goes through.
func waitForCallee(ctx context.Context, caller, callee *cluster.Cluster, p pings) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	for !caller.MemberList.ContainsMemberID(callee.ActorSystem.ID) {
		if err := pause(ctx); err != nil {
			return fmt.Errorf("protoactor: the caller member never saw the callee: %w", err)
		}
	}
	for {
		err := p.Call(ctx, 0)
		if err == nil {
			return nil
		}
		if perr := pause(ctx); perr != nil {
			return fmt.Errorf("protoactor: no call went through between the members: %w (last: %v)", perr, err)
		}
	}
}

// pause waits a little before polling again, or until ctx ends.
func pause(ctx context.Context) error { return grain.Sleep(ctx, 10*time.Millisecond) }

// Gateway is unsupported: protoactor has no gateway for external clients.
func (System) Gateway(context.Context) (scenario.Caller, error) {
	return nil, scenario.ErrUnsupported
}

// tells sends one-way pings to a fixed set of grains by their PIDs.
type tells struct {
	root *actor.RootContext
	pids []*actor.PID
	env  *env
	io.Closer
}

func (t tells) Send(_ context.Context, _ int, n int64) error {
	t.root.Send(t.pids[n%int64(len(t.pids))], &tell{n: n})
	return nil
}

func (t tells) Handled() int64 { return t.env.handled.Load() }

// Tell starts a member and activates grains grains, keeping their PIDs.
func (System) Tell(_ context.Context, grains int) (scenario.Teller, error) {
	n, err := startNode()
	if err != nil {
		return nil, err
	}
	t := tells{root: n.c.ActorSystem.Root, pids: make([]*actor.PID, grains), env: n.env, Closer: n}
	for i := range t.pids {
		id := "t" + strconv.Itoa(i)
		if t.pids[i] = n.c.Get(id, kind); t.pids[i] == nil {
			_ = n.Close()
			return nil, fmt.Errorf("protoactor: no activation for %s/%s", kind, id)
		}
	}
	return t, nil
}

// fanouts asks caller i's grain to fan out to the same width grains.
type fanouts struct {
	c     *cluster.Cluster
	names *names
	req   *benchpb.FanoutRequest
	io.Closer
}

func (f fanouts) Call(ctx context.Context, i int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := call[*benchpb.PingReply](f.c, f.names.Get(i), f.req)
	return err
}

// Fanout starts a member whose grains fan out to width others.
func (System) Fanout(_ context.Context, width int) (scenario.Caller, error) {
	n, err := startNode()
	if err != nil {
		return nil, err
	}
	req := &benchpb.FanoutRequest{Keys: make([]string, width)}
	for i := range req.Keys {
		req.Keys[i] = "leaf" + strconv.Itoa(i)
	}
	return fanouts{c: n.c, names: newNames("f"), req: req, Closer: n}, nil
}

// relays has grain "a" ping grain "b".
type relays struct {
	n *node
	io.Closer
}

func (r relays) Loop(ctx context.Context, n int, rec *scenario.Recorder) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.n.env.relay = rec
	_, err := call[*benchpb.PingReply](r.n.c, "a", &benchpb.RelayRequest{To: "b", N: int64(n)})
	return err
}

// GrainToGrain starts a member where grain "a" pings grain "b".
func (System) GrainToGrain(context.Context) (scenario.Looper, error) {
	n, err := startNode()
	if err != nil {
		return nil, err
	}
	return relays{n: n, Closer: n}, nil
}

// activations pings a grain never pinged before.
type activations struct {
	c *cluster.Cluster
	io.Closer
}

func (a activations) Call(ctx context.Context, i int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := call[*benchpb.PingReply](a.c, "a"+strconv.Itoa(i), &benchpb.PingRequest{N: int64(i)})
	return err
}

// Activations starts a member for new grains.
func (System) Activations(context.Context) (scenario.Caller, error) {
	n, err := startNode()
	if err != nil {
		return nil, err
	}
	return activations{c: n.c, Closer: n}, nil
}

// timerStarters is how many goroutines start the timers.
const timerStarters = 8

// Timers starts a member and n grains, each running a timer.
func (System) Timers(ctx context.Context, n int, period time.Duration, late *scenario.SyncRecorder) (io.Closer, error) {
	nd, err := startNode()
	if err != nil {
		return nil, err
	}
	nd.env.late = late
	req := &benchpb.TimerRequest{PeriodNanos: int64(period)}
	err = scenario.Parallel(ctx, n, timerStarters, func(i int) error {
		_, err := call[*emptypb.Empty](nd.c, "timer"+strconv.Itoa(i), req)
		return err
	})
	if err != nil {
		_ = nd.Close()
		return nil, err
	}
	return nd, nil
}
