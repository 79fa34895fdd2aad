package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/granaryio/granary/internal/refusal"
	"github.com/jonboulle/clockwork"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPacer(t *testing.T) {
	p := newPacer(t0, 100, time.Second)
	if p.total != 100 {
		t.Fatalf("100 calls/s for 1s: total %d, want 100", p.total)
	}
	tests := []struct {
		at   time.Duration
		want int64
	}{
		{-time.Millisecond, 0},
		{0, 1}, // call 0 is due at the start
		{9 * time.Millisecond, 1},
		{10 * time.Millisecond, 2},
		{250 * time.Millisecond, 26},
		{990 * time.Millisecond, 100},
		{time.Second, 100}, // call 100 would be due at the end: not one of them
		{time.Hour, 100},
	}
	for _, tt := range tests {
		if got := p.dueBy(t0.Add(tt.at)); got != tt.want {
			t.Errorf("dueBy(start%+v) = %d, want %d", tt.at, got, tt.want)
		}
	}
	if got := p.at(50); !got.Equal(t0.Add(500 * time.Millisecond)) {
		t.Errorf("at(50) = start+%v, want start+500ms", got.Sub(t0))
	}
	// A rate that does not divide the span: 3.5 calls/s for 2s is 7 calls,
	// and one for 2.1s is 8 (call 7 is due at 2s).
	if got := newPacer(t0, 3.5, 2*time.Second).total; got != 7 {
		t.Errorf("3.5/s for 2s: total %d, want 7", got)
	}
	if got := newPacer(t0, 3.5, 2100*time.Millisecond).total; got != 8 {
		t.Errorf("3.5/s for 2.1s: total %d, want 8", got)
	}
}

func TestHotCall(t *testing.T) {
	for _, tt := range []struct {
		share float64
		want  int
	}{{0, 0}, {0.2, 200}, {0.25, 250}, {1.0 / 3, 333}, {1, 1000}} {
		n, lastHot := 0, int64(-1)
		maxGap := int64(0)
		for k := range int64(1000) {
			if hotCall(k, tt.share) {
				n++
				maxGap = max(maxGap, k-lastHot)
				lastHot = k
			}
		}
		if n != tt.want {
			t.Errorf("share %v: %d hot calls of 1000, want %d", tt.share, n, tt.want)
		}
		// Spread evenly: never more than 1/share apart.
		if tt.share > 0 && float64(maxGap) > 1/tt.share+1 {
			t.Errorf("share %v: hot calls %d apart", tt.share, maxGap)
		}
	}
	if !hotCall(4, 0.2) || hotCall(3, 0.2) {
		t.Error("share 0.2: want the fifth call (4) hot and the fourth not")
	}
}

func overloadedErr(t *testing.T, reason string) error {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "granary: silo x is overloaded").WithDetails(
		&errdetails.RetryInfo{}, &errdetails.ErrorInfo{Reason: reason, Domain: "granary.io"})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want outcome
	}{
		{"success", nil, outOK},
		{"shed", overloadedErr(t, refusal.Overloaded), outShed},
		{"shed, wrapped", fmt.Errorf("add: %w", overloadedErr(t, refusal.Overloaded)), outShed},
		{"a queue at its limit", status.Error(codes.ResourceExhausted, "queue of 100 requests is full"), outRefused},
		{"another ErrorInfo", overloadedErr(t, "QUOTA"), outRefused},
		{"the client's deadline", context.DeadlineExceeded, outDeadline},
		{"the client's deadline, wrapped", fmt.Errorf("call: %w", context.DeadlineExceeded), outDeadline},
		{"a deadline status", status.Error(codes.DeadlineExceeded, "timed out"), outDeadline},
		{"unavailable", status.Error(codes.Unavailable, "no gateway"), outUnavailable},
		{"another code", status.Error(codes.Internal, "boom"), outOther},
		{"not a status", errors.New("broken"), outOther},
		{"cancelled", context.Canceled, outOther},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("%s: classify(%v) = %s, want %s", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestStage(t *testing.T) {
	from := t0.Add(time.Second)
	st := newStage(from, from.Add(time.Second))
	// 100 successes ending inside the measured second, taking 1..100ms;
	// one before it, one at its end; refusals of both kinds and failures.
	for i := 1; i <= 100; i++ {
		st.record(from.Add(time.Duration(i)*time.Millisecond), time.Duration(i)*time.Millisecond, false, nil, verdict{})
	}
	st.record(t0, time.Millisecond, true, nil, verdict{lost: true})
	st.record(from.Add(time.Second), 2*time.Second, true, nil, verdict{over: true, duplicate: true})
	st.record(from, 0, true, overloadedErr(t, refusal.Overloaded), verdict{})
	st.record(from, 0, true, status.Error(codes.ResourceExhausted, "full"), verdict{})
	st.record(from, 0, false, status.Error(codes.ResourceExhausted, "full again"), verdict{})
	st.record(from, 0, false, context.DeadlineExceeded, verdict{})
	st.started(3 * time.Millisecond)
	s := st.stats()
	if s.Outcomes[outOK] != 102 || s.Outcomes[outShed] != 1 || s.Outcomes[outRefused] != 2 || s.Outcomes[outDeadline] != 1 {
		t.Errorf("outcomes %v", s.Outcomes)
	}
	if s.Calls() != 106 || s.Refused() != 3 || s.Failed() != 1 {
		t.Errorf("calls %d, refused %d, failed %d; want 106, 3, 1", s.Calls(), s.Refused(), s.Failed())
	}
	if s.Measured != 100 {
		t.Errorf("measured %d, want the 100 that ended in [from, to)", s.Measured)
	}
	if s.Lost != 1 || s.Over != 1 || s.Duplicates != 1 {
		t.Errorf("lost %d, over %d, duplicates %d; want 1 each", s.Lost, s.Over, s.Duplicates)
	}
	if s.Examples[outRefused] != "rpc error: code = ResourceExhausted desc = full" {
		t.Errorf("the queue refusal's example %q, want the first", s.Examples[outRefused])
	}
	// HDR keeps three significant figures: compare within 0.1%.
	near := func(got, want time.Duration) bool { return got >= want-want/1000 && got <= want+want/1000 }
	if !near(s.P50, 50*time.Millisecond) || !near(s.P99, 100*time.Millisecond) || !near(s.Max, 2*time.Second) {
		t.Errorf("p50 %v, p99 %v, max %v; want 50ms, 100ms (the 101st of 102), 2s", s.P50, s.P99, s.Max)
	}
	if s.HotOK != 2 || !near(s.HotP99, 2*time.Second) {
		t.Errorf("hot counter: %d served, p99 %v; want 2 and 2s", s.HotOK, s.HotP99)
	}
	if !near(s.LagMax, 3*time.Millisecond) {
		t.Errorf("lag max %v, want 3ms", s.LagMax)
	}
}

// loopCall is one call an open loop started: its number, when it was
// due and when it started.
type loopCall struct {
	k          int64
	due, began time.Time
}

func TestOpenLoopKeepsTheSchedule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clock := clockwork.NewFakeClockAt(t0)
	calls := make(chan loopCall, 200)
	o := &openLoop{clock: clock, tick: 10 * time.Millisecond, maxInFlight: 1000, call: func(k int64, due time.Time) {
		calls <- loopCall{k, due, clock.Now()}
	}}
	done := make(chan loopCounts, 1)
	go func() { done <- o.schedule(ctx, newPacer(t0, 100, time.Second)) }()
	if err := clock.BlockUntilContext(ctx, 1); err != nil { // the loop's ticker
		t.Fatal(err)
	}
	// A quarter second at once: the loop was late for 25 ticks, and starts
	// every call that fell due, 0 to 25, at its next.
	clock.Advance(250 * time.Millisecond)
	seen := map[int64]loopCall{}
	for range 26 {
		select {
		case c := <-calls:
			seen[c.k] = c
		case <-ctx.Done():
			t.Fatalf("only %d calls started after 250ms at 100/s, want 26", len(seen))
		}
	}
	clock.Advance(time.Second)
	var got loopCounts
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("the schedule did not end")
	}
	o.wait()
	close(calls)
	for c := range calls {
		seen[c.k] = c
	}
	if want := (loopCounts{Scheduled: 100, Sent: 100, MaxSeen: got.MaxSeen}); got != want || got.MaxSeen < 1 {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if len(seen) != 100 {
		t.Fatalf("%d distinct calls started, want 100", len(seen))
	}
	for k, c := range seen {
		if want := t0.Add(time.Duration(k) * 10 * time.Millisecond); !c.due.Equal(want) {
			t.Errorf("call %d due at start+%v, want start+%v", k, c.due.Sub(t0), want.Sub(t0))
		}
		if c.began.Before(c.due) {
			t.Errorf("call %d started %v early", k, c.due.Sub(c.began))
		}
	}
	for k := range int64(26) {
		if c := seen[k]; !c.began.Equal(t0.Add(250 * time.Millisecond)) {
			t.Errorf("call %d started at start+%v, want at the late tick, start+250ms", k, c.began.Sub(t0))
		}
	}
}

func TestOpenLoopBoundsCallsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clock := clockwork.NewFakeClockAt(t0)
	release := make(chan struct{})
	var mu sync.Mutex
	started := 0
	o := &openLoop{clock: clock, tick: 10 * time.Millisecond, maxInFlight: 10, call: func(int64, time.Time) {
		mu.Lock()
		started++
		mu.Unlock()
		<-release // the cluster holds every call
	}}
	done := make(chan loopCounts, 1)
	go func() { done <- o.schedule(ctx, newPacer(t0, 100, time.Second)) }()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	var got loopCounts
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("the schedule did not end while its calls hung: it must not wait for them")
	}
	close(release)
	o.wait()
	if want := (loopCounts{Scheduled: 100, Sent: 10, NotSent: 90, MaxSeen: 10}); got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if started != 10 {
		t.Errorf("%d calls ran, want the 10 sent", started)
	}
}

// soakCluster is a model of the Counter grains for the soak: every call
// advances the fake clock by step; the hot counter refuses every third
// call as a full queue would, and a shedding silo every seventh other.
type soakCluster struct {
	clock *clockwork.FakeClock
	step  time.Duration
	hot   string
	// forget makes the counters forget every Add after the nth: a store
	// that loses writes.
	forget int
	// serveAll turns the refusals off.
	serveAll bool

	mu     sync.Mutex
	counts map[string]int64
	calls  map[string]int
	n      int
	shed   error
}

func (f *soakCluster) add(ctx context.Context, key string, delta int64) (addReply, error) {
	f.clock.Advance(f.step)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.calls[key]++
	if delta != 0 && !f.serveAll {
		switch {
		case key == f.hot && f.calls[key]%3 == 0:
			return addReply{}, status.Error(codes.ResourceExhausted, "the hot counter's queue is full")
		case key != f.hot && f.n%7 == 0:
			return addReply{}, f.shed
		}
	}
	if delta != 0 {
		if f.forget == 0 || f.n <= f.forget {
			f.counts[key] += delta
		}
	}
	return addReply{Value: f.counts[key], Silo: "a-1", Activation: 1}, nil
}

func newTestSoak(t *testing.T, forget int, serveAll bool) (*soak, *soakCluster) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	cfg := overloadConfig{Prefix: "s", CallTimeout: time.Second, CapacityWorkers: 4, CapacityWarmup: time.Second, CapacityMeasure: time.Second}
	cfg.setDefaults()
	s := newSoak(cfg, nil, clock)
	f := &soakCluster{clock: clock, step: 10 * time.Millisecond, hot: s.hotKey(), forget: forget, serveAll: serveAll,
		counts: map[string]int64{}, calls: map[string]int{}, shed: overloadedErr(t, refusal.Overloaded)}
	s.add = f.add
	return s, f
}

func TestSoakCapacity(t *testing.T) {
	s, f := newTestSoak(t, 0, true)
	st := s.capacity(context.Background()).stats()
	// Each call moves the clock 10ms: about 100 calls end in the measured
	// second, give or take one per worker.
	if st.Measured < 100-4 || st.Measured > 100+4 {
		t.Errorf("measured %d calls in the measured second at 10ms a call, want 100±4", st.Measured)
	}
	if st.Failed() != 0 || st.Refused() != 0 {
		t.Errorf("outcomes %v: want every call served", st.Outcomes)
	}
	// The burst calls new keys only: the hot counter would measure itself.
	if n := f.calls[s.hotKey()]; n != 0 {
		t.Errorf("the burst called the hot counter %d times", n)
	}
	if len(f.calls) != int(st.Calls()) {
		t.Errorf("the burst called %d keys in %d calls, want a new key for each", len(f.calls), st.Calls())
	}
}

func TestSoakMixAndReadBack(t *testing.T) {
	for _, forget := range []int{0, 200} {
		t.Run(fmt.Sprintf("forget after %d", forget), func(t *testing.T) {
			s, f := newTestSoak(t, forget, false)
			st := newStage(t0, t0.Add(time.Hour))
			for range 500 {
				s.call(context.Background(), st, true)
			}
			got := st.stats()
			if got.Calls() != 500 || got.Outcomes[outShed] == 0 || got.Outcomes[outRefused] == 0 || got.Failed() != 0 {
				t.Errorf("outcomes %v: want 500 calls, shed and queue refusals among them, no failure", got.Outcomes)
			}
			hot := f.calls[s.hotKey()]
			if hot != 100 {
				t.Errorf("%d of 500 calls went to the hot counter, want a fifth", hot)
			}
			for key, n := range f.calls {
				if key != s.hotKey() && n != 1 {
					t.Errorf("new key %s was called %d times, want once", key, n)
				}
			}
			keys := s.ledger.acknowledged()
			hotOK := hot - hot/3 // the cluster refuses every third call to the hot counter
			if want := int(got.Outcomes[outOK]) - hotOK + 1; len(keys) != want {
				t.Errorf("%d keys acknowledged, want %d: every new key that succeeded and the hot one", len(keys), want)
			}
			counts, errs := readKeys(context.Background(), f.add, s.clock, keys, time.Second, 3, 2)
			final := s.ledger.finalOf(keys, counts, errs)
			if final.Counters != len(keys) || len(final.Unread) != 0 || final.Acked != got.Outcomes[outOK] {
				t.Errorf("final read %+v of %d keys, %d acknowledged", final, len(keys), got.Outcomes[outOK])
			}
			if lost := final.LostCounters > 0 && got.Lost > 0; lost != (forget > 0) {
				t.Errorf("final read %+v, %d replies lost: lost writes found: %v, want %v", final, got.Lost, lost, forget > 0)
			}
		})
	}
}

func TestReadKeysGivesUp(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { // the pause after each failure waits on the clock
		for clock.BlockUntilContext(ctx, 1) == nil {
			clock.Advance(time.Second)
		}
	})
	var mu sync.Mutex
	tries := map[string]int{}
	add := func(_ context.Context, key string, _ int64) (addReply, error) {
		mu.Lock()
		defer mu.Unlock()
		tries[key]++
		if key == "dead" {
			return addReply{}, errUnavailable
		}
		return addReply{Value: 3}, nil
	}
	counts, errs := readKeys(context.Background(), add, clock, []string{"alive", "dead"}, time.Second, 2, 3)
	cancel()
	wg.Wait()
	if counts["alive"] != 3 || errs["alive"] != nil || tries["alive"] != 1 {
		t.Errorf("alive: count %d, error %v, %d tries; want 3, none, 1", counts["alive"], errs["alive"], tries["alive"])
	}
	if _, ok := counts["dead"]; ok || !errors.Is(errs["dead"], errUnavailable) || tries["dead"] != 3 {
		t.Errorf("dead: counts %v, error %v, %d tries; want no count, its error, 3 tries", counts, errs["dead"], tries["dead"])
	}
}

func TestOverloadConfig(t *testing.T) {
	valid := func() overloadConfig {
		c := overloadConfig{Prefix: "p", P99Bound: 500 * time.Millisecond, RSSBound: 256 << 20}
		c.setDefaults()
		return c
	}
	if c := valid(); c.validate() != nil || c.Duration != 2*time.Minute || c.Factor != 2 || c.HotShare != 0.2 {
		t.Errorf("defaults %+v: %v", c, c.validate())
	}
	tests := []struct {
		change  func(c *overloadConfig)
		wantErr string
	}{
		{func(c *overloadConfig) { c.Factor = 1 }, "factor 1"},
		{func(c *overloadConfig) { c.HotShare = 1.5 }, "hot share 1.5"},
		{func(c *overloadConfig) { c.P99Bound = 3 * time.Second }, "p99 bound 3s"},
		{func(c *overloadConfig) { c.RSSBound = 0 }, "memory bound"},
		{func(c *overloadConfig) { c.RecoveryWatch = 10 * time.Second }, "recovery watch 10s must exceed"},
		{func(c *overloadConfig) { c.RecoveryShare = 1 }, "recovery share 1"},
		{func(c *overloadConfig) { c.Duration = -time.Second }, "durations must be positive"},
		{func(c *overloadConfig) { c.Prefix = "" }, "prefix"},
	}
	for _, tt := range tests {
		c := valid()
		tt.change(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("validate() = %v, want an error containing %q", err, tt.wantErr)
		}
	}
	c := valid()
	if got := c.maxInFlight(1500); got != 3000 {
		t.Errorf("maxInFlight(1500/s) with a 2s timeout = %d, want 3000", got)
	}
	c.MaxInFlight = 10
	if got := c.maxInFlight(1500); got != 10 {
		t.Errorf("maxInFlight with the flag set = %d, want 10", got)
	}
	// 8 workers at a fifth of 400 calls/s: 80/s, a call every 100ms each.
	if got := c.recoveryPace(400); got != 100*time.Millisecond {
		t.Errorf("recoveryPace(400) = %v, want 100ms", got)
	}
	// A tiny capacity would pace past a second: held at 250ms.
	if got := c.recoveryPace(10); got != 250*time.Millisecond {
		t.Errorf("recoveryPace(10) = %v, want 250ms", got)
	}
}
