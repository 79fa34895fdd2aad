package silo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/client"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/testwait"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/internal/local"
)

// streamRecord is what the listener grains of one test heard, by grain
// key, kept outside the activations so that it outlives them.
type streamRecord struct {
	mu    sync.Mutex
	heard map[string][]*probe.Heard
	fail  map[string]int64         // events each grain's handler still fails
	hold  map[string]chan struct{} // a handler waits for its grain's channel to close
	seen  chan string              // each event handled, by grain key, when not nil
}

func newStreamRecord() *streamRecord {
	return &streamRecord{heard: map[string][]*probe.Heard{}, fail: map[string]int64{}, hold: map[string]chan struct{}{}}
}

func (r *streamRecord) of(key string) []*probe.Heard {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.heard[key])
}

// listener is the Listener grain: its handler records into rec.
type listener struct {
	probe.UnimplementedListenerGrain
	rec *streamRecord
}

var recordTicks = streams.NewHandler("record", func(l *listener, ctx grain.Context, ev streams.Event[*probe.Tick]) error {
	key := ctx.ID().Key
	l.rec.mu.Lock()
	hold := l.rec.hold[key]
	l.rec.mu.Unlock()
	if hold != nil {
		ctx.Blocking(func() { <-hold })
	}
	l.rec.mu.Lock()
	defer l.rec.mu.Unlock()
	if l.rec.fail[key] > 0 {
		l.rec.fail[key]--
		return status.Errorf(codes.Aborted, "listener %s fails tick %d", key, ev.Message.N)
	}
	l.rec.heard[key] = append(l.rec.heard[key], &probe.Heard{
		Stream: ev.Stream.String(), Subscription: ev.Subscription,
		Epoch: ev.Token.Epoch, Sequence: ev.Token.Sequence,
		N: ev.Message.N, From: ev.Message.From, Activation: ctx.ActivationID(),
	})
	if l.rec.seen != nil {
		l.rec.seen <- key
	}
	return nil
})

func ticks(c grain.Caller, op *probe.ListenOp) streams.Stream[*probe.Tick] {
	return streams.Get[*probe.Tick](c, op.Provider, op.Namespace, op.Key)
}

func (l *listener) Subscribe(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	var opts []streams.SubscribeOption
	if op.FromSequence != 0 {
		opts = append(opts, streams.FromToken(streams.Token{Sequence: op.FromSequence}))
	}
	if op.FromUnixNanos != 0 {
		opts = append(opts, streams.FromTime(time.Unix(0, op.FromUnixNanos)))
	}
	sub, err := ticks(ctx.Caller(), op).Subscribe(ctx, recordTicks, opts...)
	if err != nil {
		return nil, err
	}
	return &probe.ListenReply{Subscription: sub.ID}, nil
}

func (l *listener) Unsubscribe(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	ok, err := ticks(ctx.Caller(), op).Unsubscribe(ctx, op.Subscription)
	return &probe.ListenReply{Existed: ok}, err
}

func (l *listener) Subscriptions(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	subs, err := ticks(ctx.Caller(), op).Subscriptions(ctx)
	if err != nil {
		return nil, err
	}
	out := &probe.ListenReply{}
	for _, s := range subs {
		out.Subscriptions = append(out.Subscriptions, fmt.Sprintf("%s parked=%v implicit=%v", s.ID, s.Parked, s.Implicit))
	}
	return out, nil
}

func (l *listener) Heard(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	l.rec.mu.Lock()
	defer l.rec.mu.Unlock()
	if op.Fail > 0 {
		l.rec.fail[ctx.ID().Key] = op.Fail
	}
	return &probe.ListenReply{Heard: slices.Clone(l.rec.heard[ctx.ID().Key])}, nil
}

func (l *listener) Publish(ctx grain.Context, op *probe.ListenOp) (*probe.ListenReply, error) {
	s := ticks(ctx.Caller(), op)
	for n := op.First; n < op.First+op.Count; n++ {
		if _, err := s.Publish(ctx, &probe.Tick{N: n, From: ctx.ID().Key}); err != nil {
			return nil, err
		}
	}
	return &probe.ListenReply{}, nil
}

// streamSilo starts a silo alone with the memory stream provider
// "default" and the Listener type, whose grains also subscribe
// implicitly to the namespace "implicit".
func streamSilo(t *testing.T, rec *streamRecord, pc StreamProviderConfig, tweaks ...func(*Config)) *Silo {
	t.Helper()
	cfg := DefaultConfig()
	for _, tw := range tweaks {
		tw(&cfg)
	}
	cfg.Name = "streams"
	cfg.Streams = &StreamsConfig{
		Providers: map[string]StreamProviderConfig{"default": pc},
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.RegisterListenerGrain(s, func(grain.ID) probe.ListenerGrain { return &listener{rec: rec} },
		streams.WithHandlers(recordTicks), streams.Implicit("implicit", recordTicks)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return s
}

func op(ns, key string) *probe.ListenOp {
	return &probe.ListenOp{Provider: "default", Namespace: ns, Key: key}
}

// waitHeard waits until grain key of rec heard n events.
func waitHeard(t *testing.T, rec *streamRecord, key string, n int) []*probe.Heard {
	t.Helper()
	testwait.For(t, defaultTestTimeout, fmt.Sprintf("%s to hear %d events", key, n), func() bool { return len(rec.of(key)) >= n })
	return rec.of(key)
}

// TestStreamDeliversEveryEventToEverySubscriberInOrder: four publishers
// publish concurrently to one stream with three subscribers; every
// subscriber hears every event once, in the order of the tokens, which
// number the events 1, 2, 3, ..., and each publisher's events in the
// order it published them.
func TestStreamDeliversEveryEventToEverySubscriberInOrder(t *testing.T) {
	rec := newStreamRecord()
	s := streamSilo(t, rec, StreamProviderConfig{Buffer: 100000})
	ctx := testCtx(t)
	subs := []string{"a", "b", "c"}
	for _, k := range subs {
		if _, err := probe.NewListenerRef(s, k).Subscribe(ctx, op("orders", "s1")); err != nil {
			t.Fatal(err)
		}
	}
	const publishers, each = 4, 2000
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := ticks(s, op("orders", "s1"))
			for n := range int64(each) {
				if _, err := st.Publish(ctx, &probe.Tick{N: n, From: fmt.Sprint(p)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var first []*probe.Heard
	for _, k := range subs {
		heard := waitHeard(t, rec, k, publishers*each)
		if len(heard) != publishers*each {
			t.Fatalf("%s heard %d events, want %d", k, len(heard), publishers*each)
		}
		next := map[string]int64{}
		for i, h := range heard {
			if h.Sequence != uint64(i+1) || h.Epoch != heard[0].Epoch {
				t.Fatalf("%s: event %d has token %d.%d, want %d.%d", k, i, h.Epoch, h.Sequence, heard[0].Epoch, i+1)
			}
			if h.N != next[h.From] {
				t.Fatalf("%s: publisher %s's event %d came where its %d was due", k, h.From, h.N, next[h.From])
			}
			next[h.From]++
			if first != nil && (first[i].From != h.From || first[i].N != h.N) {
				t.Fatalf("%s heard event %d as %s/%d, a heard it as %s/%d", k, i+1, h.From, h.N, first[i].From, first[i].N)
			}
		}
		if first == nil {
			first = heard
		}
	}
}

// TestImplicitSubscriptionActivatesTheGrainWithTheStreamsKey: a type that
// subscribes implicitly to a namespace gets each stream's events in the
// grain with the stream's key, activated for them, with no Subscribe
// call; other grains of the type get nothing.
func TestImplicitSubscriptionActivatesTheGrainWithTheStreamsKey(t *testing.T) {
	rec := newStreamRecord()
	s := streamSilo(t, rec, StreamProviderConfig{})
	ctx := testCtx(t)
	for n := range int64(3) {
		if _, err := ticks(s, op("implicit", "k1")).Publish(ctx, &probe.Tick{N: n}); err != nil {
			t.Fatal(err)
		}
	}
	heard := waitHeard(t, rec, "k1", 3)
	for i, h := range heard {
		if h.N != int64(i) || h.Stream != "default/implicit/k1" {
			t.Fatalf("k1 heard %v as event %d", h, i)
		}
	}
	if !s.TestHooks().Holds(grain.ID{Type: probe.Listener_ServiceDesc.Type, Key: "k1"}) {
		t.Fatal("the implicit subscriber is not active after its events")
	}
	if len(rec.of("k2")) != 0 {
		t.Fatalf("k2 heard events of k1's stream: %v", rec.of("k2"))
	}
	subs, err := ticks(s, op("implicit", "k1")).AllSubscriptions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || !subs[0].Implicit || subs[0].Grain.Key != "k1" || subs[0].Handled.Sequence != 3 {
		t.Fatalf("the stream lists %+v, want k1's implicit subscription, having handled event 3", subs)
	}
}

// TestSubscriptionOutlivesTheSubscribersDeactivation: a subscription is
// the stream's, not the activation's: after the subscriber is
// deactivated, the next event activates it again and reaches it.
func TestSubscriptionOutlivesTheSubscribersDeactivation(t *testing.T) {
	rec := newStreamRecord()
	s := streamSilo(t, rec, StreamProviderConfig{})
	ctx := testCtx(t)
	l := probe.NewListenerRef(s, "d")
	if _, err := l.Subscribe(ctx, op("news", "n1")); err != nil {
		t.Fatal(err)
	}
	pub := ticks(s, op("news", "n1"))
	if _, err := pub.Publish(ctx, &probe.Tick{N: 1}); err != nil {
		t.Fatal(err)
	}
	before := waitHeard(t, rec, "d", 1)[0].Activation
	if ok, err := s.Deactivate(ctx, l.ID()); err != nil || !ok {
		t.Fatalf("Deactivate: %v, %v", ok, err)
	}
	if _, err := pub.Publish(ctx, &probe.Tick{N: 2}); err != nil {
		t.Fatal(err)
	}
	after := waitHeard(t, rec, "d", 2)[1]
	if after.N != 2 || after.Activation == before {
		t.Fatalf("after the deactivation the subscriber heard %v in activation %d (before: %d)", after, after.Activation, before)
	}
}

// TestFailingSubscriberIsRetriedThenParkedAndUnparked: a handler that
// fails gets the event again after a back-off, and the events after it
// wait; past the retries the subscription is parked, listed as such, and
// gets nothing published meanwhile, while another subscriber gets
// everything; unparked, it gets the events published after.
func TestFailingSubscriberIsRetriedThenParkedAndUnparked(t *testing.T) {
	rec := newStreamRecord()
	s := streamSilo(t, rec, StreamProviderConfig{Retries: 2, RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	ctx := testCtx(t)
	good, bad := probe.NewListenerRef(s, "good"), probe.NewListenerRef(s, "bad")
	o := op("jobs", "j1")
	for _, l := range []probe.ListenerRef{good, bad} {
		if _, err := l.Subscribe(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pub := ticks(s, o)
	// Two failures, then success: retried in order, not parked.
	if _, err := bad.Heard(ctx, &probe.ListenOp{Fail: 2}); err != nil {
		t.Fatal(err)
	}
	for n := range int64(3) {
		if _, err := pub.Publish(ctx, &probe.Tick{N: n}); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range waitHeard(t, rec, "bad", 3) {
		if h.N != int64(i) {
			t.Fatalf("after retries bad heard %d as its event %d", h.N, i)
		}
	}
	// Failing past the retries parks it.
	if _, err := bad.Heard(ctx, &probe.ListenOp{Fail: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, &probe.Tick{N: 3}); err != nil {
		t.Fatal(err)
	}
	var parked streams.Subscription
	testwait.For(t, defaultTestTimeout, "bad's subscription to be parked", func() bool {
		subs, err := pub.AllSubscriptions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range subs {
			if sub.Grain == bad.ID() && sub.Parked {
				parked = sub
				return true
			}
		}
		return false
	})
	if parked.ParkedReason == "" {
		t.Fatal("a parked subscription without a reason")
	}
	if _, err := pub.Publish(ctx, &probe.Tick{N: 4}); err != nil {
		t.Fatal(err)
	}
	waitHeard(t, rec, "good", 5)
	// Unparked, it hears what is published from then on.
	rec.mu.Lock()
	rec.fail["bad"] = 0
	rec.mu.Unlock()
	sub, err := pub.Unpark(ctx, bad.ID(), parked.ID)
	if err != nil || sub.Parked {
		t.Fatalf("Unpark: %+v, %v", sub, err)
	}
	if _, err := pub.Publish(ctx, &probe.Tick{N: 5}); err != nil {
		t.Fatal(err)
	}
	heard := waitHeard(t, rec, "bad", 4)
	if got := heard[3].N; got != 5 || len(heard) != 4 {
		t.Fatalf("unparked, bad heard %d (of %d events), want 5: nothing published while it was parked", got, len(heard))
	}
}

// TestSlowSubscriberHoldsUpOnlyItsOwnBuffer: while one subscriber's
// handler is stuck, publishing goes on and the other subscriber hears
// everything; the stuck one's buffer keeps the first events up to its
// bound, drops the rest, and delivers what it kept, in order, once
// unstuck.
func TestSlowSubscriberHoldsUpOnlyItsOwnBuffer(t *testing.T) {
	rec := newStreamRecord()
	const buffer = 8
	s := streamSilo(t, rec, StreamProviderConfig{Buffer: buffer, Batch: 1})
	ctx := testCtx(t)
	o := op("feed", "f1")
	for _, k := range []string{"fast", "slow"} {
		if _, err := probe.NewListenerRef(s, k).Subscribe(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	stuck := make(chan struct{})
	unstick := sync.OnceFunc(func() { close(stuck) })
	t.Cleanup(unstick) // before the silo's Stop, which waits for the handler
	rec.mu.Lock()
	rec.hold["slow"] = stuck
	rec.mu.Unlock()
	pub := ticks(s, o)
	// Each event waits for the fast subscriber, so that only the slow
	// one's buffer fills.
	const events = 100
	for n := range int64(events) {
		if _, err := pub.Publish(ctx, &probe.Tick{N: n}); err != nil {
			t.Fatal(err)
		}
		waitHeard(t, rec, "fast", int(n)+1)
	}
	// The buffer kept the events as they came, up to its bound (the one
	// in the stuck handler included), and dropped the rest; the drops are
	// counted, and the fast subscriber lost none.
	if got := s.streams.Stats().Dropped; got != events-buffer {
		t.Fatalf("%d events dropped, want %d: the slow subscriber's beyond its buffer of %d", got, events-buffer, buffer)
	}
	lags := map[string]int{}
	for _, st := range s.streams.Active() {
		for _, sub := range st.Subscriptions {
			lags[sub.Grain] = sub.Lag
		}
	}
	if lags["probe.Listener/slow"] != buffer || lags["probe.Listener/fast"] != 0 {
		t.Fatalf("the subscriptions' lags are %v, want slow's buffer full (%d) and fast's empty", lags, buffer)
	}
	unstick()
	heard := waitHeard(t, rec, "slow", buffer)
	for i, h := range heard {
		if h.N != int64(i) {
			t.Fatalf("slow heard %d as its event %d", h.N, i)
		}
	}
}

// TestStreamRefusesAnotherMessageType: a stream carries the type of its
// first event or subscription; an event or handler of another type is
// refused with InvalidArgument, and a handler the subscriber's type does
// not register with FailedPrecondition.
func TestStreamRefusesAnotherMessageType(t *testing.T) {
	rec := newStreamRecord()
	s := streamSilo(t, rec, StreamProviderConfig{})
	ctx := testCtx(t)
	if _, err := ticks(s, op("typed", "t1")).Publish(ctx, &probe.Tick{N: 1}); err != nil {
		t.Fatal(err)
	}
	other := streams.Get[*probe.Heard](s, "default", "typed", "t1")
	if _, err := other.Publish(ctx, &probe.Heard{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("publishing another type: %v, want InvalidArgument", err)
	}
	if _, err := streams.Get[*probe.Tick](s, "nope", "typed", "t1").Publish(ctx, &probe.Tick{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("publishing to an unknown provider: %v, want InvalidArgument", err)
	}
	if _, err := streams.Get[*probe.Tick](s, "default", "a/b", "t1").Publish(ctx, &probe.Tick{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("publishing to a namespace with '/': %v, want InvalidArgument", err)
	}
}

// TestClientsMayPublishButNotSubscribeOrDeliver: through a gateway a
// client publishes to a stream, and its events reach the subscribers; but
// it may neither call the stream grain's other methods, which act for
// grains, nor the runtime's delivery method, which would hand a grain
// events no stream published.
func TestClientsMayPublishButNotSubscribeOrDeliver(t *testing.T) {
	rec := newStreamRecord()
	s := streamSilo(t, rec, StreamProviderConfig{}, func(cfg *Config) {
		g := DefaultGatewayConfig()
		g.Listen = "127.0.0.1:0"
		cfg.Gateway = &g
	})
	ctx := testCtx(t)
	if _, err := probe.NewListenerRef(s, "sub").Subscribe(ctx, op("client", "c1")); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.WithGateways(s.GatewayAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := ticks(c, op("client", "c1")).Publish(ctx, &probe.Tick{N: 7, From: "client"}); err != nil {
		t.Fatalf("a client's Publish: %v", err)
	}
	if h := waitHeard(t, rec, "sub", 1)[0]; h.N != 7 || h.From != "client" {
		t.Fatalf("the subscriber heard %v", h)
	}
	ref := granaryv1.NewStreamRef(c, "default/client/c1")
	if _, err := ref.Subscribe(ctx, &granaryv1.StreamSubscribe{Grain: "probe.Listener/victim", Handler: "record", Type: "probe.Tick"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a client's Subscribe for a grain: %v, want PermissionDenied", err)
	}
	if _, err := ref.Subscriptions(ctx, &granaryv1.StreamSubscriptionsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a client's Subscriptions: %v, want PermissionDenied", err)
	}
	forged := &granaryv1.StreamDelivery{Provider: "default", Namespace: "client", Key: "c1", Subscription: "forged",
		Handler: "record", Type: "probe.Tick", Events: []*granaryv1.StreamEvent{{Token: &granaryv1.StreamToken{Sequence: 99}}}}
	victim := grain.ID{Type: probe.Listener_ServiceDesc.Type, Key: "sub"}
	if _, err := c.Invoke(ctx, victim, &local.StreamDeliverMethod, forged); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a client's delivery to a grain: %v, want PermissionDenied", err)
	}
	if heard := rec.of("sub"); len(heard) != 1 {
		t.Fatalf("the subscriber heard %d events, want the one published", len(heard))
	}
}

// TestStreamsConfigErrorsNameTheField: a bad stream setting stops New
// with a ConfigError that names it.
func TestStreamsConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		field string
		sc    StreamsConfig
		tweak func(*Config)
	}{
		{"Streams.Providers", StreamsConfig{}, nil},
		{`Streams.Providers["a/b"]`, StreamsConfig{Providers: map[string]StreamProviderConfig{"a/b": {}}}, nil},
		{`Streams.Providers["p"].Buffer`, StreamsConfig{Providers: map[string]StreamProviderConfig{"p": {Buffer: -1}}}, nil},
		{`Streams.Providers["p"].RetryMin`, StreamsConfig{Providers: map[string]StreamProviderConfig{"p": {RetryMin: time.Second, RetryMax: time.Millisecond}}}, nil},
		{"Streams.Storage", StreamsConfig{Providers: map[string]StreamProviderConfig{"p": {}}, Storage: "missing"}, nil},
		{"Streams.Storage", StreamsConfig{Providers: map[string]StreamProviderConfig{"p": {}}}, func(c *Config) {
			cc := DefaultClusterConfig()
			cc.Membership.ClusterID = "c"
			c.Cluster = &cc
		}},
	} {
		cfg := DefaultConfig()
		cfg.Name = "bad"
		cfg.Streams = &tc.sc
		if tc.tweak != nil {
			tc.tweak(&cfg)
		}
		_, err := New(cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: %v, want a ConfigError naming %s", tc.sc, err, tc.field)
		}
	}
}
