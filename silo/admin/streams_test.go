package admin_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/admin"
	"github.com/granaryio/granary/silo/admin/adminapi"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// streamLog is what the Listener grains of one test heard, and which of
// them fail, by grain key, kept outside the activations.
type streamLog struct {
	mu      sync.Mutex
	failing map[string]bool
	heard   map[string]int
}

func newStreamLog() *streamLog {
	return &streamLog{failing: map[string]bool{}, heard: map[string]int{}}
}

// fail makes the handler of grain key fail every event, or stop failing.
func (l *streamLog) fail(key string, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing[key] = on
}

// count returns how many events grain key handled.
func (l *streamLog) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heard[key]
}

// total returns how many events the grains handled.
func (l *streamLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.heard {
		n += c
	}
	return n
}

// listener is the probe Listener grain: its handler, onTick, counts the
// events it handled into log, or fails them.
type listener struct {
	probe.UnimplementedListenerGrain
	log *streamLog
}

var onTick = streams.NewHandler("on-tick", func(l *listener, ctx grain.Context, ev streams.Event[*probe.Tick]) error {
	key := ctx.ID().Key
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	if l.log.failing[key] {
		return status.Errorf(codes.Aborted, "%s refuses tick %d", key, ev.Message.N)
	}
	l.log.heard[key]++
	return nil
})

func (l *listener) Subscribe(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	sub, err := streams.Get[*probe.Tick](ctx.Caller(), op.Provider, op.Namespace, op.Key).Subscribe(ctx, onTick)
	if err != nil {
		return nil, err
	}
	return &probe.ListenReply{Subscription: sub.ID}, nil
}

// streamsConfig is the test silos' streams: the memory provider
// "default", which parks a subscription after one retry.
func streamsConfig() *silo.StreamsConfig {
	return &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{
		"default": {Retries: 1, RetryMin: time.Millisecond, RetryMax: time.Millisecond},
	}}
}

// registerListener registers the Listener grain on sl, recording into
// log.
func registerListener(t testing.TB, sl *silo.Silo, log *streamLog) {
	t.Helper()
	err := probe.RegisterListenerGrain(sl, func(grain.ID) probe.ListenerGrain { return &listener{log: log} }, streams.WithHandlers(onTick))
	if err != nil {
		t.Fatal(err)
	}
}

// startStreamsAlone starts a silo alone with streams and the Listener
// type, attached to an admin server made with cfg.
func startStreamsAlone(t *testing.T, cfg admin.Config, log *streamLog) (*admin.Server, *silo.Silo) {
	t.Helper()
	srv := listen(t, cfg)
	scfg := silo.DefaultConfig()
	scfg.Name = "alone"
	scfg.AdminAddr = srv.Addr()
	scfg.Logger = testLogger()
	scfg.Streams = streamsConfig()
	sl, err := silo.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	registerListener(t, sl, log)
	t.Cleanup(func() {
		if err := sl.Stop(testCtx(t)); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	srv.Attach(sl, nil)
	if err := sl.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return srv, sl
}

// subscribe subscribes Listener key to the stream default/jobs/stream
// and returns the subscription's ID.
func subscribe(t testing.TB, caller grain.Caller, key, stream string) string {
	t.Helper()
	r, err := probe.NewListenerRef(caller, key).Subscribe(testCtx(t), &probe.ListenOp{Provider: "default", Namespace: "jobs", Key: stream})
	if err != nil {
		t.Fatalf("subscribing %s to %s: %v", key, stream, err)
	}
	return r.Subscription
}

// publish publishes n ticks to default/jobs/stream through caller. The
// first publish to a stream activates it beside its caller.
func publish(t testing.TB, caller grain.Caller, stream string, n int) {
	t.Helper()
	st := streams.Get[*probe.Tick](caller, "default", "jobs", stream)
	for i := range n {
		if _, err := st.Publish(testCtx(t), &probe.Tick{N: int64(i)}); err != nil {
			t.Fatalf("publishing to %s: %v", stream, err)
		}
	}
}

// parkOnB makes, in c (whose silos run streams through log), the stream
// default/jobs/on-b, active on b, with the subscriptions of good-b, which
// handles its events, and bad-b, parked; and default/jobs/on-a, active
// on a, with good-a's. Each stream has had two events. It returns bad-b's
// subscription, once the admin API of a lists it as parked and the
// others' events as handled.
func parkOnB(t *testing.T, c *testCluster, log *streamLog) string {
	t.Helper()
	a, b := c.node("a").sl, c.node("b").sl
	publish(t, b, "on-b", 1)
	publish(t, a, "on-a", 1)
	subscribe(t, b, "good-b", "on-b")
	bad := subscribe(t, b, "bad-b", "on-b")
	subscribe(t, a, "good-a", "on-a")
	log.fail("bad-b", true)
	publish(t, b, "on-b", 1)
	publish(t, a, "on-a", 1)
	testwait.For(t, testTimeout, "bad-b's subscription to be listed as parked, and the others' events as handled", func() bool {
		r, err := adminClient(t, c.node("a").srv.Addr()).Streams(testCtx(t), adminapi.StreamsQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Streams) != 2 || r.Streams[0].Parked != 1 {
			return false
		}
		for _, st := range r.Streams {
			for _, sub := range st.Subscriptions {
				if !sub.Parked && (sub.Handled == "" || sub.Lag != 0) {
					return false
				}
			}
		}
		return true
	})
	return bad
}

// TestStreamsListedAcrossTheClusterParkedFirst: any silo's admin API
// lists the streams active on every silo, each with the silo it is active
// on and its subscriptions, the stream with a parked subscription first
// and the parked subscription first within it, with its reason; the
// query narrows the list to parked streams, to a prefix, or to a limit,
// and counts every stream that matches. A silo's own list and the
// cluster report's summary tell the same.
func TestStreamsListedAcrossTheClusterParkedFirst(t *testing.T) {
	t.Parallel()
	log := newStreamLog()
	c := newTestClusterWith(t, nodeOptions{streams: log}, "a", "b")
	bad := parkOnB(t, c, log)
	memberA, memberB := c.node("a").sl.Info().Member, c.node("b").sl.Info().Member
	ctx := testCtx(t)
	api := adminClient(t, c.node("a").srv.Addr())

	r, err := api.Streams(ctx, adminapi.StreamsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Asked != memberA || r.Total != 2 || len(r.Streams) != 2 || len(r.Unreachable) != 0 {
		t.Fatalf("streams report %+v; want a's, listing 2 of 2 streams, every silo answering", r)
	}
	onB, onA := r.Streams[0], r.Streams[1]
	if onB.Stream != "default/jobs/on-b" || onB.Silo != memberB || onB.Type != "probe.Tick" || !strings.HasSuffix(onB.Last, ".2") ||
		onB.Parked != 1 || onB.Lag != 0 || onB.SubscriptionCount != 2 || len(onB.Subscriptions) != 2 {
		t.Errorf("first stream %+v; want default/jobs/on-b, on %s, of probe.Tick, 2 events, 1 of 2 subscriptions parked", onB, memberB)
	}
	if s := onB.Subscriptions[0]; s.ID != bad || s.Grain != "probe.Listener/bad-b" || s.Handler != "on-tick" || !s.Parked ||
		!strings.Contains(s.ParkedReason, "bad-b refuses tick 0") || s.ParkedAt == nil || s.ParkedAt.IsZero() || s.Handled != "" {
		t.Errorf("on-b's first subscription %+v; want bad-b's (%s), parked because it refused tick 0, nothing handled", s, bad)
	}
	if s := onB.Subscriptions[1]; s.Grain != "probe.Listener/good-b" || s.Parked || s.ParkedReason != "" || s.ParkedAt != nil || s.Lag != 0 || !strings.HasSuffix(s.Handled, ".2") {
		t.Errorf("on-b's second subscription %+v; want good-b's, delivering, the second event handled", s)
	}
	if onA.Stream != "default/jobs/on-a" || onA.Silo != memberA || onA.Parked != 0 || len(onA.Subscriptions) != 1 || onA.Subscriptions[0].Grain != "probe.Listener/good-a" {
		t.Errorf("second stream %+v; want default/jobs/on-a, on %s, with good-a's subscription", onA, memberA)
	}

	for _, tc := range []struct {
		q       adminapi.StreamsQuery
		total   int
		streams []string
	}{
		{adminapi.StreamsQuery{Parked: true}, 1, []string{"default/jobs/on-b"}},
		{adminapi.StreamsQuery{Prefix: "default/jobs/on-a"}, 1, []string{"default/jobs/on-a"}},
		{adminapi.StreamsQuery{Prefix: "default/other/"}, 0, nil},
		{adminapi.StreamsQuery{Limit: 1}, 2, []string{"default/jobs/on-b"}},
	} {
		r, err := api.Streams(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range r.Streams {
			got = append(got, s.Stream)
		}
		if r.Total != tc.total || fmt.Sprint(got) != fmt.Sprint(tc.streams) || r.Streams == nil {
			t.Errorf("streams %+v: total %d, listed %v; want %d and %v", tc.q, r.Total, got, tc.total, tc.streams)
		}
	}

	own, err := adminClient(t, c.node("b").srv.Addr()).SiloStreams(ctx, adminapi.StreamsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if own.Asked != memberB || own.Total != 1 || len(own.Streams) != 1 || own.Streams[0].Stream != "default/jobs/on-b" {
		t.Errorf("b's own streams %+v; want on-b alone", own)
	}

	cr, err := api.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := cr.Streams
	if sum == nil || sum.Active != 2 || sum.Subscriptions != 3 || sum.Parked != 1 || sum.Published != 4 || sum.Retried != 1 ||
		len(sum.Top) != 2 || sum.Top[0].Stream != "default/jobs/on-b" || sum.Top[0].Subscriptions[0].ID != bad {
		t.Errorf("the cluster report's streams %+v; want 2 active, 3 subscriptions, 1 parked, 4 published, 1 retry, on-b first", sum)
	}
	for _, s := range cr.Silos {
		if s.Streams == nil || s.Streams.Active != 1 {
			t.Errorf("silo %s reports streams %+v; want one active", s.Name, s.Streams)
		}
	}
}

// TestUnparkThroughAnotherSilo: an admin's unpark request to any silo
// unparks the subscription of a stream active on another: the list shows
// it delivering, and its subscriber hears the next event.
func TestUnparkThroughAnotherSilo(t *testing.T) {
	t.Parallel()
	log := newStreamLog()
	c := newTestClusterWith(t, nodeOptions{streams: log}, "a", "b")
	bad := parkOnB(t, c, log)
	log.fail("bad-b", false)
	ctx := testCtx(t)
	api := adminClient(t, c.node("a").srv.Addr())

	u, err := api.Unpark(ctx, "default/jobs/on-b", bad)
	if err != nil {
		t.Fatal(err)
	}
	want := adminapi.Unparked{Stream: "default/jobs/on-b", Subscription: bad, Grain: "probe.Listener/bad-b", Handler: "on-tick"}
	if u != want {
		t.Errorf("Unpark answered %+v; want %+v", u, want)
	}
	r, err := api.Streams(ctx, adminapi.StreamsQuery{Parked: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 0 || len(r.Streams) != 0 {
		t.Errorf("parked streams after the unpark: %+v; want none", r)
	}
	publish(t, c.node("b").sl, "on-b", 1)
	testwait.For(t, testTimeout, "bad-b to hear the event published after the unpark", func() bool { return log.count("bad-b") == 1 })
}

// TestUnparkRefusals: unpark is an admin action: refused without a token,
// and off without admin credentials configured. An admin's request for a
// malformed stream, without a subscription, for an unknown provider or
// subscription, by GET, or to a silo without streams is refused with the
// status and code that fit.
func TestUnparkRefusals(t *testing.T) {
	t.Parallel()
	srv, sl := startStreamsAlone(t, admin.Config{Tokens: testTokens(t)}, newStreamLog())
	addr := srv.Addr()
	subscribe(t, sl, "x", "j1")
	ok := query("stream", "default/jobs/j1", "subscription", "nope")

	do(t, http.MethodPost, addr, adminapi.PathUnpark, ok).wantError(t, http.StatusUnauthorized, codes.Unauthenticated)
	for _, tc := range []struct {
		method string
		q      []string
		status int
		code   codes.Code
		says   string
	}{
		{http.MethodPost, []string{"stream", "default/jobs"}, http.StatusBadRequest, codes.InvalidArgument, "not provider/namespace/key"},
		{http.MethodPost, []string{"stream", "default/jobs/j1"}, http.StatusBadRequest, codes.InvalidArgument, "missing query parameter subscription=ID"},
		{http.MethodPost, []string{"subscription", "s"}, http.StatusBadRequest, codes.InvalidArgument, "missing query parameter stream="},
		{http.MethodPost, []string{"stream", "other/jobs/j1", "subscription", "s"}, http.StatusNotFound, codes.NotFound, `no stream provider "other"`},
		{http.MethodPost, []string{"stream", "default/jobs/j1", "subscription", "nope"}, http.StatusNotFound, codes.NotFound, `"nope"`},
		{http.MethodGet, []string{"stream", "default/jobs/j1", "subscription", "nope"}, http.StatusMethodNotAllowed, codes.Unimplemented, "use POST"},
	} {
		doAuth(t, tc.method, addr, adminapi.PathUnpark, query(tc.q...), adminToken).wantError(t, tc.status, tc.code, tc.says)
	}

	open, _ := startStreamsAlone(t, admin.Config{}, newStreamLog())
	do(t, http.MethodPost, open.Addr(), adminapi.PathUnpark, ok).wantError(t, http.StatusForbidden, codes.PermissionDenied, "admin.token_file")

	plain := listen(t, admin.Config{Tokens: testTokens(t)})
	psl := newSilo(t, "plain", plain.Addr(), nil)
	plain.Attach(psl, nil)
	if err := psl.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	doAuth(t, http.MethodPost, plain.Addr(), adminapi.PathUnpark, ok, adminToken).
		wantError(t, http.StatusPreconditionFailed, codes.FailedPrecondition, "runs no streams")
	api := adminClient(t, plain.Addr())
	if r, err := api.Streams(testCtx(t), adminapi.StreamsQuery{}); err != nil || r.Total != 0 || r.Streams == nil || len(r.Streams) != 0 {
		t.Errorf("the streams of a silo without streams: %+v, %v; want an empty list", r, err)
	}
	if r, err := api.Silo(testCtx(t)); err != nil || r.Streams != nil {
		t.Errorf("the report of a silo without streams has streams %+v (%v); want none", r.Streams, err)
	}
}

// TestStreamsQueryRefusals: a stream list's query with a limit out of
// range or not a number, a parked that is not a boolean, or a parameter
// given twice is refused with 400, on both the cluster's and the silo's
// list.
func TestStreamsQueryRefusals(t *testing.T) {
	t.Parallel()
	srv, _ := startStreamsAlone(t, admin.Config{}, newStreamLog())
	for _, path := range []string{adminapi.PathStreams, adminapi.PathSiloStreams} {
		for _, tc := range []struct {
			q    []string
			says string
		}{
			{[]string{"limit", "0"}, "limit=\"0\": want a number from 1 to 10000"},
			{[]string{"limit", "10001"}, "from 1 to 10000"},
			{[]string{"limit", "ten"}, "from 1 to 10000"},
			{[]string{"parked", "maybe"}, "want true or false"},
			{[]string{"prefix", "a", "prefix", "b"}, "prefix given 2 times"},
		} {
			do(t, http.MethodGet, srv.Addr(), path, query(tc.q...)).wantError(t, http.StatusBadRequest, codes.InvalidArgument, tc.says)
		}
		do(t, http.MethodPost, srv.Addr(), path, nil).wantError(t, http.StatusMethodNotAllowed, codes.Unimplemented)
	}
}

// TestSiloReportSumsUpStreams: a silo's report sums up its streams: the
// counts, the events published, delivered and dropped per second over the
// last sampling interval, and the stream with its first subscriptions of
// many, the count telling how many there are.
func TestSiloReportSumsUpStreams(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Now())
	const interval = 2 * time.Second
	log := newStreamLog()
	srv, sl := startStreamsAlone(t, admin.Config{Clock: clock, SampleInterval: interval}, log)
	const subscribers, events = admin.SummarySubscriptionLimit + 2, 6
	for i := range subscribers {
		subscribe(t, sl, fmt.Sprintf("l%d", i), "busy")
	}
	publish(t, sl, "busy", events)
	// The stream counts a delivery once its subscriber answered, after
	// the handler ran.
	testwait.For(t, testTimeout, "every event to be delivered to every subscriber", func() bool {
		st, _ := sl.StreamStats()
		return log.total() == subscribers*events && st.Delivered == subscribers*events
	})
	if err := clock.BlockUntilContext(testCtx(t), 1); err != nil { // the sampler's ticker
		t.Fatal(err)
	}
	clock.Advance(interval)

	var r adminapi.SiloReport
	testwait.For(t, testTimeout, "the sampler to measure the streams", func() bool {
		r, _ = client(t, srv.Addr()).Silo(testCtx(t))
		return r.Streams != nil && r.Streams.PublishRate > 0
	})
	s := r.Streams
	if s.Active != 1 || s.Subscriptions != subscribers || s.Parked != 0 || s.Lag != 0 || s.Published != events || s.Delivered != subscribers*events || s.Dropped != 0 {
		t.Errorf("summary %+v; want 1 stream, %d subscriptions, none parked or waiting, %d published, %d delivered", s, subscribers, events, subscribers*events)
	}
	if s.PublishRate != events/2 || s.DeliveryRate != subscribers*events/2 || s.DropRate != 0 {
		t.Errorf("rates: %v published, %v delivered, %v dropped a second; want %d, %d and 0 over the %v interval",
			s.PublishRate, s.DeliveryRate, s.DropRate, events/2, subscribers*events/2, interval)
	}
	if len(s.Top) != 1 || s.Top[0].Stream != "default/jobs/busy" || s.Top[0].Silo != "alone" ||
		s.Top[0].SubscriptionCount != subscribers || len(s.Top[0].Subscriptions) != admin.SummarySubscriptionLimit {
		t.Errorf("top %+v; want default/jobs/busy on alone, listing %d of its %d subscriptions", s.Top, admin.SummarySubscriptionLimit, subscribers)
	}
}
