package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
)

// Result is one measured variant of one scenario on one system.
type Result struct {
	Scenario string `json:"scenario"`
	// Variant tells variants of a scenario apart: "sequential" or
	// "callers=256".
	Variant string `json:"variant,omitempty"`
	System  string `json:"system"`
	// Ops is how many operations the measurement made: calls, messages
	// handled, fan-outs, activations or timer ticks.
	Ops       int64   `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// The latency of an operation, in nanoseconds (for Timers, how late
	// a tick ran).
	P50  int64 `json:"p50_ns"`
	P99  int64 `json:"p99_ns"`
	P999 int64 `json:"p999_ns"`
	// Allocations, and bytes allocated, per operation, by the whole
	// process while it was measured.
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	// CPUPerOp is the process's CPU time (user and system, every core,
	// garbage collection included) per operation, in nanoseconds: less
	// sensitive than ops/s to other load on the machine.
	CPUPerOp float64 `json:"cpu_per_op_ns"`
	// Extra holds figures particular to the scenario; see the Extra...
	// constants.
	Extra map[string]float64 `json:"extra,omitempty"`
}

// Keys of Result.Extra.
const (
	// ExtraCallsPerSec: for Fanout, the grain calls per second.
	ExtraCallsPerSec = "calls_per_sec"
	// ExtraActivations: for Activations, how many were created.
	ExtraActivations = "activations"
	// ExtraHeapBytes: for Activations, the memory they keep after a
	// collection: live heap and goroutine stacks.
	ExtraHeapBytes = "heap_bytes"
	// ExtraBytesPerActivation: ExtraHeapBytes per activation.
	ExtraBytesPerActivation = "bytes_per_activation"
	// ExtraEventsPerSec: for the stream scenarios, the events published
	// and handled by every subscriber a second: ops/s over the
	// subscribers.
	ExtraEventsPerSec = "events_per_sec"
	// ExtraTimers: for Timers, how many ran.
	ExtraTimers = "timers"
	// ExtraCPUPercent: for Timers, the CPU the timers cost, in percent of
	// one core: the node's CPU with the timers running, less the same
	// node's CPU idle.
	ExtraCPUPercent = "cpu_percent"
	// ExtraIdleCPUPercent: for Timers, the idle node's CPU, in percent of
	// one core.
	ExtraIdleCPUPercent = "idle_cpu_percent"
)

// The variants of the scenarios that have more than one.
const (
	Sequential = "sequential"
)

// concurrentVariant names the variant with n callers.
func concurrentVariant(n int) string { return "callers=" + strconv.Itoa(n) }

// subscribersVariant names the variant of a stream with n subscribers.
func subscribersVariant(n int) string { return "subscribers=" + strconv.Itoa(n) }

// Run runs one scenario on sys and returns its results, one per variant.
// An unsupported scenario returns ErrUnsupported.
func Run(ctx context.Context, sys System, name string, cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var (
		rs  []Result
		err error
	)
	switch name {
	case Ping:
		rs, err = callScenario(ctx, sys.Local, cfg, []int{1}, 0)
	case ConcurrentPing:
		rs, err = callScenario(ctx, sys.Local, cfg, []int{cfg.Callers}, 0)
	case Fanout:
		rs, err = callScenario(ctx, func(ctx context.Context) (Caller, error) { return sys.Fanout(ctx, cfg.FanoutWidth) }, cfg, []int{1}, cfg.FanoutWidth)
	case CrossSiloPing:
		rs, err = callScenario(ctx, sys.Remote, cfg, []int{1, cfg.Callers}, 0)
	case ClientPing:
		rs, err = callScenario(ctx, sys.Gateway, cfg, []int{1, cfg.Callers}, 0)
	case Tell:
		rs, err = runTell(ctx, sys, cfg)
	case GrainToGrain:
		rs, err = runGrainToGrain(ctx, sys, cfg)
	case StreamLocal:
		rs, err = runStream(ctx, sys, cfg, 1, false)
	case StreamCrossSilo:
		rs, err = runStream(ctx, sys, cfg, 1, true)
	case StreamFanout:
		rs, err = runStream(ctx, sys, cfg, cfg.StreamSubscribers, false)
	case Activations:
		rs, err = runActivations(ctx, sys, cfg)
	case Timers:
		rs, err = runTimers(ctx, sys, cfg)
	default:
		return nil, fmt.Errorf("scenario: unknown scenario %q (known: %v)", name, Names())
	}
	for i := range rs {
		rs[i].Scenario, rs[i].System = name, sys.Name()
	}
	if err != nil && !errors.Is(err, ErrUnsupported) {
		err = fmt.Errorf("%s on %s: %w", name, sys.Name(), err)
	}
	return rs, err
}

// result fills a Result from a measured window.
func (w window) result(variant string) Result {
	r := Result{
		Variant: variant,
		Ops:     w.ops,
		Seconds: w.elapsed.Seconds(),
		P50:     int64(w.lat.Quantile(0.50)),
		P99:     int64(w.lat.Quantile(0.99)),
		P999:    int64(w.lat.Quantile(0.999)),
	}
	if w.elapsed > 0 {
		r.OpsPerSec = float64(w.ops) / w.elapsed.Seconds()
	}
	if w.ops > 0 {
		r.AllocsPerOp = float64(w.mallocs) / float64(w.ops)
		r.BytesPerOp = float64(w.bytes) / float64(w.ops)
		r.CPUPerOp = float64(w.cpu) / float64(w.ops)
	}
	return r
}

// callScenario sets a Caller up and measures it once per entry of
// callers: with one caller the variant is sequential, with more it is
// named for their number. width > 0 also reports width calls per op.
func callScenario(ctx context.Context, setup func(context.Context) (Caller, error), cfg Config, callers []int, width int) (rs []Result, err error) {
	c, err := setup(ctx)
	if err != nil {
		return nil, err
	}
	defer closeInto(c, &err)
	for _, n := range callers {
		win, err := warmThenMeasure(ctx, cfg, n, calls(c), nil)
		if err != nil {
			return rs, err
		}
		variant := Sequential
		if n > 1 {
			variant = concurrentVariant(n)
		}
		r := win.result(variant)
		if width > 0 {
			r.Extra = map[string]float64{ExtraCallsPerSec: r.OpsPerSec * float64(width)}
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// closeInto closes c and keeps its error in *err unless *err is set.
func closeInto(c io.Closer, err *error) {
	if cerr := c.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("close: %w", cerr)
	}
}

// settleTimeout bounds the wait for sent messages to be handled.
const settleTimeout = time.Minute

// runTell measures one-way messages: Senders goroutines send as fast as
// Send returns, and the clock stops when the grains have handled every
// message sent. The latency is Send's: how long a sender waits.
func runTell(ctx context.Context, sys System, cfg Config) (rs []Result, err error) {
	t, err := sys.Tell(ctx, cfg.TellGrains)
	if err != nil {
		return nil, err
	}
	defer closeInto(t, &err)
	var sent atomic.Int64
	w := func(ctx context.Context, i int, rec *Recorder, stop *atomic.Bool) (int64, error) {
		var n int64
		prev := time.Now()
		for !stop.Load() {
			if err := t.Send(ctx, i, n); err != nil {
				return n, err
			}
			sent.Add(1)
			now := time.Now()
			rec.Record(now.Sub(prev))
			prev = now
			n++
		}
		return n, nil
	}
	settle := func(ctx context.Context) error {
		return waitUntil(ctx, settleTimeout, func() bool { return t.Handled() >= sent.Load() },
			func() string {
				return fmt.Sprintf("%d of %d messages handled", t.Handled(), sent.Load())
			})
	}
	win, err := warmThenMeasure(ctx, cfg, cfg.Senders, w, settle)
	if err != nil {
		return nil, err
	}
	return []Result{win.result(concurrentVariant(cfg.Senders))}, nil
}

// waitUntil polls cond until it holds, ctx ends or limit passes; the
// error then says what state was reached.
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool, state func() string) error {
	deadline := time.Now().Add(limit)
	for backoff := time.Microsecond; !cond(); backoff = min(2*backoff, time.Millisecond) {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %s", ctx.Err(), state())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %v: %s", limit, state())
		}
		time.Sleep(backoff)
	}
	return nil
}

// runStream measures a stream's deliveries, end to end. One publisher
// publishes as fast as its publishes are acknowledged, but never more
// than StreamWindow events ahead of the slowest subscriber (then it waits
// until that one is half a window behind); the clock stops when every
// subscriber has handled every event published. An op is one event
// handled by one subscriber: events times subscribers. The latency is
// the publisher's, from one publish's return to the next's, so the waits
// for the window count in it.
func runStream(ctx context.Context, sys System, cfg Config, subscribers int, remote bool) (rs []Result, err error) {
	tally := NewTally(subscribers)
	p, err := sys.Stream(ctx, tally, remote)
	if err != nil {
		return nil, err
	}
	defer closeInto(p, &err)
	// published is how many events the publisher published, over the
	// warm-up and the measurement alike, as the subscribers' counts run
	// on from one to the other.
	var published atomic.Int64
	window := int64(cfg.StreamWindow)
	w := func(ctx context.Context, _ int, rec *Recorder, stop *atomic.Bool) (int64, error) {
		next := published.Load()
		first := next
		deliveries := func() int64 { return (next - first) * int64(subscribers) }
		least := tally.Least()
		prev := time.Now()
		for !stop.Load() {
			if next-least >= window {
				var err error
				if least, err = tally.await(ctx, next-window/2, settleTimeout); err != nil {
					return deliveries(), err
				}
			}
			if err := p.Publish(ctx, next); err != nil {
				return deliveries(), err
			}
			next++
			published.Store(next)
			now := time.Now()
			rec.Record(now.Sub(prev))
			prev = now
		}
		return deliveries(), nil
	}
	settle := func(ctx context.Context) error {
		_, err := tally.await(ctx, published.Load(), settleTimeout)
		return err
	}
	win, err := warmThenMeasure(ctx, cfg, 1, w, settle)
	if err != nil {
		return nil, err
	}
	r := win.result(subscribersVariant(subscribers))
	r.Extra = map[string]float64{ExtraEventsPerSec: r.OpsPerSec / float64(subscribers)}
	return []Result{r}, nil
}

// loopBatch is how many calls one Loop makes: enough that the outside
// call that starts the loop is lost in it.
const loopBatch = 1000

// runGrainToGrain measures calls one grain makes to another, each timed
// inside the calling grain.
func runGrainToGrain(ctx context.Context, sys System, cfg Config) (rs []Result, err error) {
	l, err := sys.GrainToGrain(ctx)
	if err != nil {
		return nil, err
	}
	defer closeInto(l, &err)
	w := func(ctx context.Context, _ int, rec *Recorder, stop *atomic.Bool) (int64, error) {
		var n int64
		for !stop.Load() {
			if err := l.Loop(ctx, loopBatch, rec); err != nil {
				return n, err
			}
			n += loopBatch
		}
		return n, nil
	}
	win, err := warmThenMeasure(ctx, cfg, 1, w, nil)
	if err != nil {
		return nil, err
	}
	return []Result{win.result(Sequential)}, nil
}

// runActivations creates up to cfg.Activations grains from
// ActivationCallers goroutines, each call to a grain never called before,
// and then weighs the heap they keep. A system slower than
// ActivationLimit allows stops short and is weighed at the count it
// reached.
func runActivations(ctx context.Context, sys System, cfg Config) (rs []Result, err error) {
	c, err := sys.Activations(ctx)
	if err != nil {
		return nil, err
	}
	defer closeInto(c, &err)
	before := liveMemory()
	fresh := &freshKeys{c: c, limit: int64(cfg.Activations)}
	win, err := measure(ctx, cfg.ActivationCallers, cfg.ActivationLimit, calls(fresh), nil)
	if err != nil {
		return nil, err
	}
	heap := int64(liveMemory()) - int64(before)
	r := win.result(concurrentVariant(cfg.ActivationCallers))
	r.Extra = map[string]float64{
		ExtraActivations: float64(win.ops),
		ExtraHeapBytes:   float64(heap),
	}
	if win.ops > 0 {
		r.Extra[ExtraBytesPerActivation] = float64(heap) / float64(win.ops)
	}
	return []Result{r}, nil
}

// errExhausted ends a caller's calls without an error: freshKeys has no
// key left to give.
var errExhausted = errors.New("scenario: every key was called")

// freshKeys calls c with each key from 0 to limit-1 once, whichever
// caller asks: every call is to a grain never called before.
type freshKeys struct {
	c     Caller
	next  atomic.Int64
	limit int64
}

func (f *freshKeys) Call(ctx context.Context, _ int) error {
	k := f.next.Add(1) - 1
	if k >= f.limit {
		return errExhausted
	}
	return f.c.Call(ctx, int(k))
}

func (f *freshKeys) Close() error { return nil }

// runTimers measures first an idle node's CPU, then the same node with
// cfg.Timers timers: their CPU above idle and how late their ticks run,
// over TimerWindow once every timer has ticked.
func runTimers(ctx context.Context, sys System, cfg Config) ([]Result, error) {
	idle, err := idleCPU(ctx, sys, cfg.TimerWindow)
	if err != nil {
		return nil, err
	}
	late := NewSyncRecorder()
	t, err := sys.Timers(ctx, cfg.Timers, cfg.TimerPeriod, late)
	if err != nil {
		return nil, err
	}
	// Each timer's first tick comes a period after it started; wait that
	// out, and the warm-up, so the window sees ticks in their stride.
	if err := grain.Sleep(ctx, cfg.TimerPeriod+cfg.Warmup); err != nil {
		_ = t.Close()
		return nil, err
	}
	late.take()
	u0, t0 := snapshot(), time.Now()
	err = grain.Sleep(ctx, cfg.TimerWindow)
	lat, elapsed := late.take(), time.Since(t0)
	u1 := snapshot()
	if cerr := t.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	win := window{ops: lat.Count(), elapsed: elapsed, lat: lat}
	win.mallocs, win.bytes, win.cpu = u1.diff(u0)
	r := win.result(strconv.Itoa(cfg.Timers) + " timers, period " + cfg.TimerPeriod.String())
	busy := percentOfCore(win.cpu, elapsed)
	r.Extra = map[string]float64{
		ExtraTimers:         float64(cfg.Timers),
		ExtraCPUPercent:     busy - idle,
		ExtraIdleCPUPercent: idle,
	}
	return []Result{r}, nil
}

// idleCPU is the CPU, in percent of one core, that a node sys.Local
// starts uses over d while nothing calls it.
func idleCPU(ctx context.Context, sys System, d time.Duration) (pct float64, err error) {
	c, err := sys.Local(ctx)
	if err != nil {
		return 0, err
	}
	defer closeInto(c, &err)
	if err := c.Call(ctx, 0); err != nil { // the node works
		return 0, err
	}
	u0, t0 := snapshot(), time.Now()
	if err := grain.Sleep(ctx, d); err != nil {
		return 0, err
	}
	_, _, cpu := snapshot().diff(u0)
	return percentOfCore(cpu, time.Since(t0)), nil
}

func percentOfCore(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / wall.Seconds()
}
