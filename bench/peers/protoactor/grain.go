package protoactor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/granaryio/granary/bench/scenario"
	benchpb "github.com/granaryio/granary/proto/bench"
	"google.golang.org/protobuf/types/known/emptypb"
)

// kind is the cluster kind of the benchmark grain.
const kind = "Pinger"

// env is what the grains of one member share with the harness: the
// counters and recorders they report into.
type env struct {
	handled atomic.Int64
	// relay is where the grain-to-grain caller records its calls: set by
	// Loop before the request that starts the loop, read by the grain
	// that handles that request alone.
	relay *scenario.Recorder
	late  *scenario.SyncRecorder

	// timers holds the cancel functions of every timer the grains
	// started, so that Close can stop them all.
	mu     sync.Mutex
	timers []scheduler.CancelFunc
}

// addTimer keeps a timer's cancel function for stopTimers.
func (e *env) addTimer(cancel scheduler.CancelFunc) {
	e.mu.Lock()
	e.timers = append(e.timers, cancel)
	e.mu.Unlock()
}

// stopTimers cancels every timer started so far.
func (e *env) stopTimers() {
	e.mu.Lock()
	timers := e.timers
	e.timers = nil
	e.mu.Unlock()
	for _, cancel := range timers {
		cancel()
	}
}

// pingerKind is the cluster kind whose grains share e.
func pingerKind(e *env) *cluster.Kind {
	return cluster.NewKind(kind, actor.PropsFromProducer(func() actor.Actor { return &pinger{env: e} }))
}

// tell is a one-way message. It never leaves the process, so it is a
// plain Go value rather than a protobuf message.
type tell struct{ n int64 }

// pinger is the benchmark grain: the Pinger service of proto/bench as a
// cluster grain that takes the service's request messages themselves.
type pinger struct {
	env     *env
	cluster *cluster.Cluster

	// The timer, once started: its period, when its next tick is due,
	// and how to cancel it.
	period time.Duration
	due    time.Time
	cancel scheduler.CancelFunc
}

// Receive handles one message.
func (g *pinger) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *cluster.ClusterInit:
		g.cluster = msg.Cluster
	case *benchpb.PingRequest:
		ctx.Respond(&benchpb.PingReply{N: msg.N})
	case *tell:
		g.env.handled.Add(1)
	case *benchpb.FanoutRequest:
		g.fanout(ctx, msg)
	case *benchpb.RelayRequest:
		g.relay(ctx, msg)
	case *benchpb.TimerRequest:
		g.startTimer(ctx, time.Duration(msg.PeriodNanos))
	case *tick:
		now := time.Now()
		g.env.late.Record(now.Sub(g.due))
		g.due = msg.fired.Add(g.period)
	case *actor.Stopped:
		if g.cancel != nil {
			g.cancel()
		}
	}
}

// fanout pings every grain the request names at once and answers when all
// have answered. Each ping is a future awaited with ReenterAfter, which
// runs its continuation on this grain when the reply comes, so the grain
// does not block while it waits.
func (g *pinger) fanout(ctx actor.Context, req *benchpb.FanoutRequest) {
	pids := make([]*actor.PID, len(req.Keys))
	for i, k := range req.Keys {
		if pids[i] = pidOf(g.cluster, k); pids[i] == nil {
			ctx.Respond(cluster.NewGrainErrorResponsef(cluster.ErrorReason_UNAVAILABLE, "no activation for %s/%s", kind, k))
			return
		}
	}
	if len(pids) == 0 {
		ctx.Respond(&benchpb.PingReply{})
		return
	}
	// One request serves every leaf: a message is never changed once sent.
	ping := &benchpb.PingRequest{}
	timeout := g.cluster.Config.RequestTimeoutTime
	pending := len(pids)
	var failed error
	for _, pid := range pids {
		ctx.ReenterAfter(ctx.RequestFuture(pid, ping, timeout), func(res any, err error) {
			if err == nil {
				_, err = reply[*benchpb.PingReply](res)
			}
			if err != nil && failed == nil {
				failed = err
			}
			if pending--; pending > 0 {
				return
			}
			if failed != nil {
				ctx.Respond(cluster.FromError(failed))
				return
			}
			ctx.Respond(&benchpb.PingReply{N: int64(len(pids))})
		})
	}
}

// relay pings the grain the request names, one ping at a time, each a
// cluster request made from inside this grain, timing each into the env's
// relay recorder.
func (g *pinger) relay(ctx actor.Context, req *benchpb.RelayRequest) {
	rec := g.env.relay
	prev := time.Now()
	for i := range req.N {
		if _, err := call[*benchpb.PingReply](g.cluster, req.To, &benchpb.PingRequest{N: i}); err != nil {
			ctx.Respond(cluster.FromError(err))
			return
		}
		now := time.Now()
		rec.Record(now.Sub(prev))
		prev = now
	}
	ctx.Respond(&benchpb.PingReply{N: req.N})
}

// tickSignal is what the timer scheduler sends; stampingSender turns it
// into a tick stamped with when it was sent.
type tickSignal struct{}

// tick is one timer tick, stamped with when the scheduler fired it.
type tick struct{ fired time.Time }

// stampingSender is the sender the timer scheduler sends through: the
// actor system's root context, except that it stamps each tick with the
// time it fires. protoactor's scheduler arms the next tick one period
// after it has sent the current one, so the stamp plus the period is when
// the next tick is due.
type stampingSender struct{ *actor.RootContext }

// Send sends message to pid, a tickSignal as a tick stamped now.
func (s stampingSender) Send(pid *actor.PID, message any) {
	if _, ok := message.(tickSignal); ok {
		message = &tick{fired: time.Now()}
	}
	s.RootContext.Send(pid, message)
}

// startTimer starts the grain's timer: a message every period, sent by
// protoactor's timer scheduler, the first a period from now.
func (g *pinger) startTimer(ctx actor.Context, period time.Duration) {
	if g.cancel != nil {
		ctx.Respond(cluster.NewGrainErrorResponse(cluster.ErrorReason_ALREADY_EXISTS, "timer already started"))
		return
	}
	s := scheduler.NewTimerScheduler(stampingSender{ctx.ActorSystem().Root})
	g.period = period
	g.due = time.Now().Add(period)
	g.cancel = s.SendRepeatedly(period, period, ctx.Self(), tickSignal{})
	g.env.addTimer(g.cancel)
	ctx.Respond(&emptypb.Empty{})
}

// pidOf finds the activation of grain id the way a cluster request does:
// from the member's PID cache, else from the identity lookup, which
// activates the grain if it is not yet.
func pidOf(c *cluster.Cluster, id string) *actor.PID {
	if pid, ok := c.PidCache.Get(id, kind); ok {
		return pid
	}
	pid := c.Get(id, kind)
	if pid != nil {
		c.PidCache.Set(id, kind, pid)
	}
	return pid
}

// call sends req to grain id with a cluster request and returns its
// reply.
func call[T any](c *cluster.Cluster, id string, req any) (T, error) {
	res, err := c.Request(id, kind, req)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("request to %s/%s: %w", kind, id, err)
	}
	return reply[T](res)
}

// reply makes a grain's answer a T or an error.
func reply[T any](res any) (T, error) {
	var zero T
	switch r := res.(type) {
	case T:
		return r, nil
	case *cluster.GrainErrorResponse:
		if r == nil {
			return zero, fmt.Errorf("empty grain error response")
		}
		return zero, r
	default:
		return zero, fmt.Errorf("unexpected reply %T", res)
	}
}
