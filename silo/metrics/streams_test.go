package metrics

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tickListener is the probe Listener grain: its handler fails the ticks
// of grains whose key starts with "bad", and holds those of grains whose
// key starts with "slow" until release is closed.
type tickListener struct {
	probe.UnimplementedListenerGrain
	release <-chan struct{}
	held    chan<- string
}

var onTick = streams.NewHandler("on-tick", func(l *tickListener, ctx grain.Context, ev streams.Event[*probe.Tick]) error {
	key := ctx.ID().Key
	switch {
	case strings.HasPrefix(key, "bad"):
		return status.Errorf(codes.Aborted, "%s refuses tick %d", key, ev.Message.N)
	case strings.HasPrefix(key, "slow"):
		l.held <- key
		ctx.Blocking(func() { <-l.release })
	}
	return nil
})

func (l *tickListener) Subscribe(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	sub, err := streams.Get[*probe.Tick](ctx.Caller(), op.Provider, op.Namespace, op.Key).Subscribe(ctx, onTick)
	if err != nil {
		return nil, err
	}
	return &probe.ListenReply{Subscription: sub.ID}, nil
}

// TestStreamFamiliesFollowTheSilosStreams: a silo with streams exports
// its streams' counters and gauges at each scrape: a parked subscriber
// counts as parked, a held one's waiting events as its lag, the only
// lag series, labelled with its stream, subscription and grain. A silo
// without streams exports no stream family.
func TestStreamFamiliesFollowTheSilosStreams(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := newSilo(t, m, nil, func(c *silo.Config) {
		c.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{
			"default": {Retries: 1, RetryMin: time.Millisecond, RetryMax: time.Millisecond},
		}}
	})
	release := make(chan struct{})
	held := make(chan string, 4)
	unhold := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unhold) // before the silo's Stop, which waits for the handler
	err = probe.RegisterListenerGrain(s, func(grain.ID) probe.ListenerGrain { return &tickListener{release: release, held: held} }, streams.WithHandlers(onTick))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Attach(s); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, reg, "granary_streams_active"); n != 1 {
		t.Fatalf("granary_streams_active: %d metrics before any stream, want 1 (of 0 streams)", n)
	}

	o := &probe.ListenOp{Provider: "default", Namespace: "jobs", Key: "j1"}
	var slowSub string
	for _, key := range []string{"good", "bad", "slow"} {
		r, err := probe.NewListenerRef(s, key).Subscribe(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if key == "slow" {
			slowSub = r.Subscription
		}
	}
	pub := streams.Get[*probe.Tick](s, "default", "jobs", "j1")
	if _, err := pub.Publish(ctx, &probe.Tick{N: 1}); err != nil {
		t.Fatal(err)
	}
	testwait.Recv(t, held, defaultTestTimeout, "slow's handler to take the first tick")
	if _, err := pub.Publish(ctx, &probe.Tick{N: 2}); err != nil {
		t.Fatal(err)
	}
	// bad is parked after its retry, with the first tick; the second is
	// dropped for it: it was parked, or came while the first failed.
	testwait.For(t, defaultTestTimeout, "bad's subscription to be parked", func() bool {
		st, _ := s.StreamStats()
		return st.Parked == 1
	})
	want := `
# HELP granary_streams_active Streams active on this silo: activations of their stream grains.
# TYPE granary_streams_active gauge
granary_streams_active 1
# HELP granary_stream_subscriptions Subscriptions of the streams active on this silo, explicit and implicit.
# TYPE granary_stream_subscriptions gauge
granary_stream_subscriptions 3
# HELP granary_stream_subscriptions_parked Subscriptions of the streams active on this silo that are parked: delivery to them failed past the provider's retries and stopped until they are unparked.
# TYPE granary_stream_subscriptions_parked gauge
granary_stream_subscriptions_parked 1
# HELP granary_stream_pending_events Events waiting for the subscribers of the streams active on this silo, summed over the subscriptions.
# TYPE granary_stream_pending_events gauge
granary_stream_pending_events 2
# HELP granary_stream_subscription_lag Events waiting for one subscription, BOUNDED: only the subscriptions with the most events waiting on this silo (Config.StreamLagSeries of them, default 20), and none with nothing waiting; granary_stream_pending_events is the total.
# TYPE granary_stream_subscription_lag gauge
granary_stream_subscription_lag{grain="probe.Listener/slow",stream="default/jobs/j1",subscription="` + slowSub + `"} 2
# HELP granary_stream_events_published_total Events published to the streams active on this silo.
# TYPE granary_stream_events_published_total counter
granary_stream_events_published_total 2
# HELP granary_stream_events_delivered_total Events subscribers handled, counted once per subscriber.
# TYPE granary_stream_events_delivered_total counter
granary_stream_events_delivered_total 2
# HELP granary_stream_events_dropped_total Events not delivered to a subscriber, counted once per subscriber: its buffer was full, it was parked, or its stream deactivated first.
# TYPE granary_stream_events_dropped_total counter
granary_stream_events_dropped_total 2
# HELP granary_stream_deliveries_retried_total Deliveries to subscribers tried again after a failure.
# TYPE granary_stream_deliveries_retried_total counter
granary_stream_deliveries_retried_total 1
# HELP granary_stream_subscriptions_parked_total Subscriptions parked because delivery to them failed past the provider's retries.
# TYPE granary_stream_subscriptions_parked_total counter
granary_stream_subscriptions_parked_total 1
# HELP granary_stream_subscriptions_unparked_total Parked subscriptions unparked.
# TYPE granary_stream_subscriptions_unparked_total counter
granary_stream_subscriptions_unparked_total 0
`
	names := []string{"granary_streams_active", "granary_stream_subscriptions", "granary_stream_subscriptions_parked", "granary_stream_pending_events",
		"granary_stream_subscription_lag", "granary_stream_events_published_total", "granary_stream_events_delivered_total", "granary_stream_events_dropped_total",
		"granary_stream_deliveries_retried_total", "granary_stream_subscriptions_parked_total", "granary_stream_subscriptions_unparked_total"}
	// good handles both ticks on its own time: wait for its deliveries.
	testwait.For(t, defaultTestTimeout, "the good subscriber to handle both ticks", func() bool {
		return testutil.GatherAndCompare(reg, strings.NewReader(want), names...) == nil
	})
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}

	// Released, slow catches up: its series goes, and nothing waits.
	unhold()
	testwait.For(t, defaultTestTimeout, "slow to catch up", func() bool {
		return count(t, reg, "granary_stream_subscription_lag") == 0 && gaugeValue(t, reg, "granary_stream_pending_events") == 0
	})

	// A silo without streams has no stream family.
	plainReg := prometheus.NewRegistry()
	pm, err := New(Config{Registerer: plainReg})
	if err != nil {
		t.Fatal(err)
	}
	plain := startSilo(t, pm, nil, nil)
	if err := pm.Attach(plain); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if n := count(t, plainReg, name); n != 0 {
			t.Errorf("a silo without streams exports %d metrics of %s", n, name)
		}
	}
}

// gaugeValue returns the value of reg's one gauge of family name.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single metric of %s", name)
	return 0
}

// TestStreamLagSeriesAreBoundedToTheMostBehind: of many subscriptions,
// granary_stream_subscription_lag reports the n with the most events
// waiting, ties broken by stream and subscription so that a scrape picks
// the same series as the last, and none with nothing waiting; the
// pending and parked gauges count every subscription.
func TestStreamLagSeriesAreBoundedToTheMostBehind(t *testing.T) {
	sub := func(id string, lag int, parked bool) silo.SubscriptionStatus {
		return silo.SubscriptionStatus{ID: id, Grain: "chat.Member/" + id, Lag: lag, Parked: parked}
	}
	active := []silo.StreamStatus{
		{ID: streams.ID{Provider: "default", Namespace: "chat", Key: "a"}, Subscriptions: []silo.SubscriptionStatus{sub("s1", 5, false), sub("s2", 0, true), sub("s3", 9, false)}},
		{ID: streams.ID{Provider: "default", Namespace: "chat", Key: "b"}, Subscriptions: []silo.SubscriptionStatus{sub("s4", 5, false), sub("s5", 1, false)}},
		{ID: streams.ID{Provider: "default", Namespace: "chat", Key: "c"}},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(funcCollector{streamDescs, func(e emit) { collectStreams(e, silo.StreamStats{Published: 4}, active, 3) }})
	const want = `
# HELP granary_streams_active Streams active on this silo: activations of their stream grains.
# TYPE granary_streams_active gauge
granary_streams_active 3
# HELP granary_stream_subscriptions Subscriptions of the streams active on this silo, explicit and implicit.
# TYPE granary_stream_subscriptions gauge
granary_stream_subscriptions 5
# HELP granary_stream_subscriptions_parked Subscriptions of the streams active on this silo that are parked: delivery to them failed past the provider's retries and stopped until they are unparked.
# TYPE granary_stream_subscriptions_parked gauge
granary_stream_subscriptions_parked 1
# HELP granary_stream_pending_events Events waiting for the subscribers of the streams active on this silo, summed over the subscriptions.
# TYPE granary_stream_pending_events gauge
granary_stream_pending_events 20
# HELP granary_stream_subscription_lag Events waiting for one subscription, BOUNDED: only the subscriptions with the most events waiting on this silo (Config.StreamLagSeries of them, default 20), and none with nothing waiting; granary_stream_pending_events is the total.
# TYPE granary_stream_subscription_lag gauge
granary_stream_subscription_lag{grain="chat.Member/s3",stream="default/chat/a",subscription="s3"} 9
granary_stream_subscription_lag{grain="chat.Member/s1",stream="default/chat/a",subscription="s1"} 5
granary_stream_subscription_lag{grain="chat.Member/s4",stream="default/chat/b",subscription="s4"} 5
# HELP granary_stream_events_published_total Events published to the streams active on this silo.
# TYPE granary_stream_events_published_total counter
granary_stream_events_published_total 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "granary_streams_active", "granary_stream_subscriptions", "granary_stream_subscriptions_parked",
		"granary_stream_pending_events", "granary_stream_subscription_lag", "granary_stream_events_published_total"); err != nil {
		t.Fatal(err)
	}
	// One series at most: the one most behind.
	reg = prometheus.NewRegistry()
	reg.MustRegister(funcCollector{streamDescs, func(e emit) { collectStreams(e, silo.StreamStats{}, active, 1) }})
	if n := count(t, reg, "granary_stream_subscription_lag"); n != 1 {
		t.Errorf("%d lag series with a bound of 1", n)
	}
}
