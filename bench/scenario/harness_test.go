package scenario

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeMaxIndex bounds the caller and sender indices the fakes accept.
const fakeMaxIndex = 16

// fakeLog records, in order, which setup methods the fakes were asked
// for, shared by every fake of a test so that RunAll's interleaving shows.
type fakeLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *fakeLog) add(s string) {
	l.mu.Lock()
	l.entries = append(l.entries, s)
	l.mu.Unlock()
}

func (l *fakeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// fakeCounts counts what happened to one kind of workload.
type fakeCounts struct {
	setups atomic.Int64
	closes atomic.Int64
	calls  atomic.Int64
}

// fakeCaller is a Caller that counts calls per index and notices calls
// with the same index running at once, which Caller forbids.
type fakeCaller struct {
	counts  *fakeCounts
	perIdx  [fakeMaxIndex]atomic.Int64
	busy    [fakeMaxIndex]atomic.Bool
	overlap atomic.Bool
	badIdx  atomic.Bool
	closed  atomic.Bool
	twice   atomic.Bool
	// fail, when set, is asked after the n-th call (1-based) of caller i
	// and its error is that call's.
	fail func(i int, n int64) error
}

func newFakeCaller(c *fakeCounts, fail func(int, int64) error) *fakeCaller {
	c.setups.Add(1)
	return &fakeCaller{counts: c, fail: fail}
}

func (c *fakeCaller) Call(_ context.Context, i int) error {
	if i < 0 || i >= fakeMaxIndex {
		c.badIdx.Store(true)
		return fmt.Errorf("fake: caller index %d out of range", i)
	}
	if c.busy[i].Swap(true) {
		c.overlap.Store(true)
	}
	defer c.busy[i].Store(false)
	// A real call waits for its reply, letting the other callers run; a
	// fake that never yielded could keep a caller from starting at all
	// within a short measurement.
	runtime.Gosched()
	c.counts.calls.Add(1)
	n := c.perIdx[i].Add(1)
	if c.fail != nil {
		return c.fail(i, n)
	}
	return nil
}

func (c *fakeCaller) Close() error {
	if c.closed.Swap(true) {
		c.twice.Store(true)
	}
	c.counts.closes.Add(1)
	return nil
}

// usedIndices lists the caller indices that made calls.
func (c *fakeCaller) usedIndices() []int {
	var used []int
	for i := range c.perIdx {
		if c.perIdx[i].Load() > 0 {
			used = append(used, i)
		}
	}
	return used
}

// fakeTeller is a Teller whose grains handle messages only on a goroutine
// of their own, and only when Handled is asked: while the senders send,
// Handled lags behind, so a harness that did not wait for it would see
// fewer messages handled than sent.
type fakeTeller struct {
	sent    atomic.Int64
	handled atomic.Int64
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	badIdx  atomic.Bool
	badSeq  atomic.Bool
	nextN   [fakeMaxIndex]atomic.Int64
	polls   atomic.Int64
	// At Close: what had been sent and handled.
	sentAtClose, handledAtClose atomic.Int64
	closes                      atomic.Int64
}

func newFakeTeller() *fakeTeller {
	t := &fakeTeller{kick: make(chan struct{}, 1), done: make(chan struct{})}
	t.wg.Go(t.catchUp)
	return t
}

// catchUp handles half of the backlog (at least one message) each time
// Handled kicks it.
func (t *fakeTeller) catchUp() {
	for {
		select {
		case <-t.done:
			return
		case <-t.kick:
			s, h := t.sent.Load(), t.handled.Load()
			if h < s {
				t.handled.Store(h + max(1, (s-h)/2))
			}
		}
	}
}

func (t *fakeTeller) Send(_ context.Context, i int, n int64) error {
	if i < 0 || i >= fakeMaxIndex {
		t.badIdx.Store(true)
		return fmt.Errorf("fake: sender index %d out of range", i)
	}
	// A sender's messages are numbered 0, 1, 2, ... (afresh for each
	// measurement).
	if want := t.nextN[i].Load(); n != want && n != 0 {
		t.badSeq.Store(true)
	}
	t.nextN[i].Store(n + 1)
	t.sent.Add(1)
	runtime.Gosched()
	return nil
}

func (t *fakeTeller) Handled() int64 {
	t.polls.Add(1)
	select {
	case t.kick <- struct{}{}:
	default:
	}
	return t.handled.Load()
}

func (t *fakeTeller) Close() error {
	t.sentAtClose.Store(t.sent.Load())
	t.handledAtClose.Store(t.handled.Load())
	t.closes.Add(1)
	close(t.done)
	t.wg.Wait()
	return nil
}

// fakeLoopLatency is what every call of fakeLooper takes.
const fakeLoopLatency = 2 * time.Microsecond

// fakeLooper is a Looper that records fakeLoopLatency for every call.
type fakeLooper struct {
	loops    atomic.Int64
	recorded atomic.Int64
	badN     atomic.Bool
	closes   atomic.Int64
}

func (l *fakeLooper) Loop(_ context.Context, n int, rec *Recorder) error {
	if n != loopBatch {
		l.badN.Store(true)
	}
	for range n {
		rec.Record(fakeLoopLatency)
	}
	l.loops.Add(1)
	l.recorded.Add(int64(n))
	return nil
}

func (l *fakeLooper) Close() error {
	l.closes.Add(1)
	return nil
}

// fakeActivator is a Caller for Activations that keeps the set of keys
// called, and notices a key called twice.
type fakeActivator struct {
	mu     sync.Mutex
	seen   []uint64 // bitset of keys
	n      int64
	maxKey int
	dup    bool
	neg    bool
	closes atomic.Int64
}

func (a *fakeActivator) Call(_ context.Context, k int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if k < 0 {
		a.neg = true
		return fmt.Errorf("fake: negative key %d", k)
	}
	w, b := k/64, uint64(1)<<(k%64)
	for len(a.seen) <= w {
		a.seen = append(a.seen, 0)
	}
	if a.seen[w]&b != 0 {
		a.dup = true
	}
	a.seen[w] |= b
	a.n++
	a.maxKey = max(a.maxKey, k)
	return nil
}

func (a *fakeActivator) Close() error {
	a.closes.Add(1)
	return nil
}

// distinct is how many distinct keys were called, and whether they are
// exactly 0..distinct-1.
func (a *fakeActivator) distinct() (n int64, dense bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.seen {
		for ; w != 0; w &= w - 1 {
			n++
		}
	}
	return n, !a.dup && (n == 0 || int64(a.maxKey) == n-1)
}

// fakeTimers runs one ticker, standing for all the timers, that records
// fakeTimerLate for every tick but the first, which it records as
// fakeFirstTickLate: the first tick comes before the measured window, so
// it must not be seen in the results.
type fakeTimers struct {
	ticks  atomic.Int64
	done   chan struct{}
	wg     sync.WaitGroup
	closes atomic.Int64
}

const (
	fakeTimerLate     = 300 * time.Microsecond
	fakeFirstTickLate = 50 * time.Millisecond
)

func newFakeTimers(period time.Duration, late *SyncRecorder) *fakeTimers {
	ft := &fakeTimers{done: make(chan struct{})}
	tk := time.NewTicker(period) // running before Timers returns
	ft.wg.Go(func() {
		defer tk.Stop()
		for {
			select {
			case <-ft.done:
				return
			case <-tk.C:
				if ft.ticks.Add(1) == 1 {
					late.Record(fakeFirstTickLate)
				} else {
					late.Record(fakeTimerLate)
				}
			}
		}
	})
	return ft
}

func (ft *fakeTimers) Close() error {
	ft.closes.Add(1)
	close(ft.done)
	ft.wg.Wait()
	return nil
}

// fakePublisher is a Publisher whose subscribers handle events on a
// goroutine of their own that catches up only every so often (time.Sleep
// lasts a quarter of a millisecond or more), so that a publisher runs
// into its window and a harness that did not wait for the subscribers
// would see fewer events handled than published.
type fakePublisher struct {
	tally     *Tally
	window    int64
	published atomic.Int64
	done      chan struct{}
	wg        sync.WaitGroup
	badSeq    atomic.Bool
	// overWindow: a publish came while the publisher was a window or more
	// ahead of the slowest subscriber.
	overWindow atomic.Bool
	// At Close: what had been published, and the least handled.
	publishedAtClose, leastAtClose atomic.Int64
	closes                         atomic.Int64
}

func newFakePublisher(tally *Tally, window int) *fakePublisher {
	p := &fakePublisher{tally: tally, window: int64(window), done: make(chan struct{})}
	p.wg.Go(p.deliver)
	return p
}

// deliver hands every subscriber, one after another, the events
// published since the last time, counting each.
func (p *fakePublisher) deliver() {
	for {
		select {
		case <-p.done:
			return
		default:
		}
		upTo := p.published.Load()
		for i := range p.tally.Subscribers() {
			c := p.tally.Counter(p.tally.Name(i))
			for c.Load() < upTo {
				c.Count()
			}
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func (p *fakePublisher) Publish(_ context.Context, n int64) error {
	if n != p.published.Load() {
		p.badSeq.Store(true)
	}
	if n-p.tally.Least() >= p.window {
		p.overWindow.Store(true)
	}
	p.published.Store(n + 1)
	runtime.Gosched()
	return nil
}

func (p *fakePublisher) Close() error {
	p.publishedAtClose.Store(p.published.Load())
	p.leastAtClose.Store(p.tally.Least())
	p.closes.Add(1)
	close(p.done)
	p.wg.Wait()
	return nil
}

// fakeSystem is a System made of the fakes above. The methods named in
// unsupported return ErrUnsupported.
type fakeSystem struct {
	name        string
	log         *fakeLog
	unsupported map[string]bool
	// failLocal, when set, makes the Local callers' calls fail: see
	// fakeCaller.fail.
	failLocal func(i int, n int64) error

	local, remote, gateway, fanout fakeCounts

	// The last workload of each kind set up, and what it was set up
	// with.
	lastLocal, lastRemote, lastGateway, lastFanout *fakeCaller
	fanoutWidth, tellGrains                        int
	teller                                         *fakeTeller
	looper                                         *fakeLooper
	activator                                      *fakeActivator
	timers                                         *fakeTimers
	timerN                                         int
	timerPeriod                                    time.Duration
	publisher                                      *fakePublisher
	streamSubscribers                              int
	streamRemote                                   bool
	// streamWindow is the window the fake publisher checks.
	streamWindow int
}

var _ System = (*fakeSystem)(nil)

func newFakeSystem(name string, log *fakeLog, unsupported ...string) *fakeSystem {
	if log == nil {
		log = &fakeLog{}
	}
	f := &fakeSystem{name: name, log: log, unsupported: map[string]bool{}}
	for _, u := range unsupported {
		f.unsupported[u] = true
	}
	return f
}

func (f *fakeSystem) Name() string { return f.name }

// setup logs the setup of method and says whether it is unsupported.
func (f *fakeSystem) setup(method string) error {
	f.log.add(f.name + " " + method)
	if f.unsupported[method] {
		return ErrUnsupported
	}
	return nil
}

func (f *fakeSystem) Local(context.Context) (Caller, error) {
	if err := f.setup("Local"); err != nil {
		return nil, err
	}
	f.lastLocal = newFakeCaller(&f.local, f.failLocal)
	return f.lastLocal, nil
}

func (f *fakeSystem) Remote(context.Context) (Caller, error) {
	if err := f.setup("Remote"); err != nil {
		return nil, err
	}
	f.lastRemote = newFakeCaller(&f.remote, nil)
	return f.lastRemote, nil
}

func (f *fakeSystem) Gateway(context.Context) (Caller, error) {
	if err := f.setup("Gateway"); err != nil {
		return nil, err
	}
	f.lastGateway = newFakeCaller(&f.gateway, nil)
	return f.lastGateway, nil
}

func (f *fakeSystem) Tell(_ context.Context, grains int) (Teller, error) {
	if err := f.setup("Tell"); err != nil {
		return nil, err
	}
	f.tellGrains = grains
	f.teller = newFakeTeller()
	return f.teller, nil
}

func (f *fakeSystem) Fanout(_ context.Context, width int) (Caller, error) {
	if err := f.setup("Fanout"); err != nil {
		return nil, err
	}
	f.fanoutWidth = width
	f.lastFanout = newFakeCaller(&f.fanout, nil)
	return f.lastFanout, nil
}

func (f *fakeSystem) GrainToGrain(context.Context) (Looper, error) {
	if err := f.setup("GrainToGrain"); err != nil {
		return nil, err
	}
	f.looper = &fakeLooper{}
	return f.looper, nil
}

func (f *fakeSystem) Activations(context.Context) (Caller, error) {
	if err := f.setup("Activations"); err != nil {
		return nil, err
	}
	f.activator = &fakeActivator{}
	return f.activator, nil
}

func (f *fakeSystem) Stream(_ context.Context, tally *Tally, remote bool) (Publisher, error) {
	method := "StreamLocal"
	if remote {
		method = "StreamRemote"
	}
	if err := f.setup(method); err != nil {
		return nil, err
	}
	f.streamSubscribers, f.streamRemote = tally.Subscribers(), remote
	f.publisher = newFakePublisher(tally, f.streamWindow)
	return f.publisher, nil
}

func (f *fakeSystem) Timers(_ context.Context, n int, period time.Duration, late *SyncRecorder) (io.Closer, error) {
	if err := f.setup("Timers"); err != nil {
		return nil, err
	}
	f.timerN, f.timerPeriod = n, period
	f.timers = newFakeTimers(period, late)
	return f.timers, nil
}

// tinyConfig is a configuration that runs every scenario in well under a
// second, with no warm-up so that a workload's calls are all measured.
func tinyConfig() Config {
	return Config{
		Duration:          20 * time.Millisecond,
		Warmup:            0,
		Callers:           3,
		Senders:           2,
		TellGrains:        5,
		FanoutWidth:       7,
		Activations:       500,
		ActivationCallers: 4,
		ActivationLimit:   10 * time.Second,
		StreamSubscribers: 6,
		StreamWindow:      8,
		Timers:            3,
		TimerPeriod:       5 * time.Millisecond,
		TimerWindow:       40 * time.Millisecond,
	}
}

func variants(rs []Result) []string {
	var vs []string
	for _, r := range rs {
		vs = append(vs, r.Variant)
	}
	return vs
}

func sumOps(rs []Result) int64 {
	var n int64
	for _, r := range rs {
		n += r.Ops
	}
	return n
}

// TestRunVariants runs every scenario on the fake and checks the variants
// each reports, and that every result is filled in and consistent.
func TestRunVariants(t *testing.T) {
	cfg := tinyConfig()
	want := map[string][]string{
		Ping:            {Sequential},
		ConcurrentPing:  {"callers=3"},
		Tell:            {"callers=2"},
		Fanout:          {Sequential},
		GrainToGrain:    {Sequential},
		CrossSiloPing:   {Sequential, "callers=3"},
		ClientPing:      {Sequential, "callers=3"},
		StreamLocal:     {"subscribers=1"},
		StreamCrossSilo: {"subscribers=1"},
		StreamFanout:    {"subscribers=6"},
		Activations:     {"callers=4"},
		Timers:          {"3 timers, period 5ms"},
	}
	if len(want) != len(Names()) {
		t.Fatalf("test covers %d scenarios, Names has %d", len(want), len(Names()))
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			sys := newFakeSystem("fake", nil)
			rs, err := Run(context.Background(), sys, name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := variants(rs); !slices.Equal(got, want[name]) {
				t.Fatalf("variants %q, want %q", got, want[name])
			}
			for _, r := range rs {
				if r.Scenario != name || r.System != "fake" {
					t.Errorf("result names %q on %q, want %q on fake", r.Scenario, r.System, name)
				}
				if r.Ops <= 0 || r.Seconds <= 0 || r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.P999 {
					t.Errorf("result %+v: want ops, seconds and p50 <= p99 <= p99.9 above zero", r)
				}
				if r.OpsPerSec != float64(r.Ops)/r.Seconds {
					t.Errorf("ops/s %v, want ops/seconds = %v", r.OpsPerSec, float64(r.Ops)/r.Seconds)
				}
				if r.Key() != name+" "+r.Variant {
					t.Errorf("Key() = %q", r.Key())
				}
			}
		})
	}
}

// TestRunCallScenarios checks the call scenarios' op counts against the
// calls the fake saw: with no warm-up, every call is an op.
func TestRunCallScenarios(t *testing.T) {
	cfg := tinyConfig()
	ctx := context.Background()

	t.Run(Ping, func(t *testing.T) {
		sys := newFakeSystem("fake", nil)
		rs, err := Run(ctx, sys, Ping, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rs[0].Ops, sys.local.calls.Load(); got != want || got == 0 {
			t.Errorf("ops %d, want the %d calls made", got, want)
		}
		if got := sys.lastLocal.usedIndices(); !slices.Equal(got, []int{0}) {
			t.Errorf("sequential ping used callers %v, want [0]", got)
		}
		if rs[0].Seconds < cfg.Duration.Seconds() {
			t.Errorf("measured %vs, want at least the %v duration", rs[0].Seconds, cfg.Duration)
		}
		checkCallerClosed(t, "Local", &sys.local, sys.lastLocal)
	})

	t.Run(ConcurrentPing, func(t *testing.T) {
		sys := newFakeSystem("fake", nil)
		rs, err := Run(ctx, sys, ConcurrentPing, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rs[0].Ops, sys.local.calls.Load(); got != want {
			t.Errorf("ops %d, want the %d calls made", got, want)
		}
		if got := sys.lastLocal.usedIndices(); !slices.Equal(got, []int{0, 1, 2}) {
			t.Errorf("3 callers used indices %v, want [0 1 2]", got)
		}
		if sys.lastLocal.overlap.Load() {
			t.Error("two calls with the same caller index ran at once")
		}
		checkCallerClosed(t, "Local", &sys.local, sys.lastLocal)
	})

	for _, tc := range []struct {
		name   string
		counts func(*fakeSystem) (*fakeCounts, *fakeCaller)
		method string
	}{
		{CrossSiloPing, func(f *fakeSystem) (*fakeCounts, *fakeCaller) { return &f.remote, f.lastRemote }, "Remote"},
		{ClientPing, func(f *fakeSystem) (*fakeCounts, *fakeCaller) { return &f.gateway, f.lastGateway }, "Gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := newFakeSystem("fake", nil)
			rs, err := Run(ctx, sys, tc.name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			counts, c := tc.counts(sys)
			if got, want := sumOps(rs), counts.calls.Load(); got != want {
				t.Errorf("ops %d over both variants, want the %d calls made", got, want)
			}
			if got := sys.local.calls.Load(); got != 0 {
				t.Errorf("%s made %d calls on Local, want none", tc.name, got)
			}
			// Both variants share one setup.
			if got := counts.setups.Load(); got != 1 {
				t.Errorf("%s set up %d times, want once", tc.method, got)
			}
			if got := c.usedIndices(); !slices.Equal(got, []int{0, 1, 2}) {
				t.Errorf("callers used indices %v, want [0 1 2]", got)
			}
			if c.overlap.Load() {
				t.Error("two calls with the same caller index ran at once")
			}
			checkCallerClosed(t, tc.method, counts, c)
		})
	}

	t.Run(Fanout, func(t *testing.T) {
		sys := newFakeSystem("fake", nil)
		rs, err := Run(ctx, sys, Fanout, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if sys.fanoutWidth != cfg.FanoutWidth {
			t.Errorf("Fanout set up with width %d, want %d", sys.fanoutWidth, cfg.FanoutWidth)
		}
		r := rs[0]
		if got, want := r.Ops, sys.fanout.calls.Load(); got != want {
			t.Errorf("ops %d, want the %d fan-outs made", got, want)
		}
		if got, want := r.Extra[ExtraCallsPerSec], r.OpsPerSec*float64(cfg.FanoutWidth); got != want {
			t.Errorf("calls/s %v, want ops/s × width = %v", got, want)
		}
		checkCallerClosed(t, "Fanout", &sys.fanout, sys.lastFanout)
	})

	t.Run("warm-up is not measured", func(t *testing.T) {
		cfg := cfg
		cfg.Warmup = 20 * time.Millisecond
		sys := newFakeSystem("fake", nil)
		rs, err := Run(ctx, sys, Ping, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, all := rs[0].Ops, sys.local.calls.Load(); got <= 0 || got >= all {
			t.Errorf("ops %d of %d calls made, want some but not the warm-up's", got, all)
		}
		if got := sys.local.setups.Load(); got != 1 {
			t.Errorf("Local set up %d times, want once for warm-up and measurement", got)
		}
	})
}

func checkCallerClosed(t *testing.T, method string, counts *fakeCounts, c *fakeCaller) {
	t.Helper()
	if s, cl := counts.setups.Load(), counts.closes.Load(); s != cl {
		t.Errorf("%s set up %d times, closed %d times", method, s, cl)
	}
	if c.twice.Load() {
		t.Errorf("%s caller closed twice", method)
	}
	if c.badIdx.Load() {
		t.Errorf("%s caller called with an index out of range", method)
	}
}

// TestRunTellSettles checks that Tell stops the clock only once the
// grains have handled every message sent, so that its ops are messages
// handled. The fake's grains handle nothing until Handled is polled.
func TestRunTellSettles(t *testing.T) {
	cfg := tinyConfig()
	sys := newFakeSystem("fake", nil)
	rs, err := Run(context.Background(), sys, Tell, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tl := sys.teller
	if sys.tellGrains != cfg.TellGrains {
		t.Errorf("Tell set up with %d grains, want %d", sys.tellGrains, cfg.TellGrains)
	}
	sent, handled := tl.sentAtClose.Load(), tl.handledAtClose.Load()
	if sent == 0 {
		t.Fatal("no message sent")
	}
	if handled < sent {
		t.Errorf("closed with %d of %d messages handled: the harness did not wait for Handled() >= sent", handled, sent)
	}
	if got := rs[0].Ops; got != handled || got != sent {
		t.Errorf("ops %d, want the %d messages sent and handled", got, sent)
	}
	if tl.polls.Load() < 2 {
		t.Errorf("Handled polled %d times; it lags, so settling takes more than one poll", tl.polls.Load())
	}
	if tl.badIdx.Load() || tl.badSeq.Load() {
		t.Errorf("sends out of order or from senders out of range (index %v, sequence %v)", tl.badIdx.Load(), tl.badSeq.Load())
	}
	if tl.closes.Load() != 1 {
		t.Errorf("Teller closed %d times, want once", tl.closes.Load())
	}

	t.Run("with warm-up", func(t *testing.T) {
		cfg := cfg
		cfg.Warmup = 20 * time.Millisecond
		sys := newFakeSystem("fake", nil)
		rs, err := Run(context.Background(), sys, Tell, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sent, handled := sys.teller.sentAtClose.Load(), sys.teller.handledAtClose.Load()
		if handled < sent {
			t.Errorf("closed with %d of %d messages handled", handled, sent)
		}
		if got := rs[0].Ops; got <= 0 || got >= sent {
			t.Errorf("ops %d of %d messages sent, want some but not the warm-up's", got, sent)
		}
		if sys.teller.badSeq.Load() {
			t.Error("a sender's message numbers did not run 0, 1, 2, ...")
		}
	})
}

// TestRunStream checks that the stream scenarios stop the clock only once
// every subscriber has handled every event, count an op for each event
// each subscriber handled, and keep the publisher within its window of
// the slowest subscriber. The fake's subscribers lag behind.
func TestRunStream(t *testing.T) {
	for _, tc := range []struct {
		name        string
		subscribers int
		remote      bool
	}{
		{StreamLocal, 1, false},
		{StreamCrossSilo, 1, true},
		{StreamFanout, tinyConfig().StreamSubscribers, false},
	} {
		for _, warmup := range []time.Duration{0, 20 * time.Millisecond} {
			t.Run(fmt.Sprint(tc.name, "/warmup=", warmup), func(t *testing.T) {
				cfg := tinyConfig()
				cfg.Warmup = warmup
				sys := newFakeSystem("fake", nil)
				sys.streamWindow = cfg.StreamWindow
				rs, err := Run(context.Background(), sys, tc.name, cfg)
				if err != nil {
					t.Fatal(err)
				}
				p, r := sys.publisher, rs[0]
				if sys.streamSubscribers != tc.subscribers || sys.streamRemote != tc.remote {
					t.Errorf("Stream set up with %d subscribers, remote %v; want %d, %v", sys.streamSubscribers, sys.streamRemote, tc.subscribers, tc.remote)
				}
				published := p.publishedAtClose.Load()
				if published == 0 {
					t.Fatal("nothing published")
				}
				if least := p.leastAtClose.Load(); least < published {
					t.Errorf("closed with the slowest subscriber at %d of %d events: the harness did not wait for every subscriber", least, published)
				}
				all := published * int64(tc.subscribers)
				if warmup == 0 && r.Ops != all {
					t.Errorf("ops %d, want the %d events × %d subscribers", r.Ops, published, tc.subscribers)
				}
				if warmup > 0 && (r.Ops <= 0 || r.Ops >= all || r.Ops%int64(tc.subscribers) != 0) {
					t.Errorf("ops %d of %d deliveries, want some, a multiple of %d, but not the warm-up's", r.Ops, all, tc.subscribers)
				}
				if got, want := r.Extra[ExtraEventsPerSec], r.OpsPerSec/float64(tc.subscribers); got != want {
					t.Errorf("%s %v, want ops/s over the subscribers = %v", ExtraEventsPerSec, got, want)
				}
				if got, want := r.P50, int64(0); got <= want {
					t.Errorf("p50 %d, want the publisher's latency", got)
				}
				if p.badSeq.Load() {
					t.Error("the publisher's events were not numbered 0, 1, 2, ... across warm-up and measurement")
				}
				if p.overWindow.Load() {
					t.Errorf("a publish came %d or more events ahead of the slowest subscriber", cfg.StreamWindow)
				}
				if p.closes.Load() != 1 {
					t.Errorf("Publisher closed %d times, want once", p.closes.Load())
				}
			})
		}
	}
}

// TestTallyAwait checks that a publisher waiting on a Tally wakes when the
// slowest of many subscribers, counting concurrently, reaches its target,
// and gives up, saying how far they got, when they never do.
func TestTallyAwait(t *testing.T) {
	const subscribers, events = 8, 20000
	tally := NewTally(subscribers)
	if tally.Subscribers() != subscribers || tally.Name(3) != "s3" || tally.Counter("s3") == nil || tally.Counter("x") != nil {
		t.Fatalf("tally of %d: names and counters wrong", tally.Subscribers())
	}
	var wg sync.WaitGroup
	for i := range subscribers {
		c := tally.Counter(tally.Name(i))
		wg.Go(func() {
			for range events {
				c.Count()
			}
		})
	}
	ctx := context.Background()
	for target := int64(1000); target <= events; target += 1000 {
		least, err := tally.await(ctx, target, time.Minute)
		if err != nil || least < target {
			t.Fatalf("await(%d) = %d, %v", target, least, err)
		}
	}
	wg.Wait()
	if tally.Least() != events || tally.Total() != subscribers*events {
		t.Fatalf("least %d, total %d; want %d and %d", tally.Least(), tally.Total(), events, subscribers*events)
	}
	_, err := tally.await(ctx, events+1, 30*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("handled %d of %d events", events, events+1)) {
		t.Errorf("await past every event: %v, want it to give up saying how far the subscribers got", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tally.await(cctx, events+1, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("await with an ended context: %v, want context.Canceled", err)
	}
}

func TestRunGrainToGrain(t *testing.T) {
	cfg := tinyConfig()
	sys := newFakeSystem("fake", nil)
	rs, err := Run(context.Background(), sys, GrainToGrain, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, r := sys.looper, rs[0]
	if l.badN.Load() {
		t.Errorf("Loop asked for other than %d calls", loopBatch)
	}
	if got, want := r.Ops, l.loops.Load()*loopBatch; got != want || got == 0 {
		t.Errorf("ops %d, want %d loops × %d", got, l.loops.Load(), loopBatch)
	}
	// Every call took fakeLoopLatency; the histogram keeps 1%.
	for _, q := range []struct {
		name string
		v    int64
	}{{"p50", r.P50}, {"p99", r.P99}, {"p99.9", r.P999}} {
		if d := time.Duration(q.v); d < fakeLoopLatency*99/100 || d > fakeLoopLatency*101/100 {
			t.Errorf("%s %v, want %v within 1%%", q.name, d, fakeLoopLatency)
		}
	}
	if l.closes.Load() != 1 {
		t.Errorf("Looper closed %d times, want once", l.closes.Load())
	}
}

func TestRunActivations(t *testing.T) {
	t.Run("all created", func(t *testing.T) {
		cfg := tinyConfig()
		sys := newFakeSystem("fake", nil)
		rs, err := Run(context.Background(), sys, Activations, cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, r := sys.activator, rs[0]
		n, dense := a.distinct()
		if a.dup || a.neg {
			t.Errorf("a key was called twice (%v) or was negative (%v)", a.dup, a.neg)
		}
		if n != int64(cfg.Activations) || !dense || a.n != n {
			t.Errorf("%d calls to %d distinct keys up to %d, want one call to each of 0..%d", a.n, n, a.maxKey, cfg.Activations-1)
		}
		if r.Ops != int64(cfg.Activations) {
			t.Errorf("ops %d, want %d", r.Ops, cfg.Activations)
		}
		if got := r.Extra[ExtraActivations]; got != float64(cfg.Activations) {
			t.Errorf("%s %v, want %d", ExtraActivations, got, cfg.Activations)
		}
		if _, ok := r.Extra[ExtraHeapBytes]; !ok {
			t.Errorf("no %s in %v", ExtraHeapBytes, r.Extra)
		}
		if got, want := r.Extra[ExtraBytesPerActivation], r.Extra[ExtraHeapBytes]/float64(cfg.Activations); got != want {
			t.Errorf("%s %v, want heap / activations = %v", ExtraBytesPerActivation, got, want)
		}
		// Creating 500 activations in no time does not take the 10 s limit.
		if r.Seconds >= cfg.ActivationLimit.Seconds() {
			t.Errorf("ran %vs: it should stop when the activations are made, not at the limit", r.Seconds)
		}
		if a.closes.Load() != 1 {
			t.Errorf("closed %d times, want once", a.closes.Load())
		}
	})

	t.Run("stops short at the limit", func(t *testing.T) {
		cfg := tinyConfig()
		cfg.Activations = 1 << 40
		cfg.ActivationLimit = 30 * time.Millisecond
		sys := newFakeSystem("fake", nil)
		rs, err := Run(context.Background(), sys, Activations, cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, r := sys.activator, rs[0]
		n, dense := a.distinct()
		if r.Ops <= 0 || r.Ops >= int64(cfg.Activations) {
			t.Fatalf("ops %d, want some but fewer than %d", r.Ops, cfg.Activations)
		}
		if n != r.Ops || !dense || a.n != n {
			t.Errorf("%d calls to %d distinct keys up to %d, want one call to each of 0..%d", a.n, n, a.maxKey, r.Ops-1)
		}
		if got := r.Extra[ExtraActivations]; got != float64(r.Ops) {
			t.Errorf("%s %v, want the %d made", ExtraActivations, got, r.Ops)
		}
	})
}

func TestRunTimers(t *testing.T) {
	cfg := tinyConfig()
	// The first tick, 5 ms after Timers returns, is well before the window,
	// which opens 25 ms after.
	cfg.Warmup = 20 * time.Millisecond
	sys := newFakeSystem("fake", nil)
	rs, err := Run(context.Background(), sys, Timers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, ft := rs[0], sys.timers
	if sys.timerN != cfg.Timers || sys.timerPeriod != cfg.TimerPeriod {
		t.Errorf("Timers(%d, %v), want (%d, %v)", sys.timerN, sys.timerPeriod, cfg.Timers, cfg.TimerPeriod)
	}
	ticks := ft.ticks.Load()
	if r.Ops <= 0 || r.Ops >= ticks {
		t.Errorf("%d ticks measured of %d, want some, but not those before the window", r.Ops, ticks)
	}
	if d := time.Duration(r.P999); d < fakeTimerLate*99/100 || d > fakeTimerLate*101/100 {
		t.Errorf("p99.9 lateness %v, want %v within 1%% (a tick from before the window was counted?)", d, fakeTimerLate)
	}
	if got := r.Extra[ExtraTimers]; got != float64(cfg.Timers) {
		t.Errorf("%s %v, want %d", ExtraTimers, got, cfg.Timers)
	}
	for _, k := range []string{ExtraCPUPercent, ExtraIdleCPUPercent} {
		if _, ok := r.Extra[k]; !ok {
			t.Errorf("no %s in %v", k, r.Extra)
		}
	}
	if r.Seconds < cfg.TimerWindow.Seconds() {
		t.Errorf("measured %vs, want at least the %v window", r.Seconds, cfg.TimerWindow)
	}
	if ft.closes.Load() != 1 {
		t.Errorf("timers closed %d times, want once", ft.closes.Load())
	}
	// The idle node: one Local, called once, then closed.
	if s, c, calls := sys.local.setups.Load(), sys.local.closes.Load(), sys.local.calls.Load(); s != 1 || c != 1 || calls != 1 {
		t.Errorf("idle node: %d setups, %d closes, %d calls; want 1 of each", s, c, calls)
	}
}

func TestRunUnsupported(t *testing.T) {
	cfg := tinyConfig()
	for _, tc := range []struct{ scenario, method string }{
		{Ping, "Local"},
		{ConcurrentPing, "Local"},
		{Tell, "Tell"},
		{Fanout, "Fanout"},
		{GrainToGrain, "GrainToGrain"},
		{CrossSiloPing, "Remote"},
		{ClientPing, "Gateway"},
		{StreamLocal, "StreamLocal"},
		{StreamCrossSilo, "StreamRemote"},
		{StreamFanout, "StreamLocal"},
		{Activations, "Activations"},
		{Timers, "Timers"},
		{Timers, "Local"}, // the idle node Timers measures first
	} {
		t.Run(tc.scenario+"/"+tc.method, func(t *testing.T) {
			sys := newFakeSystem("fake", nil, tc.method)
			rs, err := Run(context.Background(), sys, tc.scenario, cfg)
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err %v, want ErrUnsupported", err)
			}
			if len(rs) != 0 {
				t.Errorf("results %+v from an unsupported scenario", rs)
			}
			for _, c := range []*fakeCounts{&sys.local, &sys.remote, &sys.gateway, &sys.fanout} {
				if c.setups.Load() != c.closes.Load() {
					t.Errorf("%d setups but %d closes", c.setups.Load(), c.closes.Load())
				}
			}
		})
	}
}

func TestRunUnknownScenario(t *testing.T) {
	log := &fakeLog{}
	_, err := Run(context.Background(), newFakeSystem("fake", log), "no-such-scenario", tinyConfig())
	if err == nil || !strings.Contains(err.Error(), `"no-such-scenario"`) {
		t.Errorf("err %v, want one naming the unknown scenario", err)
	}
	if errors.Is(err, ErrUnsupported) {
		t.Error("an unknown scenario is not ErrUnsupported")
	}
	if got := log.all(); len(got) != 0 {
		t.Errorf("set up %v for an unknown scenario", got)
	}
}

var errFakeBoom = errors.New("fake: boom")

func TestRunCallerError(t *testing.T) {
	for _, warmup := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprint("warmup=", warmup), func(t *testing.T) {
			cfg := tinyConfig()
			cfg.Warmup = warmup
			sys := newFakeSystem("fake", nil)
			sys.failLocal = func(i int, n int64) error {
				if i == 2 && n == 5 {
					return errFakeBoom
				}
				return nil
			}
			_, err := Run(context.Background(), sys, ConcurrentPing, cfg)
			if !errors.Is(err, errFakeBoom) {
				t.Fatalf("err %v, want the caller's error", err)
			}
			msg := err.Error()
			for _, want := range []string{"caller 2", ConcurrentPing, "fake"} {
				if !strings.Contains(msg, want) {
					t.Errorf("err %q does not say %q", msg, want)
				}
			}
			if warmup > 0 && !strings.Contains(msg, "warm-up") {
				t.Errorf("err %q does not say it came in the warm-up", msg)
			}
			if got := sys.local.closes.Load(); got != 1 {
				t.Errorf("caller closed %d times after the error, want once", got)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := tinyConfig().Validate(); err != nil {
		t.Fatalf("tiny config: %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		field string
		bad   func(*Config)
	}{
		{"Duration", func(c *Config) { c.Duration = 0 }},
		{"Warmup", func(c *Config) { c.Warmup = -time.Millisecond }},
		{"Callers", func(c *Config) { c.Callers = 0 }},
		{"Senders", func(c *Config) { c.Senders = -1 }},
		{"TellGrains", func(c *Config) { c.TellGrains = 0 }},
		{"FanoutWidth", func(c *Config) { c.FanoutWidth = 0 }},
		{"Activations", func(c *Config) { c.Activations = 0 }},
		{"ActivationCallers", func(c *Config) { c.ActivationCallers = 0 }},
		{"ActivationLimit", func(c *Config) { c.ActivationLimit = 0 }},
		{"StreamSubscribers", func(c *Config) { c.StreamSubscribers = 0 }},
		{"StreamWindow", func(c *Config) { c.StreamWindow = -1 }},
		{"Timers", func(c *Config) { c.Timers = 0 }},
		{"TimerPeriod", func(c *Config) { c.TimerPeriod = 0 }},
		{"TimerWindow", func(c *Config) { c.TimerWindow = 0 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := tinyConfig()
			tc.bad(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), "field "+tc.field+" ") {
				t.Errorf("err %v, want one naming field %s", err, tc.field)
			}
			// Run checks the config before it sets anything up.
			log := &fakeLog{}
			if _, err := Run(context.Background(), newFakeSystem("fake", log), Ping, cfg); err == nil {
				t.Error("Run accepted the config")
			}
			if got := log.all(); len(got) != 0 {
				t.Errorf("Run set up %v with a bad config", got)
			}
		})
	}
}

// printed is what RunAll printed: the per-round results, in order, the
// medians it printed after them, and the other lines.
type printed struct {
	rounds, medians []Result
	other           []string
}

func parsePrinted(t *testing.T, out string) printed {
	t.Helper()
	var p printed
	inMedians := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "{"):
			var r Result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if inMedians {
				p.medians = append(p.medians, r)
			} else {
				p.rounds = append(p.rounds, r)
			}
		case strings.HasPrefix(line, "medians over"):
			inMedians = true
		default:
			p.other = append(p.other, line)
		}
	}
	return p
}

func TestRunAll(t *testing.T) {
	log := &fakeLog{}
	alpha := newFakeSystem("alpha", log)
	beta := newFakeSystem("beta", log, "Gateway")
	o := &Options{Config: tinyConfig(), Rounds: 3}
	o.Callers = 2
	var out bytes.Buffer
	got, err := o.RunAll(context.Background(), []System{alpha, beta}, []string{Ping, ClientPing}, &out)
	if err != nil {
		t.Fatal(err)
	}

	// Rounds go over the whole list, systems interleaved within each.
	round := []string{"alpha Local", "beta Local", "alpha Gateway", "beta Gateway"}
	var wantLog []string
	for range o.Rounds {
		wantLog = append(wantLog, round...)
	}
	if l := log.all(); !slices.Equal(l, wantLog) {
		t.Errorf("setups in order\n%q\nwant\n%q", l, wantLog)
	}

	p := parsePrinted(t, out.String())
	type key struct{ scenario, variant, system string }
	keyOf := func(r Result) key { return key{r.Scenario, r.Variant, r.System} }
	wantKeys := []key{
		{Ping, Sequential, "alpha"},
		{Ping, Sequential, "beta"},
		{ClientPing, Sequential, "alpha"},
		{ClientPing, "callers=2", "alpha"},
	}
	var printedKeys []key
	for _, r := range p.rounds {
		printedKeys = append(printedKeys, keyOf(r))
	}
	var wantPrinted []key
	for range o.Rounds {
		wantPrinted = append(wantPrinted, wantKeys...)
	}
	if !slices.Equal(printedKeys, wantPrinted) {
		t.Errorf("printed results\n%v\nwant\n%v", printedKeys, wantPrinted)
	}

	// The unsupported scenario is noted once, not once a round.
	var notes []string
	for _, l := range p.other {
		if strings.Contains(l, "not supported") {
			notes = append(notes, l)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], ClientPing) || !strings.Contains(notes[0], "beta") {
		t.Errorf("notes %q, want one saying client-ping is not supported on beta", notes)
	}

	// The medians, in the order of names then systems.
	if len(got) != len(wantKeys) {
		t.Fatalf("%d medians, want %d", len(got), len(wantKeys))
	}
	byKey := map[key][]Result{}
	for _, r := range p.rounds {
		byKey[keyOf(r)] = append(byKey[keyOf(r)], r)
	}
	for i, m := range got {
		if keyOf(m) != wantKeys[i] {
			t.Errorf("median %d is %v, want %v", i, keyOf(m), wantKeys[i])
			continue
		}
		rs := byKey[keyOf(m)]
		ops := make([]float64, len(rs))
		var sum int64
		for j, r := range rs {
			ops[j] = r.OpsPerSec
			sum += r.Ops
		}
		slices.Sort(ops)
		if m.OpsPerSec != ops[1] {
			t.Errorf("%v: median ops/s %v, want the middle of %v", keyOf(m), m.OpsPerSec, ops)
		}
		if m.Ops != sum {
			t.Errorf("%v: ops %d, want the rounds' sum %d", keyOf(m), m.Ops, sum)
		}
	}
	if !slices.EqualFunc(p.medians, got, func(a, b Result) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Errorf("printed medians\n%+v\nwant those returned\n%+v", p.medians, got)
	}
}

func TestRunAllOneRound(t *testing.T) {
	o := &Options{Config: tinyConfig(), Rounds: 1}
	var out bytes.Buffer
	got, err := o.RunAll(context.Background(), []System{newFakeSystem("solo", nil)}, []string{Ping}, &out)
	if err != nil {
		t.Fatal(err)
	}
	p := parsePrinted(t, out.String())
	if len(got) != 1 || len(p.rounds) != 1 || p.medians != nil {
		t.Fatalf("%d results, %d printed, medians %v; want 1, 1 and no medians section", len(got), len(p.rounds), p.medians)
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(p.rounds[0]) {
		t.Errorf("result %+v, want the one printed %+v", got[0], p.rounds[0])
	}
}

func TestRunAllError(t *testing.T) {
	log := &fakeLog{}
	bad := newFakeSystem("bad", log)
	bad.failLocal = func(int, int64) error { return errFakeBoom }
	o := &Options{Config: tinyConfig(), Rounds: 2}
	var out bytes.Buffer
	_, err := o.RunAll(context.Background(), []System{bad, newFakeSystem("good", log)}, []string{Ping, Fanout}, &out)
	if !errors.Is(err, errFakeBoom) {
		t.Fatalf("err %v, want the caller's", err)
	}
	if got := log.all(); !slices.Equal(got, []string{"bad Local"}) {
		t.Errorf("went on to set up %q after the error", got)
	}
}

func TestRecorder(t *testing.T) {
	r := NewRecorder()
	r.Record(-time.Second)  // counts as the least
	r.Record(2 * time.Hour) // counts as a minute
	for range 98 {
		r.Record(time.Millisecond)
	}
	if r.Count() != 100 {
		t.Fatalf("count %d, want 100", r.Count())
	}
	if q := r.Quantile(0.5); q < 990*time.Microsecond || q > 1010*time.Microsecond {
		t.Errorf("p50 %v, want 1ms within 1%%", q)
	}
	if q := r.Quantile(1); q < 59*time.Second || q > 61*time.Second {
		t.Errorf("max %v, want a minute", q)
	}
	if q := r.Quantile(0); q > time.Nanosecond {
		t.Errorf("min %v, want 1ns", q)
	}
	o := NewRecorder()
	o.Record(time.Second)
	r.Merge(o)
	if r.Count() != 101 {
		t.Errorf("count after merge %d, want 101", r.Count())
	}
	r.Reset()
	if r.Count() != 0 {
		t.Errorf("count after reset %d", r.Count())
	}

	s := NewSyncRecorder()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				s.Record(time.Microsecond)
			}
		})
	}
	wg.Wait()
	if got := s.take().Count(); got != 400 {
		t.Errorf("took %d, want 400", got)
	}
	if got := s.take().Count(); got != 0 {
		t.Errorf("second take %d, want 0: take starts afresh", got)
	}
}
