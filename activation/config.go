package activation

import (
	"fmt"
	"runtime"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Config configures a Pool. Start from DefaultConfig and change what you
// need; New rejects a Config whose fields are out of range and names the
// field.
type Config struct {
	// Processors is the number of processors: the most grain code that runs
	// at once, outside blocking regions. Default GOMAXPROCS: more would only
	// make the Go runtime time-slice them; fewer leaves cores idle.
	Processors int

	// QuantumTurns is how many turns a group runs before it goes to the back
	// of the line. Default 64: smaller quanta cost throughput, as groups go
	// back to the line more often; larger ones gain nothing; and 64 keeps a
	// hog's delay of others to 64 short turns. See BenchmarkTuneQuantumTurns
	// and docs/benchmarks.md#tuning-measurements.
	QuantumTurns int

	// QuantumTime ends a group's run after this long even when it has run
	// fewer than QuantumTurns turns; the monitor enforces it, so it takes
	// effect at MonitorInterval granularity, between turns. Default 10 ms,
	// the Go runtime's own preemption slice.
	QuantumTime time.Duration

	// SpinRounds is how many times an idle worker looks for work (inbox,
	// global queue, then stealing) and yields before it parks. Default 4:
	// a worker that spins a little before it parks takes the next turn of a
	// round trip without being woken, and more rounds gain nothing. See
	// BenchmarkTuneSpinRounds and docs/benchmarks.md#tuning-measurements.
	SpinRounds int

	// HandOnAfter is how long a turn may hold a processor without finishing
	// or blocking before the monitor gives that processor to another worker,
	// so a turn that computes for long does not stall the groups queued
	// behind it. Default 50 ms.
	HandOnAfter time.Duration

	// LongTurnWarning is how long a turn may run before the monitor logs a
	// warning naming its group and turn. Default 1 s, as in Orleans.
	LongTurnWarning time.Duration

	// MonitorInterval is how often the monitor samples the processors. It
	// bounds the precision of QuantumTime, HandOnAfter and LongTurnWarning.
	// Default 5 ms.
	MonitorInterval time.Duration

	// InlineDepth is how many turns deep a worker may run a turn of an idle
	// group inline, on the caller's goroutine, from Exec.TryRun. 0 turns
	// inline execution off, so every wait goes through the blocking
	// hand-off. Default 8.
	InlineDepth int

	// MaxQueuedTurns is the flow-control mark for Group.EnqueueWait: while a
	// group holds this many application turns or more, EnqueueWait makes
	// its caller wait until the group has drained to a quarter of it. It
	// does not bound Enqueue, whose queues are unbounded. 0 turns flow
	// control off. Default 1,024: a producer outside the pool that never
	// waits shares the cores with the workers that drain its queue, and a
	// queue of hundreds of thousands of turns falls out of the caches; a
	// mark much lower makes feeders wait too often, and 1,024 leaves a
	// grain room for a burst before its feeder waits. See
	// BenchmarkTuneMaxQueuedTurns and docs/benchmarks.md#tuning-measurements.
	MaxQueuedTurns int

	// Logger receives warnings about long turns. Default: a no-op logger.
	Logger *zap.Logger

	// Clock drives the monitor. Tests pass a fake clock and advance it.
	// Default: the real clock.
	Clock clockwork.Clock

	// CloseTimeout bounds how long Close, and a Stop whose context ended,
	// wait for turns that are still running. The turns still running then
	// are abandoned: each is logged at error level with its group, turn,
	// age and goroutine stack, and listed by Abandoned; its goroutine is
	// left to end on its own, and the pool discards what the turn does
	// afterwards. 0, the default, waits for them however long they take.
	CloseTimeout time.Duration
}

// DefaultConfig returns the configuration described on each field.
func DefaultConfig() Config {
	return Config{
		Processors:      runtime.GOMAXPROCS(0),
		QuantumTurns:    64,
		QuantumTime:     10 * time.Millisecond,
		SpinRounds:      4,
		HandOnAfter:     50 * time.Millisecond,
		LongTurnWarning: time.Second,
		MonitorInterval: 5 * time.Millisecond,
		InlineDepth:     8,
		MaxQueuedTurns:  1024,
		Logger:          zap.NewNop(),
		Clock:           clockwork.NewRealClock(),
	}
}

// maxInlineDepth bounds Config.InlineDepth: the held-group stack of an Exec
// is a fixed array of this size, so inline calls never allocate.
const maxInlineDepth = 32

// maxProcessors bounds Config.Processors.
const maxProcessors = 1024

func (c *Config) validate() error {
	switch {
	case c.Processors < 1 || c.Processors > maxProcessors:
		return fmt.Errorf("activation: Config.Processors is %d; want 1 to %d", c.Processors, maxProcessors)
	case c.QuantumTurns < 1:
		return fmt.Errorf("activation: Config.QuantumTurns is %d; want at least 1", c.QuantumTurns)
	case c.QuantumTime <= 0:
		return fmt.Errorf("activation: Config.QuantumTime is %v; want a positive duration", c.QuantumTime)
	case c.SpinRounds < 0:
		return fmt.Errorf("activation: Config.SpinRounds is %d; want 0 or more", c.SpinRounds)
	case c.HandOnAfter <= 0:
		return fmt.Errorf("activation: Config.HandOnAfter is %v; want a positive duration", c.HandOnAfter)
	case c.LongTurnWarning <= 0:
		return fmt.Errorf("activation: Config.LongTurnWarning is %v; want a positive duration", c.LongTurnWarning)
	case c.MonitorInterval <= 0:
		return fmt.Errorf("activation: Config.MonitorInterval is %v; want a positive duration", c.MonitorInterval)
	case c.InlineDepth < 0 || c.InlineDepth > maxInlineDepth:
		return fmt.Errorf("activation: Config.InlineDepth is %d; want 0 to %d", c.InlineDepth, maxInlineDepth)
	case c.MaxQueuedTurns < 0:
		return fmt.Errorf("activation: Config.MaxQueuedTurns is %d; want 0 (no flow control) or more", c.MaxQueuedTurns)
	case c.Logger == nil:
		return fmt.Errorf("activation: Config.Logger is nil; use zap.NewNop() for no logging")
	case c.CloseTimeout < 0:
		return fmt.Errorf("activation: Config.CloseTimeout is %v; want 0 (wait for every turn) or a positive duration", c.CloseTimeout)
	case c.Clock == nil:
		return fmt.Errorf("activation: Config.Clock is nil; use clockwork.NewRealClock()")
	}
	return nil
}
