// Package scenario is Granary's benchmark suite: workloads named after
// Orleans' benchmark scenarios, run the same way on any System (Granary,
// a peer framework, or a plain Go baseline) so that their figures can be
// set side by side.
//
// A System only sets a scenario up: it starts its nodes and grains and
// hands back something to call. The timing, the latency histograms, the
// allocation counts and the CPU accounting all happen here, identically
// for every System.
package scenario

import (
	"context"
	"errors"
	"io"
	"time"
)

// The scenarios, in the order Run lists them.
const (
	// Ping is request/response from one caller to one grain on the same
	// node, one call at a time.
	Ping = "ping"
	// ConcurrentPing is request/response from many callers at once, each
	// calling its own grain on the same node.
	ConcurrentPing = "concurrent-ping"
	// Tell is one-way messages from a few senders to a set of grains,
	// counted when the grains have handled them.
	Tell = "tell"
	// Fanout is a grain that calls FanoutWidth grains at once and awaits
	// every reply; an op is one whole fan-out.
	Fanout = "fanout"
	// GrainToGrain is one grain calling another on the same node, one call
	// at a time.
	GrainToGrain = "grain-to-grain"
	// CrossSiloPing is request/response from one node to grains on
	// another, over loopback: one caller, then many.
	CrossSiloPing = "cross-silo-ping"
	// ClientPing is request/response from an external client through a
	// node's gateway, over loopback: one caller, then many.
	ClientPing = "client-ping"
	// StreamLocal is one publisher publishing to one stream with one
	// subscriber grain, all on one node; an op is an event handled by the
	// subscriber.
	StreamLocal = "stream-local"
	// StreamCrossSilo is StreamLocal over two nodes on loopback: the
	// publisher and the stream on one, the subscriber on the other.
	StreamCrossSilo = "stream-cross-silo"
	// StreamFanout is one publisher publishing to one stream with
	// StreamSubscribers subscriber grains, all on one node; an op is one
	// event handled by one subscriber.
	StreamFanout = "stream-fanout"
	// Activations is the rate at which calls to new grains create them,
	// and the memory an idle activation keeps.
	Activations = "activations"
	// Timers is many grains each running a periodic timer: the CPU they
	// cost and how late their ticks run.
	Timers = "timers"
)

// Names lists every scenario in the order they run.
func Names() []string {
	// Activations runs last: it leaves the most memory behind, and some
	// systems free it only long after they are closed.
	return []string{Ping, ConcurrentPing, Tell, Fanout, GrainToGrain, CrossSiloPing, ClientPing,
		StreamLocal, StreamCrossSilo, StreamFanout, Timers, Activations}
}

// StreamNames lists the stream scenarios, in the order they run: the
// figures of docs/benchmarks.md's section on streams.
func StreamNames() []string { return []string{StreamLocal, StreamCrossSilo, StreamFanout} }

// ErrUnsupported is what a System returns for a scenario it has no
// feature for (a framework without a gateway for external clients, say).
var ErrUnsupported = errors.New("scenario: not supported by this system")

// A System is one framework under test. Each method sets up one kind of
// workload and returns it running; its Close undoes the setup. A method
// returns ErrUnsupported when the framework lacks the feature.
type System interface {
	// Name names the system in results: "granary", "protoactor", ...
	Name() string

	// Local starts one node. Call(ctx, i) makes one request/response call
	// to grain i on it; i is the caller's index, so concurrent callers
	// each call their own grain. (Ping, ConcurrentPing.)
	Local(ctx context.Context) (Caller, error)

	// Remote starts two nodes, the grains on one and the callers on the
	// other, and waits until they see each other. Call(ctx, i) calls grain
	// i across the nodes. (CrossSiloPing.)
	Remote(ctx context.Context) (Caller, error)

	// Gateway starts one node with a gateway and an external client of
	// it. Call(ctx, i) calls grain i through the client. (ClientPing.)
	Gateway(ctx context.Context) (Caller, error)

	// Tell starts one node with grains grains that count the one-way
	// messages they handle. (Tell.)
	Tell(ctx context.Context, grains int) (Teller, error)

	// Fanout starts one node. Call(ctx, i) asks grain i to call width
	// other grains at once and returns when all have answered. (Fanout.)
	Fanout(ctx context.Context, width int) (Caller, error)

	// GrainToGrain starts one node with a grain that calls another grain
	// on request. (GrainToGrain.)
	GrainToGrain(ctx context.Context) (Looper, error)

	// Activations starts one node. Call(ctx, i) calls grain i, which has
	// never been called before, so the call creates it; the activations
	// stay in memory until Close. (Activations.)
	Activations(ctx context.Context) (Caller, error)

	// Stream starts a stream, its publisher, and tally.Subscribers()
	// grains subscribed to it, and returns once every subscription is in
	// place. Subscriber i is the grain named tally.Name(i), and counts
	// each event it handles into tally.Counter of its name. With remote,
	// two nodes: the publisher and the stream on one (the stream placed
	// beside its publisher, as the system places it by itself or, when it
	// places by hash alone, named so that it lands there), the subscribers
	// on the other, so that each event crosses between them once.
	// (StreamLocal, StreamCrossSilo, StreamFanout.)
	Stream(ctx context.Context, tally *Tally, remote bool) (Publisher, error)

	// Timers starts one node and n grains on it, each with a timer of the
	// given period, whose first tick is due one period after it starts.
	// Every tick records its lateness in late: how long after it was due
	// it began. Timers returns when every timer is running. (Timers.)
	Timers(ctx context.Context, n int, period time.Duration, late *SyncRecorder) (io.Closer, error)
}

// A Caller makes calls on a workload a System set up.
type Caller interface {
	// Call makes one call as caller i and returns when its reply has come.
	// Calls with different i may run concurrently; calls with the same i
	// never do.
	Call(ctx context.Context, i int) error
	io.Closer
}

// A Teller sends one-way messages on a workload a System set up.
type Teller interface {
	// Send sends one one-way message as sender i, to the grain of that
	// sender's n-th message. It returns when the message is on its way.
	// Sends with different i may run concurrently.
	Send(ctx context.Context, i int, n int64) error
	// Handled is how many messages the grains have handled so far.
	Handled() int64
	io.Closer
}

// A Looper runs a loop inside the system under test: for GrainToGrain,
// one grain calling another over and over.
type Looper interface {
	// Loop has the calling grain make n calls to the other grain, one at
	// a time, recording each call's latency in rec, and returns when they
	// are done.
	Loop(ctx context.Context, n int, rec *Recorder) error
	io.Closer
}

// A Publisher publishes to the stream of a workload a System set up. It
// has one caller at a time.
type Publisher interface {
	// Publish publishes event n, the publisher's n-th (from 0), with the
	// system's own publish call, and returns when the system acknowledged
	// it: the stream has it, in its order, for every subscriber.
	Publish(ctx context.Context, n int64) error
	io.Closer
}

// Config sets how long and how hard the scenarios run.
type Config struct {
	// Duration is how long each measurement runs.
	Duration time.Duration
	// Warmup is how long a workload runs, unmeasured, before it is
	// measured.
	Warmup time.Duration
	// Callers is how many callers the concurrent variants run.
	Callers int
	// Senders is how many goroutines send one-way messages in Tell.
	Senders int
	// TellGrains is how many grains receive them.
	TellGrains int
	// FanoutWidth is how many grains a fan-out calls.
	FanoutWidth int
	// Activations is how many grains the Activations scenario creates.
	Activations int
	// ActivationCallers is how many goroutines create them.
	ActivationCallers int
	// ActivationLimit bounds the time spent creating them: a slow system
	// stops short and is measured at the count it reached.
	ActivationLimit time.Duration
	// StreamSubscribers is how many grains subscribe to StreamFanout's
	// stream.
	StreamSubscribers int
	// StreamWindow bounds the events a stream's publisher is ahead of its
	// slowest subscriber: a publisher that many events ahead waits. A
	// memory stream keeps what waits for a subscriber in memory, bounded
	// (Granary drops past its buffer, 1024 events a subscriber by default,
	// which holds a delivery in flight too) or not (a mailbox), so a
	// publisher of the suite paces itself, as one of a real memory stream
	// must.
	StreamWindow int
	// Timers is how many timers the Timers scenario runs, and
	// TimerPeriod their period.
	Timers      int
	TimerPeriod time.Duration
	// TimerWindow is how long the Timers scenario measures CPU and
	// lateness, after every timer has ticked once.
	TimerWindow time.Duration
}

// DefaultConfig is the configuration `make bench` runs.
func DefaultConfig() Config {
	return Config{
		Duration:          2 * time.Second,
		Warmup:            300 * time.Millisecond,
		Callers:           256,
		Senders:           4,
		TellGrains:        64,
		FanoutWidth:       100,
		Activations:       1_000_000,
		ActivationCallers: 64,
		ActivationLimit:   20 * time.Second,
		StreamSubscribers: 100,
		StreamWindow:      512,
		Timers:            100_000,
		TimerPeriod:       time.Second,
		TimerWindow:       5 * time.Second,
	}
}

// Validate reports the first field of c that cannot be run, by name.
func (c Config) Validate() error {
	checks := []struct {
		name string
		ok   bool
	}{
		{"Duration", c.Duration > 0},
		{"Warmup", c.Warmup >= 0},
		{"Callers", c.Callers > 0},
		{"Senders", c.Senders > 0},
		{"TellGrains", c.TellGrains > 0},
		{"FanoutWidth", c.FanoutWidth > 0},
		{"Activations", c.Activations > 0},
		{"ActivationCallers", c.ActivationCallers > 0},
		{"ActivationLimit", c.ActivationLimit > 0},
		{"StreamSubscribers", c.StreamSubscribers > 0},
		{"StreamWindow", c.StreamWindow > 0},
		{"Timers", c.Timers > 0},
		{"TimerPeriod", c.TimerPeriod > 0},
		{"TimerWindow", c.TimerWindow > 0},
	}
	for _, ch := range checks {
		if !ch.ok {
			return errors.New("scenario: config field " + ch.name + " is out of range: it must be positive (Warmup may be zero)")
		}
	}
	return nil
}

// SmokeConfig is a configuration small enough for a System's tests under
// the race detector: every scenario runs in well under a second.
func SmokeConfig() Config {
	return Config{
		Duration:          50 * time.Millisecond,
		Warmup:            10 * time.Millisecond,
		Callers:           8,
		Senders:           2,
		TellGrains:        4,
		FanoutWidth:       10,
		Activations:       2000,
		ActivationCallers: 4,
		ActivationLimit:   30 * time.Second,
		StreamSubscribers: 10,
		StreamWindow:      100,
		Timers:            200,
		TimerPeriod:       100 * time.Millisecond,
		TimerWindow:       300 * time.Millisecond,
	}
}
