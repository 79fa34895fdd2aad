package silo_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo"
)

// introspectTimeout bounds every wait of these tests: a test that needs
// it has failed.
const introspectTimeout = 10 * time.Second

// tickLog is what the tick listeners of one test did, by grain key, kept
// outside the activations.
type tickLog struct {
	mu      sync.Mutex
	heard   map[string][]int64
	failing map[string]bool          // the grain's handler fails every event
	hold    map[string]chan struct{} // the grain's handler waits for it to close
	held    chan string              // told each time a handler starts to wait
}

func newTickLog() *tickLog {
	return &tickLog{heard: map[string][]int64{}, failing: map[string]bool{}, hold: map[string]chan struct{}{}, held: make(chan string, 16)}
}

func (l *tickLog) setFailing(key string, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing[key] = on
}

func (l *tickLog) of(key string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.heard[key]...)
}

// tickListener is the probe Listener grain, which subscribes onTick.
type tickListener struct {
	probe.UnimplementedListenerGrain
	log *tickLog
}

var onTick = streams.NewHandler("on-tick", func(l *tickListener, ctx grain.Context, ev streams.Event[*probe.Tick]) error {
	key := ctx.ID().Key
	l.log.mu.Lock()
	hold := l.log.hold[key]
	l.log.mu.Unlock()
	if hold != nil {
		l.log.held <- key
		ctx.Blocking(func() { <-hold })
	}
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	if l.log.failing[key] {
		return status.Errorf(codes.Aborted, "listener %s refuses tick %d", key, ev.Message.N)
	}
	l.log.heard[key] = append(l.log.heard[key], ev.Message.N)
	return nil
})

func (l *tickListener) Subscribe(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	sub, err := streams.Get[*probe.Tick](ctx.Caller(), op.Provider, op.Namespace, op.Key).Subscribe(ctx, onTick)
	if err != nil {
		return nil, err
	}
	return &probe.ListenReply{Subscription: sub.ID}, nil
}

// tickSilo starts a silo alone with the memory stream provider "default",
// which parks a subscription after one retry, and the Listener type.
// Stopped when the test ends.
func tickSilo(t *testing.T, log *tickLog) *silo.Silo {
	t.Helper()
	cfg := silo.DefaultConfig()
	cfg.Name = "streams-introspect"
	cfg.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{
		"default": {Retries: 1, RetryMin: time.Millisecond, RetryMax: time.Millisecond},
	}}
	s, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = probe.RegisterListenerGrain(s, func(grain.ID) probe.ListenerGrain { return &tickListener{log: log} }, streams.WithHandlers(onTick))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.Context(t, introspectTimeout)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

// subscribeTicks subscribes listener key to stream default/ns/k and
// returns the subscription's ID.
func subscribeTicks(t *testing.T, s *silo.Silo, key, ns, k string) string {
	t.Helper()
	r, err := probe.NewListenerRef(s, key).Subscribe(testwait.Context(t, introspectTimeout), &probe.ListenOp{Provider: "default", Namespace: ns, Key: k})
	if err != nil {
		t.Fatal(err)
	}
	return r.Subscription
}

// publishTicks publishes ticks first to first+n-1 to default/ns/k.
func publishTicks(t *testing.T, s *silo.Silo, ns, k string, first, n int64) {
	t.Helper()
	ctx := testwait.Context(t, introspectTimeout)
	st := streams.Get[*probe.Tick](s, "default", ns, k)
	for i := first; i < first+n; i++ {
		if _, err := st.Publish(ctx, &probe.Tick{N: i}); err != nil {
			t.Fatal(err)
		}
	}
}

// streamOf returns the status of stream name among s's active streams.
func streamOf(s *silo.Silo, name string) (silo.StreamStatus, bool) {
	for _, st := range s.Streams() {
		if st.ID.String() == name {
			return st, true
		}
	}
	return silo.StreamStatus{}, false
}

// subscriptionOf returns the subscription of st whose subscriber is g.
func subscriptionOf(st silo.StreamStatus, g string) silo.SubscriptionStatus {
	for _, sub := range st.Subscriptions {
		if sub.Grain == g {
			return sub
		}
	}
	return silo.SubscriptionStatus{}
}

// waitParked waits until the subscription of grain g to stream name is
// parked on s, and returns the stream's status then.
func waitParked(t *testing.T, s *silo.Silo, name, g string) silo.StreamStatus {
	t.Helper()
	var st silo.StreamStatus
	testwait.For(t, introspectTimeout, g+"'s subscription to "+name+" to be parked", func() bool {
		var ok bool
		st, ok = streamOf(s, name)
		return ok && subscriptionOf(st, g).Parked
	})
	return st
}

// TestStreamsListsSubscriptionsWithHandledTokensAndParkedOnes: a silo's
// Streams lists the stream active on it with its type and last token, a
// subscriber that handled every event with its token and no lag, and one
// whose handler failed past the retries as parked, with the failure as
// the reason; StreamStats counts the publish, the delivery, the retry, the
// parking and the event it dropped.
func TestStreamsListsSubscriptionsWithHandledTokensAndParkedOnes(t *testing.T) {
	log := newTickLog()
	s := tickSilo(t, log)
	good := subscribeTicks(t, s, "good", "jobs", "j1")
	bad := subscribeTicks(t, s, "bad", "jobs", "j1")
	log.setFailing("bad", true)
	before := time.Now()
	publishTicks(t, s, "jobs", "j1", 7, 1)
	st := waitParked(t, s, "default/jobs/j1", "probe.Listener/bad")
	// The stream takes an event as handled once the subscriber answered.
	testwait.For(t, introspectTimeout, "good's subscription to have handled the tick", func() bool {
		st, _ = streamOf(s, "default/jobs/j1")
		return !subscriptionOf(st, "probe.Listener/good").Handled.IsZero()
	})
	if got := log.of("good"); len(got) != 1 || got[0] != 7 {
		t.Errorf("good heard %v; want [7]", got)
	}
	if st.Type != "probe.Tick" || st.Last.Sequence != 1 || st.Last.Epoch == 0 {
		t.Errorf("stream type %q, last token %v; want probe.Tick and the first event's", st.Type, st.Last)
	}
	if len(st.Subscriptions) != 2 || st.Parked() != 1 || st.Lag() != 0 {
		t.Fatalf("%d subscriptions, %d parked, lag %d; want 2, 1 and 0 (a parked memory subscription keeps nothing)", len(st.Subscriptions), st.Parked(), st.Lag())
	}
	g := subscriptionOf(st, "probe.Listener/good")
	if g.ID != good || g.Handler != "on-tick" || g.Implicit || g.Parked || g.Lag != 0 || g.Handled != st.Last {
		t.Errorf("good's subscription %+v; want %s through on-tick, not parked, no lag, the last event handled", g, good)
	}
	b := subscriptionOf(st, "probe.Listener/bad")
	if b.ID != bad || !b.Parked || !strings.Contains(b.ParkedReason, "listener bad refuses tick 7") || b.ParkedAt.Before(before.Add(-time.Second)) || !b.Handled.IsZero() {
		t.Errorf("bad's subscription %+v; want %s parked since the publish because its handler refused tick 7, nothing handled", b, bad)
	}

	stats, ok := s.StreamStats()
	// The parked subscriber's event is dropped with its parking.
	want := silo.StreamStats{Published: 1, Delivered: 1, Dropped: 1, Retried: 1, Parked: 1}
	if !ok || stats != want {
		t.Errorf("StreamStats %+v, %v; want %+v, true", stats, ok, want)
	}
}

// TestStreamsCountsEventsWaitingForASlowSubscriber: while a subscriber's
// handler is held on its first event, the events published after wait
// for it, and its lag counts them all, the one in flight included.
func TestStreamsCountsEventsWaitingForASlowSubscriber(t *testing.T) {
	log := newTickLog()
	s := tickSilo(t, log)
	subscribeTicks(t, s, "slow", "feed", "f1")
	release := make(chan struct{})
	unhold := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unhold) // before the silo's Stop, which waits for the handler
	log.mu.Lock()
	log.hold["slow"] = release
	log.mu.Unlock()

	publishTicks(t, s, "feed", "f1", 0, 1)
	testwait.Recv(t, log.held, introspectTimeout, "the slow handler to take its first tick")
	publishTicks(t, s, "feed", "f1", 1, 2)
	st, ok := streamOf(s, "default/feed/f1")
	if !ok {
		t.Fatal("default/feed/f1 is not listed as active")
	}
	if sub := subscriptionOf(st, "probe.Listener/slow"); sub.Lag != 3 || st.Lag() != 3 {
		t.Errorf("slow's lag %d (stream's %d) with its handler held on the first of 3 ticks; want 3", sub.Lag, st.Lag())
	}

	log.mu.Lock()
	delete(log.hold, "slow")
	log.mu.Unlock()
	unhold()
	testwait.For(t, introspectTimeout, "slow to hear every tick and its lag to fall to 0", func() bool {
		st, _ := streamOf(s, "default/feed/f1")
		return len(log.of("slow")) == 3 && st.Lag() == 0
	})
}

// TestUnparkStreamResumesDeliveryToAParkedSubscription: UnparkStream,
// given the stream's name and the subscription's ID alone, unparks it
// through the stream grain: the subscription is listed as delivering
// again, the unparking is counted, and the subscriber hears the events
// published after, not those published while it was parked.
func TestUnparkStreamResumesDeliveryToAParkedSubscription(t *testing.T) {
	log := newTickLog()
	s := tickSilo(t, log)
	id := subscribeTicks(t, s, "bad", "jobs", "j2")
	log.setFailing("bad", true)
	publishTicks(t, s, "jobs", "j2", 0, 1)
	waitParked(t, s, "default/jobs/j2", "probe.Listener/bad")
	publishTicks(t, s, "jobs", "j2", 1, 1) // dropped: parked

	log.setFailing("bad", false)
	ctx := testwait.Context(t, introspectTimeout)
	sub, err := s.UnparkStream(ctx, "default/jobs/j2", id)
	if err != nil {
		t.Fatal(err)
	}
	if sub.ID != id || sub.Grain != "probe.Listener/bad" || sub.Handler != "on-tick" || sub.Parked || sub.ParkedReason != "" {
		t.Errorf("UnparkStream answered %+v; want %s of probe.Listener/bad through on-tick, not parked", sub, id)
	}
	st, _ := streamOf(s, "default/jobs/j2")
	if st.Parked() != 0 {
		t.Errorf("after UnparkStream, Streams lists %d parked subscriptions of default/jobs/j2; want 0", st.Parked())
	}
	if stats, _ := s.StreamStats(); stats.Unparked != 1 || stats.Parked != 1 {
		t.Errorf("StreamStats %+v; want one parked and one unparked", stats)
	}
	// Unparking again changes nothing.
	if _, err := s.UnparkStream(ctx, "default/jobs/j2", id); err != nil {
		t.Fatalf("unparking a subscription that is not parked: %v", err)
	}
	if stats, _ := s.StreamStats(); stats.Unparked != 1 {
		t.Errorf("a second UnparkStream counted another unparking: %+v", stats)
	}
	publishTicks(t, s, "jobs", "j2", 2, 1)
	testwait.For(t, introspectTimeout, "bad to hear the tick published after the unparking", func() bool { return len(log.of("bad")) == 1 })
	if got := log.of("bad"); got[0] != 2 {
		t.Errorf("unparked, bad heard %v; want [2]: tick 1 came while it was parked", got)
	}
}

// TestUnparkStreamRefusesWhatItCannotUnpark: a malformed stream name, an
// unknown provider, an empty or unknown subscription, a silo that has not
// started and one without streams are each refused with their own code;
// a silo without streams lists none and has no counters.
func TestUnparkStreamRefusesWhatItCannotUnpark(t *testing.T) {
	s := tickSilo(t, newTickLog())
	subscribeTicks(t, s, "a", "jobs", "j3")
	ctx := testwait.Context(t, introspectTimeout)
	tests := []struct {
		stream, sub string
		code        codes.Code
		says        string
	}{
		{"default/jobs", "x", codes.InvalidArgument, "not provider/namespace/key"},
		{"other/jobs/j3", "x", codes.NotFound, `no stream provider "other"`},
		{"default/jobs/j3", "", codes.InvalidArgument, "empty subscription"},
		{"default/jobs/j3", "no-such-subscription", codes.NotFound, "no-such-subscription"},
	}
	for _, tc := range tests {
		_, err := s.UnparkStream(ctx, tc.stream, tc.sub)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("UnparkStream(%q, %q): %v; want %v saying %q", tc.stream, tc.sub, err, tc.code, tc.says)
		}
	}

	cfg := silo.DefaultConfig()
	cfg.Name = "no-streams"
	plain, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.UnparkStream(ctx, "default/jobs/j3", "x"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("UnparkStream on a silo without streams: %v; want FailedPrecondition", err)
	}
	if st, ok := plain.StreamStats(); ok || st != (silo.StreamStats{}) || plain.Streams() != nil {
		t.Errorf("a silo without streams has stream stats %+v (ok %v) and streams %v; want none", st, ok, plain.Streams())
	}

	cfg.Name = "not-started"
	cfg.Streams = &silo.StreamsConfig{Providers: map[string]silo.StreamProviderConfig{"default": {}}}
	idle, err := silo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := idle.UnparkStream(ctx, "default/jobs/j3", "x"); status.Code(err) != codes.Unavailable {
		t.Errorf("UnparkStream before Start: %v; want Unavailable", err)
	}
	if st, ok := idle.StreamStats(); !ok || st != (silo.StreamStats{}) || len(idle.Streams()) != 0 {
		t.Errorf("a silo with streams before Start has stream stats %+v (ok %v) and streams %v; want zero counters and none active", st, ok, idle.Streams())
	}
}
