package silo

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
)

// durableSilo starts a silo alone on the embedded store in dir, with the
// durable stream provider "default" and the Listener type. The test stops
// it, unless it closes it first.
func durableSilo(t *testing.T, rec *streamRecord, dir string, pc StreamProviderConfig, tweaks ...func(*Config)) *Silo {
	t.Helper()
	pc.Kind = "durable"
	if pc.SweepInterval == 0 {
		pc.SweepInterval = 10 * time.Millisecond
	}
	return streamSilo(t, rec, pc, append(tweaks, func(cfg *Config) { cfg.DataDir = dir })...)
}

// checkOnceInOrder checks that heard is ticks first..last, each once, in
// order, with tokens that grow.
func checkOnceInOrder(t *testing.T, who string, heard []*probe.Heard, first, last int64) {
	t.Helper()
	if len(heard) != int(last-first+1) {
		t.Fatalf("%s heard %d events, want ticks %d to %d", who, len(heard), first, last)
	}
	for i, h := range heard {
		if h.N != first+int64(i) || (i > 0 && h.Sequence <= heard[i-1].Sequence) {
			t.Fatalf("%s heard tick %d (token %d) as its event %d, want tick %d with a greater token", who, h.N, h.Sequence, i, first+int64(i))
		}
	}
}

func publishTicks(t *testing.T, s grain.Caller, o *probe.ListenOp, first, last int64) []streams.Token {
	t.Helper()
	ctx := testCtx(t)
	var toks []streams.Token
	for n := first; n <= last; n++ {
		tok, err := ticks(s, o).Publish(ctx, &probe.Tick{N: n})
		if err != nil {
			t.Fatalf("publishing tick %d: %v", n, err)
		}
		if tok.Epoch != 0 || tok.Sequence == 0 {
			t.Fatalf("a durable stream's token %v: want epoch 0 and a log offset", tok)
		}
		toks = append(toks, tok)
	}
	return toks
}

// TestDurableSubscriptionResumesFromItsCursorAfterARestart: a durable
// subscription's cursor is saved as its subscriber handles events, so
// after the silo restarts on its store the subscriber gets the events
// published since, and none it handled before.
func TestDurableSubscriptionResumesFromItsCursorAfterARestart(t *testing.T) {
	dir := t.TempDir()
	rec := newStreamRecord()
	o := op("orders", "d1")
	s1 := durableSilo(t, rec, dir, StreamProviderConfig{})
	if _, err := probe.NewListenerRef(s1, "r").Subscribe(testCtx(t), o); err != nil {
		t.Fatal(err)
	}
	publishTicks(t, s1, o, 0, 49)
	waitHeard(t, rec, "r", 50)
	if err := s1.Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	s2 := durableSilo(t, rec, dir, StreamProviderConfig{})
	publishTicks(t, s2, o, 50, 99)
	heard := waitHeard(t, rec, "r", 100)
	checkOnceInOrder(t, "r", heard, 0, 99)
}

// TestDurableStreamDeliversAcknowledgedEventsAfterItsActivationIsLost:
// events whose publish returned, held up by a stuck subscriber when the
// silo dies, reach the subscriber after the silo restarts, with nothing
// more published: the partition's sweeper activates the stream, which
// delivers from the subscription's cursor, in order. Events handled since
// the cursor was last saved may come again.
func TestDurableStreamDeliversAcknowledgedEventsAfterItsActivationIsLost(t *testing.T) {
	dir := t.TempDir()
	rec := newStreamRecord()
	o := op("orders", "d2")
	stuck := make(chan struct{})
	unstick := sync.OnceFunc(func() { close(stuck) })
	t.Cleanup(unstick)
	s1 := durableSilo(t, rec, dir, StreamProviderConfig{Batch: 1}, func(cfg *Config) { cfg.CloseTimeout = 50 * time.Millisecond })
	if _, err := probe.NewListenerRef(s1, "r").Subscribe(testCtx(t), o); err != nil {
		t.Fatal(err)
	}
	publishTicks(t, s1, o, 0, 4)
	waitHeard(t, rec, "r", 5)
	rec.mu.Lock()
	rec.hold["r"] = stuck
	rec.mu.Unlock()
	publishTicks(t, s1, o, 5, 19)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	delete(rec.hold, "r")
	rec.mu.Unlock()
	unstick()
	waitHeard(t, rec, "r", 6) // the abandoned handler records tick 5 and ends
	durableSilo(t, rec, dir, StreamProviderConfig{})
	var heard []*probe.Heard
	testwait.For(t, defaultTestTimeout, "r to hear every acknowledged tick", func() bool {
		heard = rec.of("r")
		return heard[len(heard)-1].N == 19
	})
	// Cursors are saved every so often, so the restart may deliver again
	// what was handled since the last save: any tick up to 6 first.
	after := heard[6:]
	first := after[0].N
	if first > 6 {
		t.Fatalf("after the restart r heard tick %d first: ticks were skipped", first)
	}
	checkOnceInOrder(t, "r after the restart", after, first, 19)
}

// TestDurableSubscriptionRewindsToATokenOrATime: a subscription to a
// durable stream may start at an earlier event, by its token or by time,
// and then gets every later event in order; the memory provider refuses a
// rewind.
func TestDurableSubscriptionRewindsToATokenOrATime(t *testing.T) {
	rec := newStreamRecord()
	s := durableSilo(t, rec, t.TempDir(), StreamProviderConfig{})
	o := op("history", "h1")
	toks := publishTicks(t, s, o, 0, 9)
	mid := time.Now()
	publishTicks(t, s, o, 10, 14)
	ctx := testCtx(t)
	byToken := &probe.ListenOp{Provider: o.Provider, Namespace: o.Namespace, Key: o.Key, FromSequence: toks[3].Sequence}
	if _, err := probe.NewListenerRef(s, "tok").Subscribe(ctx, byToken); err != nil {
		t.Fatal(err)
	}
	byTime := &probe.ListenOp{Provider: o.Provider, Namespace: o.Namespace, Key: o.Key, FromUnixNanos: mid.UnixNano()}
	if _, err := probe.NewListenerRef(s, "time").Subscribe(ctx, byTime); err != nil {
		t.Fatal(err)
	}
	publishTicks(t, s, o, 15, 16)
	checkOnceInOrder(t, "tok", waitHeard(t, rec, "tok", 14), 3, 16)
	checkOnceInOrder(t, "time", waitHeard(t, rec, "time", 7), 10, 16)

	mem := streamSilo(t, newStreamRecord(), StreamProviderConfig{})
	if _, err := probe.NewListenerRef(mem, "m").Subscribe(ctx, byToken); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a rewind on the memory provider: %v, want FailedPrecondition", err)
	}
}

// TestDurableSubscriberBehindItsBufferCatchesUpFromTheLog: a subscriber
// whose buffer overflows loses nothing on a durable stream: it reads what
// it missed from the log, in order, and then takes events from its buffer
// again.
func TestDurableSubscriberBehindItsBufferCatchesUpFromTheLog(t *testing.T) {
	rec := newStreamRecord()
	s := durableSilo(t, rec, t.TempDir(), StreamProviderConfig{Buffer: 4, Batch: 2})
	o := op("feed", "d3")
	ctx := testCtx(t)
	if _, err := probe.NewListenerRef(s, "slow").Subscribe(ctx, o); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan struct{})
	unstick := sync.OnceFunc(func() { close(stuck) })
	t.Cleanup(unstick)
	rec.mu.Lock()
	rec.hold["slow"] = stuck
	rec.mu.Unlock()
	publishTicks(t, s, o, 0, 49)
	rec.mu.Lock()
	delete(rec.hold, "slow")
	rec.mu.Unlock()
	unstick()
	checkOnceInOrder(t, "slow", waitHeard(t, rec, "slow", 50), 0, 49)
	publishTicks(t, s, o, 50, 59)
	checkOnceInOrder(t, "slow", waitHeard(t, rec, "slow", 60), 0, 59)
	if d := s.streams.Stats().Dropped; d != 0 {
		t.Fatalf("a durable stream dropped %d events", d)
	}
}

// TestParkedDurableSubscriptionResumesFromItsCursor: a durable
// subscription that was parked gets, once unparked, the events published
// while it was parked, from its cursor.
func TestParkedDurableSubscriptionResumesFromItsCursor(t *testing.T) {
	rec := newStreamRecord()
	s := durableSilo(t, rec, t.TempDir(), StreamProviderConfig{Retries: 1, RetryMin: time.Millisecond, RetryMax: time.Millisecond})
	o := op("jobs", "d4")
	ctx := testCtx(t)
	bad := probe.NewListenerRef(s, "bad")
	if _, err := bad.Subscribe(ctx, o); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Heard(ctx, &probe.ListenOp{Fail: 1000}); err != nil {
		t.Fatal(err)
	}
	publishTicks(t, s, o, 0, 0)
	pub := ticks(s, o)
	var parked streams.Subscription
	testwait.For(t, defaultTestTimeout, "the subscription to be parked", func() bool {
		subs, err := pub.AllSubscriptions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		parked = subs[0]
		return parked.Parked
	})
	publishTicks(t, s, o, 1, 9)
	rec.mu.Lock()
	rec.fail["bad"] = 0
	rec.mu.Unlock()
	if _, err := pub.Unpark(ctx, bad.ID(), parked.ID); err != nil {
		t.Fatal(err)
	}
	checkOnceInOrder(t, "bad", waitHeard(t, rec, "bad", 10), 0, 9)
}

// TestBatchPublishesArriveInOrderWithConsecutiveTokens: a batch is
// published together, in order, on memory and durable streams alike, and
// its events reach the subscriber in order between the events published
// before and after it.
func TestBatchPublishesArriveInOrderWithConsecutiveTokens(t *testing.T) {
	for _, kind := range []string{"memory", "durable"} {
		t.Run(kind, func(t *testing.T) {
			rec := newStreamRecord()
			var s *Silo
			if kind == "durable" {
				s = durableSilo(t, rec, t.TempDir(), StreamProviderConfig{})
			} else {
				s = streamSilo(t, rec, StreamProviderConfig{})
			}
			o := op("batches", "b1")
			ctx := testCtx(t)
			if _, err := probe.NewListenerRef(s, "r").Subscribe(ctx, o); err != nil {
				t.Fatal(err)
			}
			before, err := ticks(s, o).Publish(ctx, &probe.Tick{N: 0})
			if err != nil {
				t.Fatal(err)
			}
			batch := []*probe.Tick{{N: 1}, {N: 2}, {N: 3}}
			toks, err := ticks(s, o).PublishBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			for i, tok := range toks {
				if tok.Sequence != before.Sequence+uint64(i)+1 || tok.Epoch != before.Epoch {
					t.Fatalf("the batch's event %d has token %v after %v: want the next in order", i, tok, before)
				}
			}
			one, err := ticks(s, o).PublishBatch(ctx, []*probe.Tick{{N: 4}})
			if err != nil || len(one) != 1 || one[0].Sequence != toks[2].Sequence+1 {
				t.Fatalf("a batch of one: %v, %v; want the token after %v", one, err, toks[2])
			}
			if _, err := ticks(s, o).Publish(ctx, &probe.Tick{N: 5}); err != nil {
				t.Fatal(err)
			}
			checkOnceInOrder(t, "r", waitHeard(t, rec, "r", 6), 0, 5)
		})
	}
}

// TestDurableSubscriberSkipsEventsOfAnotherType: events published to a
// durable stream while it had no subscription to fix its type may be of
// another type than a later subscriber's; a subscription rewound over
// them skips them, and counts them as dropped, rather than handing its
// handler what it cannot decode.
func TestDurableSubscriberSkipsEventsOfAnotherType(t *testing.T) {
	rec := newStreamRecord()
	s := durableSilo(t, rec, t.TempDir(), StreamProviderConfig{})
	o := op("mixed", "m1")
	ctx := testCtx(t)
	other := streams.Get[*probe.Heard](s, o.Provider, o.Namespace, o.Key)
	first, err := other.Publish(ctx, &probe.Heard{N: 99})
	if err != nil {
		t.Fatal(err)
	}
	// A new activation of the stream forgets the type nobody stored.
	if ok, err := s.Deactivate(ctx, grain.ID{Type: streams.GrainType, Key: streams.ID{Provider: o.Provider, Namespace: o.Namespace, Key: o.Key}.String()}); err != nil || !ok {
		t.Fatalf("Deactivate the stream: %v, %v", ok, err)
	}
	rewound := &probe.ListenOp{Provider: o.Provider, Namespace: o.Namespace, Key: o.Key, FromSequence: first.Sequence}
	if _, err := probe.NewListenerRef(s, "r").Subscribe(ctx, rewound); err != nil {
		t.Fatal(err)
	}
	publishTicks(t, s, o, 0, 1)
	checkOnceInOrder(t, "r", waitHeard(t, rec, "r", 2), 0, 1)
	if d := s.streams.Stats().Dropped; d != 1 {
		t.Fatalf("%d events dropped, want the one of another type", d)
	}
}
