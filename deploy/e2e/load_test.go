package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

var errUnavailable = errors.New("unavailable: the silo is gone")

// fakeCluster is a model of the Counter grains under test: every call
// advances the fake clock by step, and the cluster misbehaves as told.
type fakeCluster struct {
	clock *clockwork.FakeClock
	step  time.Duration

	mu     sync.Mutex
	counts map[string]int64
	calls  int
	faults
	stop context.CancelFunc // cancels the load at call stopAt
}

// faults say how a fakeCluster misbehaves, by call number.
type faults struct {
	// failEvery fails every nth call without counting it; failCounted
	// fails it after counting it (the reply lost on its way back).
	failEvery, failCounted int
	// forgetAt forgets every count at call n, as a store that lost its
	// writes would.
	forgetAt int
	// doubleAt counts call n's Add twice.
	doubleAt int
	// stopAt cancels the load's context at call n.
	stopAt int
}

func (f *fakeCluster) add(ctx context.Context, key string, delta int64) (addReply, error) {
	f.clock.Advance(f.step)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return addReply{}, err
	}
	f.calls++
	n := f.calls
	if n == f.stopAt && f.stop != nil {
		f.stop()
	}
	if f.forgetAt > 0 && n == f.forgetAt {
		clear(f.counts)
	}
	if f.failEvery > 0 && n%f.failEvery == 0 {
		return addReply{}, errUnavailable
	}
	f.counts[key] += delta
	if n == f.doubleAt {
		f.counts[key] += delta
	}
	if f.failCounted > 0 && n%f.failCounted == 0 {
		return addReply{}, errUnavailable
	}
	return addReply{Value: f.counts[key], Silo: "a-1", Activation: 1}, nil
}

// runLoad runs a generator against f until f's stopAt call, then reads
// the counters back.
func runLoad(t *testing.T, f *fakeCluster, cfg loadConfig) (*generator, finalCheck) {
	t.Helper()
	f.counts = map[string]int64{}
	g, err := newGenerator(cfg, f.add, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.stop = cancel
	g.start(ctx)
	<-ctx.Done()
	g.stop()
	f.mu.Lock()
	f.faults = faults{}
	f.mu.Unlock()
	readCtx, cancelRead := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelRead()
	return g, g.readAll(readCtx, 3)
}

func TestGenerator(t *testing.T) {
	cfg := loadConfig{Workers: 4, Counters: 10, Prefix: "t", CallTimeout: time.Second, Backoff: 20 * time.Millisecond}
	tests := []struct {
		name      string
		faults    faults
		wantLost  bool // replies or the final read reveal lost Adds
		wantOver  bool
		wantFails bool
	}{
		{name: "healthy", faults: faults{stopAt: 400}},
		{name: "refusals", faults: faults{stopAt: 400, failEvery: 7}, wantFails: true},
		{name: "replies lost after the count", faults: faults{stopAt: 400, failCounted: 5}, wantFails: true},
		{name: "a store that forgets", faults: faults{stopAt: 400, forgetAt: 200}, wantLost: true},
		{name: "an Add counted twice", faults: faults{stopAt: 400, doubleAt: 3}, wantOver: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeCluster{clock: clockwork.NewFakeClockAt(t0), step: 30 * time.Millisecond, faults: tt.faults}
			g, final := runLoad(t, f, cfg)
			last := g.tl.index(f.clock.Now()) + 1
			w := g.tl.window(0, last)
			if w.Calls == 0 {
				t.Fatal("no call recorded")
			}
			if got := w.Failed > 0; got != tt.wantFails {
				t.Errorf("failed calls %d, want some: %v", w.Failed, tt.wantFails)
			}
			if got := w.Lost > 0 || final.LostCounters > 0; got != tt.wantLost {
				t.Errorf("lost: replies %d, final %+v; want lost: %v", w.Lost, final, tt.wantLost)
			}
			if got := w.Over > 0 || final.OverCounters > 0; got != tt.wantOver {
				t.Errorf("over: replies %d, final %+v; want over: %v", w.Over, final, tt.wantOver)
			}
			if final.Counters != cfg.Counters || len(final.Unread) != 0 {
				t.Errorf("final read %d of %d counters, unread %v", final.Counters, cfg.Counters, final.Unread)
			}
			if !tt.wantLost && !tt.wantOver && final.Final < final.Acked {
				t.Errorf("the counts sum to %d, below the %d Adds acknowledged", final.Final, final.Acked)
			}
			// The timeline and the ledger saw the same replies.
			if int64(w.Calls-w.Failed) != final.Acked {
				t.Errorf("the timeline has %d successful calls, the ledger %d acknowledged Adds", w.Calls-w.Failed, final.Acked)
			}
		})
	}
}

func TestGeneratorUnreadCounters(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	add := func(ctx context.Context, key string, delta int64) (addReply, error) {
		clock.Advance(time.Second)
		return addReply{}, errUnavailable
	}
	g, err := newGenerator(loadConfig{Workers: 1, Counters: 2, Prefix: "u"}, add, clock)
	if err != nil {
		t.Fatal(err)
	}
	// The backoff between attempts waits on the clock: advance it.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for clock.BlockUntilContext(ctx, 1) == nil {
			clock.Advance(time.Second)
		}
	})
	f := g.readAll(context.Background(), 2)
	cancel()
	wg.Wait()
	if f.Counters != 0 || len(f.Unread) != 2 || !strings.Contains(f.Unread[0], "unavailable") {
		t.Errorf("readAll against a dead cluster = %+v, want both counters unread with the error", f)
	}
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		cfg     loadConfig
		wantErr string
	}{
		{loadConfig{Prefix: "p"}, ""},
		{loadConfig{Prefix: "p", Workers: -1}, "workers -1"},
		{loadConfig{Prefix: "p", Counters: -3}, "counters -3"},
		{loadConfig{}, "prefix"},
		{loadConfig{Prefix: "p", CallTimeout: -time.Second}, "call timeout"},
	}
	for _, tt := range tests {
		cfg := tt.cfg
		cfg.setDefaults()
		err := cfg.validate()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("validate(%+v) = %v, want an error containing %q", tt.cfg, err, tt.wantErr)
		}
	}
	c := loadConfig{Prefix: "run", Counters: 3}
	if got := strings.Join(c.keys(), ","); got != "run-000,run-001,run-002" {
		t.Errorf("keys = %s", got)
	}
}
