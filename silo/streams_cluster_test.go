package silo

import (
	"testing"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"github.com/granaryio/granary/silo/storage"
)

// streamCluster starts silos a, b and c sharing one memory store, with the
// memory stream provider "default", the durable provider "logged" (whose
// log is that store), and the Listener type on each.
func streamCluster(t *testing.T, rec *streamRecord) *testCluster {
	t.Helper()
	store := storage.NewMemory(0)
	return newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{
		tweak: func(cfg *Config) {
			memoryStore(store)(cfg)
			cfg.Streams = &StreamsConfig{Providers: map[string]StreamProviderConfig{
				"default": {},
				"logged":  {Kind: "durable", Partitions: 4, SweepInterval: 20 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond},
			}}
		},
		register: func(s *Silo, _ string) {
			if err := probe.RegisterListenerGrain(s, func(grain.ID) probe.ListenerGrain { return &listener{rec: rec} },
				streams.WithHandlers(recordTicks)); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// streamHost returns the silo holding stream id's activation.
func streamHost(t *testing.T, tc *testCluster, id streams.ID) *Silo {
	t.Helper()
	gid := grain.ID{Type: streams.GrainType, Key: id.String()}
	for _, s := range tc.live() {
		if s.TestHooks().Holds(gid) {
			return s
		}
	}
	t.Fatalf("no silo holds stream %s", id)
	return nil
}

func otherThan(tc *testCluster, s *Silo) *Silo {
	for _, o := range tc.live() {
		if o != s {
			return o
		}
	}
	return nil
}

// TestStreamSubscriptionOutlivesTheStreamsSilo: a subscription is kept
// in the stream's state, so when the silo holding the stream dies, the
// stream's next activation, on another silo, delivers to the subscriber
// as before, across silos.
func TestStreamSubscriptionOutlivesTheStreamsSilo(t *testing.T) {
	rec := newStreamRecord()
	tc := streamCluster(t, rec)
	o := op("rooms", "r1")
	ctx := testCtx(t)
	if _, err := probe.NewListenerRef(tc.silo("b"), "member").Subscribe(ctx, o); err != nil {
		t.Fatal(err)
	}
	host := streamHost(t, tc, streams.ID{Provider: o.Provider, Namespace: o.Namespace, Key: o.Key})
	publishMemory(t, otherThan(tc, host), o, 0, 9)
	waitHeard(t, rec, "member", 10)
	tc.kill(host.cfg.Name)
	tc.waitConverged()
	via := tc.live()[0]
	testwait.For(t, defaultTestTimeout, "a publish after the stream's silo died", func() bool {
		_, err := ticks(via, o).Publish(ctx, &probe.Tick{N: 10})
		return err == nil
	})
	heard := waitHeard(t, rec, "member", 11)
	if last := heard[len(heard)-1]; last.N != 10 || last.Epoch <= heard[0].Epoch {
		t.Fatalf("after the stream's silo died the member heard %v, want tick 10 from a newer epoch than %d", last, heard[0].Epoch)
	}
}

func publishMemory(t *testing.T, via grain.Caller, o *probe.ListenOp, first, last int64) {
	t.Helper()
	for n := first; n <= last; n++ {
		if _, err := ticks(via, o).Publish(testCtx(t), &probe.Tick{N: n}); err != nil {
			t.Fatalf("publishing tick %d: %v", n, err)
		}
	}
}

// TestDurableStreamDeliversEveryAcknowledgedEventWhenItsSiloDies: events
// of a durable stream whose publish returned all reach the subscriber,
// in order and at least once, although the silo holding the stream dies
// midway; publishing goes on through another silo.
func TestDurableStreamDeliversEveryAcknowledgedEventWhenItsSiloDies(t *testing.T) {
	rec := newStreamRecord()
	tc := streamCluster(t, rec)
	o := &probe.ListenOp{Provider: "logged", Namespace: "ledger", Key: "l1"}
	ctx := testCtx(t)
	if _, err := probe.NewListenerRef(tc.silo("a"), "auditor").Subscribe(ctx, o); err != nil {
		t.Fatal(err)
	}
	host := streamHost(t, tc, streams.ID{Provider: o.Provider, Namespace: o.Namespace, Key: o.Key})
	via := otherThan(tc, host)
	publishTicks(t, via, o, 0, 99)
	tc.kill(host.cfg.Name)
	tc.waitConverged()
	for n := int64(100); n < 200; n++ {
		testwait.For(t, defaultTestTimeout, "a publish to succeed", func() bool {
			_, err := ticks(via, o).Publish(ctx, &probe.Tick{N: n})
			return err == nil
		})
	}
	var heard []*probe.Heard
	testwait.For(t, defaultTestTimeout, "the auditor to hear tick 199", func() bool {
		heard = rec.of("auditor")
		return len(heard) > 0 && heard[len(heard)-1].N == 199
	})
	seen := map[int64]bool{}
	for i, h := range heard {
		seen[h.N] = true
		if i > 0 && h.N > heard[i-1].N+1 {
			t.Fatalf("the auditor heard tick %d right after %d: a gap", h.N, heard[i-1].N)
		}
	}
	for n := range int64(200) {
		if !seen[n] {
			t.Fatalf("acknowledged tick %d never reached the auditor", n)
		}
	}
}
