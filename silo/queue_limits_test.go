package silo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// queueTest drives queue-limit tests on a harness: its grains block on a
// gate the test holds, so the requests sent after the blocking one queue
// one by one, deterministically.
type queueTest struct {
	*harness
	ctx  context.Context
	logs *observer.ObservedLogs
}

func newQueueTest(t *testing.T, fake bool, cfg func(*Config), register map[string][]grain.RegisterOption) *queueTest {
	t.Helper()
	core, logs := observer.New(zapcore.WarnLevel)
	h := newHarness(t, harnessOpt{fake: fake, register: register, cfg: func(c *Config) {
		c.Logger = zap.New(core)
		if cfg != nil {
			cfg(c)
		}
	}})
	return &queueTest{harness: h, ctx: testCtx(t), logs: logs}
}

// send calls method 0 (Call) of typ/key with a request tagged tag,
// without waiting: a local call has reached its activation, queued or
// started or refused, when send returns. The timeout outlasts any fake
// clock jump of the tests.
func (q *queueTest) send(typ, key, tag string) grain.Pending {
	descs := map[string]*grain.ServiceDesc{
		probe.ProbeGrainType:       &probe.Probe_ServiceDesc,
		probe.WorkerProbeGrainType: &probe.WorkerProbe_ServiceDesc,
		probe.IntProbeGrainType:    &probe.IntProbe_ServiceDesc,
	}
	return q.s.InvokeAsync(q.ctx, grain.NewID(typ, key), &descs[typ].Methods[0], &probe.Request{Tag: tag}, grain.WithTimeout(time.Hour))
}

// depth is the queue depth of typ/key: its activation's, or its worker
// set's; 0 when it has none.
func (q *queueTest) depth(typ, key string) int {
	t := q.s.rt.Types[typ]
	if t.Opts.StatelessWorker {
		v, ok := t.Sets.Load(key)
		if !ok {
			return 0
		}
		return v.(*local.WorkerSet).Queued()
	}
	a, ok := t.Acts.Load(key)
	if !ok {
		return 0
	}
	a.Mu.Lock()
	defer a.Mu.Unlock()
	return a.QueuedLocked()
}

func (q *queueTest) wantDepth(typ, key string, want int) {
	q.t.Helper()
	if got := q.depth(typ, key); got != want {
		q.t.Fatalf("%s/%s has %d requests queued, want %d", typ, key, got, want)
	}
}

// await waits for every reply, which must succeed.
func (q *queueTest) await(ps ...grain.Pending) {
	q.t.Helper()
	for i, p := range ps {
		if _, err := p.Await(q.ctx); err != nil {
			q.t.Fatalf("request %d: %v", i, err)
		}
	}
}

// wantRefused checks that err is the hard limit's refusal, naming the
// grain, its depth and the limit.
func wantRefused(t *testing.T, err error, msg string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("got %v, want ResourceExhausted saying %q", err, msg)
	}
}

// countRuns scripts tag to record "ran <tag>" each time it runs.
func (q *queueTest) countRuns(tag string) {
	q.script(tag, func(ctx grain.Context, _ *probeGrain, _ *probe.Request) (*probe.Reply, error) {
		q.event("ran %s", tag)
		return &probe.Reply{}, nil
	})
}

func (q *queueTest) runs(tag string) int {
	n := 0
	for _, e := range q.eventLog() {
		if e == "ran "+tag {
			n++
		}
	}
	return n
}

// TestQueueHardLimitRefusesWithResourceExhausted: with an activation
// busy, requests queue up to the hard limit; the next is refused at once
// with ResourceExhausted naming the grain, the depth and the limit, and
// never runs, while those queued before it all run; the depth is back to
// zero once they have.
func TestQueueHardLimitRefusesWithResourceExhausted(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, false, nil, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(0, 3)},
	})
	g := q.hold("block")
	q.countRuns("queued")
	q.countRuns("refused")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	var queued []grain.Pending
	for range 3 {
		queued = append(queued, q.send(probe.ProbeGrainType, "k", "queued"))
	}
	q.wantDepth(probe.ProbeGrainType, "k", 3)
	_, err := q.send(probe.ProbeGrainType, "k", "refused").Await(q.ctx)
	wantRefused(t, err, "probe.Probe/k has 3 requests queued (hard limit 3); retry later")
	if got := q.s.Stats().Overload.QueueRefusals; got != 1 {
		t.Errorf("QueueRefusals = %d, want 1", got)
	}
	q.wantDepth(probe.ProbeGrainType, "k", 3)
	g.open()
	q.await(append(queued, first)...)
	if n := q.runs("queued"); n != 3 {
		t.Errorf("%d queued requests ran, want 3", n)
	}
	if n := q.runs("refused"); n != 0 {
		t.Errorf("the refused request ran %d times", n)
	}
	q.wantDepth(probe.ProbeGrainType, "k", 0)
	// The refusal left nothing behind in the activation's admission: an
	// idle activation starts the next request at once.
	if _, err := q.probe("k").Call(q.ctx, &probe.Request{}); err != nil {
		t.Fatalf("a request after the queue drained: %v", err)
	}
}

// TestQueueLimitCountsRequestsHeldWhileActivating: the requests an
// activation holds while OnActivate runs count against its limit, the
// one that made it included.
func TestQueueLimitCountsRequestsHeldWhileActivating(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, false, nil, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(0, 2)},
	})
	g := q.gate()
	q.script("activate:k", func(ctx grain.Context, pg *probeGrain, _ *probe.Request) (*probe.Reply, error) {
		q.event("activating")
		g.wait(ctx, pg)
		return nil, nil
	})
	first := q.send(probe.ProbeGrainType, "k", "")
	q.waitEvent("activating")
	second := q.send(probe.ProbeGrainType, "k", "")
	q.wantDepth(probe.ProbeGrainType, "k", 2)
	_, err := q.send(probe.ProbeGrainType, "k", "").Await(q.ctx)
	wantRefused(t, err, "probe.Probe/k has 2 requests queued (hard limit 2)")
	g.open()
	q.await(first, second)
	q.wantDepth(probe.ProbeGrainType, "k", 0)
}

// TestQueueLimitIgnoresRequestsThatStartAtOnce: an interleaving request
// starts whatever runs and never queues, so a full queue does not refuse
// it and it does not add to the depth.
func TestQueueLimitIgnoresRequestsThatStartAtOnce(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, false, nil, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(0, 1)},
	})
	g := q.hold("block")
	ref := q.probe("k")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	queued := q.send(probe.ProbeGrainType, "k", "")
	if _, err := ref.Interleave(q.ctx, &probe.Request{}); err != nil {
		t.Fatalf("an interleaving request with the queue full: %v", err)
	}
	q.wantDepth(probe.ProbeGrainType, "k", 1)
	g.open()
	q.await(first, queued)
	q.wantDepth(probe.ProbeGrainType, "k", 0)
}

// TestQueueSoftLimitWarnsOncePerMinutePerType: every request queued past
// the soft limit is counted, but the warning, which names the activation,
// its type and the depth, is logged at most once a minute per grain type:
// not again for another grain of the type within the minute, again once
// the minute has passed, and independently for another type.
func TestQueueSoftLimitWarnsOncePerMinutePerType(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, true, func(c *Config) {
		c.Types = map[string]TypeConfig{probe.IntProbeGrainType: {QueueLimits: QueueLimits{Soft: 1}}}
	}, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(2, 0)},
	})
	g := q.hold("block")
	var all []grain.Pending
	send := func(typ, key string, n int) {
		for range n {
			all = append(all, q.send(typ, key, ""))
		}
	}
	warnings := func() []observer.LoggedEntry {
		return q.logs.FilterMessageSnippet("past its soft limit").AllUntimed()
	}
	for _, key := range []string{"a", "b"} {
		all = append(all, q.send(probe.ProbeGrainType, key, "block"))
		q.waitEvent("block start")
	}
	send(probe.ProbeGrainType, "a", 2) // depth 2: at the limit, not past it
	if n := len(warnings()); n != 0 {
		t.Fatalf("%d warnings at the soft limit, want none", n)
	}
	send(probe.ProbeGrainType, "a", 2) // depths 3 and 4
	send(probe.ProbeGrainType, "b", 3) // depth 3, another grain of the type
	ws := warnings()
	if len(ws) != 1 {
		t.Fatalf("%d warnings within a minute for one type, want 1: %v", len(ws), ws)
	}
	f := ws[0].ContextMap()
	if f["grain"] != "probe.Probe/a" || f["type"] != probe.ProbeGrainType || f["queued"] != int64(3) || f["activation"] == nil {
		t.Errorf("the warning says %v, want grain probe.Probe/a, its activation, type %s, queued 3", f, probe.ProbeGrainType)
	}
	if got := q.s.Stats().Overload.QueueWarnings; got != 3 {
		t.Errorf("QueueWarnings = %d, want 3 (requests queued past the soft limit)", got)
	}

	all = append(all, q.send(probe.IntProbeGrainType, "1", "block"))
	q.waitEvent("block start")
	send(probe.IntProbeGrainType, "1", 2)
	if ws := warnings(); len(ws) != 2 || ws[1].ContextMap()["type"] != probe.IntProbeGrainType {
		t.Fatalf("another type's first warning is not logged: %v", ws)
	}

	q.clock.Advance(time.Minute - time.Nanosecond)
	send(probe.ProbeGrainType, "b", 1)
	if n := len(warnings()); n != 2 {
		t.Fatalf("%d warnings before the minute passed, want 2", n)
	}
	q.clock.Advance(time.Nanosecond)
	send(probe.ProbeGrainType, "b", 1)
	ws = warnings()
	if len(ws) != 3 {
		t.Fatalf("%d warnings once the minute passed, want 3", len(ws))
	}
	if f := ws[2].ContextMap(); f["grain"] != "probe.Probe/b" || f["queued"] != int64(5) || f["unlogged_since_last"] != uint64(3) {
		t.Errorf("the warning after the minute says %v, want grain probe.Probe/b, queued 5, 3 unlogged", f)
	}
	if got := q.s.Stats().Overload.QueueWarnings; got != 6 {
		t.Errorf("QueueWarnings = %d, want 6", got)
	}
	g.open()
	q.await(all...)
	for _, key := range []string{"a", "b"} {
		q.wantDepth(probe.ProbeGrainType, key, 0)
	}
	q.wantDepth(probe.IntProbeGrainType, "1", 0)
}

// TestQueueLimitsPrecedence: a limit set in Config.Types wins over the
// type's option, which wins over Config.QueueLimits, field by field.
func TestQueueLimitsPrecedence(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, false, func(c *Config) {
		c.QueueLimits = QueueLimits{Soft: 1, Hard: 1}
		c.Types = map[string]TypeConfig{probe.ProbeGrainType: {QueueLimits: QueueLimits{Hard: 2}}}
	}, map[string][]grain.RegisterOption{
		probe.ProbeGrainType:       {grain.WithQueueLimits(3, 4)},
		probe.WorkerProbeGrainType: {grain.WithQueueLimits(0, 3)},
	})
	for _, tc := range []struct {
		typ  string
		want local.QueueLimits
	}{
		{probe.ProbeGrainType, local.QueueLimits{Soft: 2, Hard: 2}},       // Types, then the option; the soft lowered to the hard
		{probe.WorkerProbeGrainType, local.QueueLimits{Soft: 1, Hard: 3}}, // the option, then the silo
		{probe.IntProbeGrainType, local.QueueLimits{Soft: 1, Hard: 1}},    // the silo
	} {
		if got := q.s.rt.Types[tc.typ].Limits; got != tc.want {
			t.Errorf("%s: limits %+v, want %+v", tc.typ, got, tc.want)
		}
	}
	// And the resolved hard limits are the ones enforced.
	g := q.hold("block")
	var all []grain.Pending
	for _, tc := range []struct {
		typ, key string
		hard     int
	}{
		{probe.ProbeGrainType, "k", 2},
		{probe.IntProbeGrainType, "1", 1},
	} {
		all = append(all, q.send(tc.typ, tc.key, "block"))
		q.waitEvent("block start")
		for range tc.hard {
			all = append(all, q.send(tc.typ, tc.key, ""))
		}
		_, err := q.send(tc.typ, tc.key, "").Await(q.ctx)
		wantRefused(t, err, fmt.Sprintf("has %d requests queued (hard limit %d)", tc.hard, tc.hard))
	}
	g.open()
	q.await(all...)
}

// TestQueueLimitCountsStatelessWorkerSet: a stateless worker ID's queued
// requests count against its whole worker set: with both workers busy,
// the set refuses once it holds the limit, though neither worker's own
// queue does.
func TestQueueLimitCountsStatelessWorkerSet(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, false, nil, map[string][]grain.RegisterOption{
		probe.WorkerProbeGrainType: {grain.WithQueueLimits(0, 3)}, // two workers (max_local_workers)
	})
	g := q.hold("block")
	var all []grain.Pending
	for range 2 {
		all = append(all, q.send(probe.WorkerProbeGrainType, "w", "block"))
		q.waitEvent("block start")
	}
	q.wantDepth(probe.WorkerProbeGrainType, "w", 0)
	for range 3 {
		all = append(all, q.send(probe.WorkerProbeGrainType, "w", ""))
	}
	q.wantDepth(probe.WorkerProbeGrainType, "w", 3)
	v, _ := q.s.rt.Types[probe.WorkerProbeGrainType].Sets.Load("w")
	for _, a := range v.(*local.WorkerSet).Snapshot() {
		a.Mu.Lock()
		n := a.QueuedLocked()
		a.Mu.Unlock()
		if n >= 3 {
			t.Fatalf("one worker holds %d requests: the test needs them spread", n)
		}
	}
	_, err := q.send(probe.WorkerProbeGrainType, "w", "").Await(q.ctx)
	wantRefused(t, err, "probe.WorkerProbe/w has 3 requests queued across its stateless workers (hard limit 3)")
	g.open()
	q.await(all...)
	q.wantDepth(probe.WorkerProbeGrainType, "w", 0)
}

// TestQueueHardLimitCountsAndLogsRefusedOneWay: a one-way request refused
// at the hard limit cannot tell its sender, so it is counted and logged,
// at most once a minute per type, and never runs.
func TestQueueHardLimitCountsAndLogsRefusedOneWay(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, true, nil, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(0, 1)},
	})
	g, first := q.tellWhileBlocked(t, 3) // the first queues; the others are refused
	ref := q.probe("k")
	if got := q.s.Stats().Overload.QueueRefusals; got != 2 {
		t.Errorf("QueueRefusals = %d, want 2", got)
	}
	logged := q.logs.FilterMessageSnippet("one-way request was refused").AllUntimed()
	if len(logged) != 1 {
		t.Fatalf("%d logs of refused one-way requests within a minute, want 1", len(logged))
	}
	if f := logged[0].ContextMap(); f["grain"] != "probe.Probe/k" || f["method"] != "Tell" || f["queued"] != int64(1) || f["hard_limit"] != int64(1) {
		t.Errorf("the log says %v, want grain probe.Probe/k, method Tell, queued 1, hard limit 1", f)
	}
	q.clock.Advance(time.Minute)
	if _, err := ref.Tell(q.ctx, &probe.Request{Tag: "tell"}, grain.WithTimeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
	logged = q.logs.FilterMessageSnippet("one-way request was refused").AllUntimed()
	if len(logged) != 2 || logged[1].ContextMap()["unlogged_since_last"] != uint64(1) {
		t.Fatalf("after a minute: logs %v, want a second one counting 1 unlogged", logged)
	}
	g.open()
	q.await(first)
	q.waitEvent("ran tell")
	q.wantDepth(probe.ProbeGrainType, "k", 0)
	if n := q.runs("tell"); n != 1 {
		t.Errorf("%d one-way requests ran, want 1 (3 refused)", n)
	}
}

// TestQueueDepthDrainsAcrossDeactivation: requests queued at an
// activation whose deactivation is pending, and those that arrive
// meanwhile, are routed again to the next activation once it ends. They
// leave the old count as they join the new one: with the queue full,
// every one of them is taken there (none refused), and every count is
// back to zero once they have run, for a grain and for a worker set.
func TestQueueDepthDrainsAcrossDeactivation(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{probe.ProbeGrainType, probe.WorkerProbeGrainType} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			q := newQueueTest(t, false, nil, map[string][]grain.RegisterOption{
				probe.ProbeGrainType:       {grain.WithQueueLimits(0, 3)},
				probe.WorkerProbeGrainType: {grain.WithStatelessWorker(1), grain.WithQueueLimits(0, 3)},
			})
			g := q.hold("block")
			first := q.send(typ, "k", "block")
			q.waitEvent("block start")
			var all []grain.Pending
			for range 2 {
				all = append(all, q.send(typ, "k", ""))
			}
			var old *local.Activation
			if typ == probe.WorkerProbeGrainType {
				v, _ := q.s.rt.Types[typ].Sets.Load("k")
				old = v.(*local.WorkerSet).Snapshot()[0]
			} else {
				old = actOf(q.harness, typ, "k")
			}
			old.RequestDeactivation(grain.DeactivateRequested)
			all = append(all, q.send(typ, "k", "")) // held for the next activation
			q.wantDepth(typ, "k", 3)
			_, err := q.send(typ, "k", "").Await(q.ctx)
			wantRefused(t, err, "has 3 requests queued")
			g.open()
			q.await(append(all, first)...)
			if got := q.s.Stats().Overload.QueueRefusals; got != 1 {
				t.Errorf("QueueRefusals = %d, want 1: a rerouted request was refused", got)
			}
			q.wantDepth(typ, "k", 0)
			old.Mu.Lock()
			n := old.QueuedLocked()
			old.Mu.Unlock()
			if n != 0 {
				t.Errorf("the old activation still counts %d requests", n)
			}
		})
	}
}

// TestQueueHardLimitRefusalReachesClient: requests from a client through
// the gateway queue at the same activation and count the same, and a
// client's request past the hard limit gets ResourceExhausted with the
// grain, depth and limit.
func TestQueueHardLimitRefusalReachesClient(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, false, func(c *Config) {
		gc := DefaultGatewayConfig()
		gc.Listen = "127.0.0.1:0"
		c.Gateway = &gc
	}, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(0, 2)},
	})
	cl, err := client.Dial(q.ctx, client.WithGateways(q.s.GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	g := q.hold("block")
	ref := probe.NewProbeRef(cl, "k")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	fromClient := ref.CallAsync(q.ctx, &probe.Request{}, grain.WithTimeout(time.Hour))
	testwait.For(t, defaultTestTimeout, "the client's request to queue", func() bool {
		return q.depth(probe.ProbeGrainType, "k") == 1
	})
	fromSilo := q.send(probe.ProbeGrainType, "k", "")
	_, err = ref.Call(q.ctx, &probe.Request{})
	wantRefused(t, err, "probe.Probe/k has 2 requests queued (hard limit 2); retry later")
	g.open()
	q.await(first, fromSilo)
	if _, err := fromClient.Await(q.ctx); err != nil {
		t.Fatalf("the client's queued request: %v", err)
	}
	q.wantDepth(probe.ProbeGrainType, "k", 0)
}

// TestQueueHardLimitCountsCallsFromOtherSilos: requests that come from
// another silo queue at the activation and count the same as local ones;
// one past the hard limit comes back to the calling silo as
// ResourceExhausted, and a one-way one is refused and counted on the silo
// that holds the activation.
func TestQueueHardLimitCountsCallsFromOtherSilos(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, nil, clusterOpt{tweak: func(c *Config) {
		c.Types = map[string]TypeConfig{probe.ProbeGrainType: {QueueLimits: QueueLimits{Hard: 2}}}
	}})
	a := tc.start("a")
	b := tc.start("b")
	key := tc.keyOn(b)
	// keyOn's call made the activation on b (its first offer); this one
	// reaches it from a (the second).
	if _, err := tc.call(a, key, nil); err != nil {
		t.Fatal(err)
	}
	act := localActivation(b, probe.ProbeGrainType, key)
	if act == nil {
		t.Fatalf("%s is not on b", key)
	}
	state := func() (calls uint64, queued int) {
		act.Mu.Lock()
		defer act.Mu.Unlock()
		return uint64(act.Calls), act.QueuedLocked()
	}
	ctx := testCtx(t)
	sleepCtx, wake := context.WithCancel(ctx)
	defer wake()
	ref := probe.NewProbeRef(a, key)
	sleeper := ref.CallAsync(sleepCtx, &probe.Request{Tag: "sleep", N: int64(time.Hour)})
	testwait.For(t, defaultTestTimeout, "the sleeping request to start on b", func() bool {
		calls, queued := state()
		return calls == 3 && queued == 0 // the third offer, and not queued: running
	})
	var queued []grain.Future[*probe.Reply]
	for range 2 {
		queued = append(queued, ref.CallAsync(ctx, &probe.Request{}))
	}
	testwait.For(t, defaultTestTimeout, "two requests from a to queue on b", func() bool {
		_, n := state()
		return n == 2
	})
	_, err := ref.Call(ctx, &probe.Request{})
	wantRefused(t, err, "probe.Probe/"+key+" has 2 requests queued (hard limit 2)")
	if _, err := ref.Tell(ctx, &probe.Request{}); err != nil {
		t.Fatalf("a one-way call returned %v", err)
	}
	testwait.For(t, defaultTestTimeout, "b to refuse both", func() bool {
		return b.Stats().Overload.QueueRefusals == 2
	})
	wake()
	if _, err := sleeper.Await(ctx); status.Code(err) != codes.Canceled {
		t.Fatalf("the sleeping request ended with %v, want Canceled", err)
	}
	for _, f := range queued {
		if _, err := f.Await(ctx); err != nil {
			t.Fatalf("a queued request: %v", err)
		}
	}
	if _, n := state(); n != 0 {
		t.Errorf("%d requests still counted on b", n)
	}
	tc.mu.Lock()
	told := tc.told[key]
	tc.mu.Unlock()
	if told != 0 {
		t.Errorf("the refused one-way request ran %d times", told)
	}
	if n := a.Stats().Overload.QueueRefusals; n != 0 {
		t.Errorf("a, which holds no activation, counted %d refusals", n)
	}
}

// TestQueueLimitsOptionSoftOverHardIsRefused: a grain option whose soft
// limit exceeds its hard one fails registration, naming both.
func TestQueueLimitsOptionSoftOverHardIsRefused(t *testing.T) {
	t.Parallel()
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	err = probe.RegisterProbeGrain(s, func(grain.ID) probe.ProbeGrain { return nil }, grain.WithQueueLimits(200, 100))
	if err == nil || !strings.Contains(err.Error(), "WithQueueLimits(200, 100)") {
		t.Fatalf("RegisterGrain with soft 200 over hard 100: %v, want an error naming the option", err)
	}
}

// TestQueueSoftLimitCountsEachPostedOneWayRequest: one-way requests that
// wait in an activation's inbox while a request runs count against the
// soft limit one by one when the running request's turn takes them, as
// requests queued under the lock do.
func TestQueueSoftLimitCountsEachPostedOneWayRequest(t *testing.T) {
	t.Parallel()
	q := newQueueTest(t, true, nil, map[string][]grain.RegisterOption{
		probe.ProbeGrainType: {grain.WithQueueLimits(2, 0)},
	})
	g, first := q.tellWhileBlocked(t, 5) // depths 0 to 4: the last three past the soft limit
	g.open()
	q.await(first)
	testwait.For(t, defaultTestTimeout, "the one-way requests to run", func() bool { return q.runs("tell") == 5 })
	if got := q.s.Stats().Overload.QueueWarnings; got != 3 {
		t.Errorf("QueueWarnings = %d, want 3 (requests queued past the soft limit)", got)
	}
	if n := len(q.logs.FilterMessageSnippet("past its soft limit").AllUntimed()); n != 1 {
		t.Errorf("%d warnings logged within a minute, want 1", n)
	}
}

// tellWhileBlocked starts a request to probe k that blocks until the
// returned gate opens, then sends k n one-way requests tagged "tell",
// whose runs countRuns counts. It returns the gate and the blocked call.
func (q *queueTest) tellWhileBlocked(t *testing.T, n int) (gate, grain.Pending) {
	t.Helper()
	g := q.hold("block")
	q.countRuns("tell")
	ref := q.probe("k")
	first := q.send(probe.ProbeGrainType, "k", "block")
	q.waitEvent("block start")
	for range n {
		if _, err := ref.Tell(q.ctx, &probe.Request{Tag: "tell"}, grain.WithTimeout(time.Hour)); err != nil {
			t.Fatalf("a one-way call returned %v", err)
		}
	}
	return g, first
}
