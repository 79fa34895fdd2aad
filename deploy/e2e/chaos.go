package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"
)

// silo is one silo of the cluster under test.
type silo struct {
	Service   string // the compose service, e.g. "silo-a"
	Container string // its container's ID
	Admin     string // host:port of its admin server, published on the host
	Gateway   string // host:port of its gateway, published on the host
}

// phase is a window of the run that begins with one fault (or none, for
// the steady state the run begins with) and lasts until the next.
type phase struct {
	Name   string // e.g. "kill silo-b"
	Action string // the command that injected the fault
	// Start and End are the seconds of the timeline the phase spans,
	// [Start, End).
	Start, End int
	Stats      windowStats
}

// chaosConfig times the faults.
type chaosConfig struct {
	// Hold is how long a fault is held before it is undone (a killed
	// silo started again, a partition healed), and how long the steady
	// state is watched first.
	Hold time.Duration
	// Settle is how long the run watches the cluster after each silo is
	// back and ready, before the next fault.
	Settle time.Duration
	// Grace is docker restart's -t: how long a silo has to stop after
	// SIGTERM before SIGKILL. It matches the compose file's
	// stop_grace_period.
	Grace time.Duration
	// ReadyTimeout bounds the wait for a silo's /readyz after it starts.
	ReadyTimeout time.Duration
	// ReadyPoll is how often /readyz is asked meanwhile.
	ReadyPoll time.Duration
}

// containers are the docker operations the faults need; dockerCLI
// implements them.
type containers interface {
	kill(ctx context.Context, id string) error
	start(ctx context.Context, id string) error
	restart(ctx context.Context, id string, grace time.Duration) error
	disconnect(ctx context.Context, network, id string) error
	connect(ctx context.Context, network, id string, ep endpoint) error
	inspect(ctx context.Context, id string) (containerState, error)
}

// chaos injects the faults in turn and marks each on the timeline: a
// silo killed and started again, a silo partitioned and healed, and a
// rolling restart of every silo.
type chaos struct {
	cfg     chaosConfig
	d       containers
	silos   []silo
	network string // the compose network the silos share
	// ready asks a silo's /readyz once: nil when it answers 200.
	ready func(ctx context.Context, s silo) error
	clock clockwork.Clock
	tl    *timeline
	logf  func(format string, args ...any)

	phases []phase
}

// run injects every fault, in order. On error the phases so far stay
// recorded, the last one ending now.
func (c *chaos) run(ctx context.Context) error {
	if len(c.silos) < 3 {
		return fmt.Errorf("chaos: %d silos, want 3", len(c.silos))
	}
	defer c.finish()
	c.mark(ctx, "steady state", "none")
	if err := c.wait(ctx, c.cfg.Hold); err != nil {
		return err
	}

	// A silo dies without a goodbye, and comes back.
	victim := c.silos[1]
	c.mark(ctx, "kill "+victim.Service, "docker kill")
	if err := c.d.kill(ctx, victim.Container); err != nil {
		return err
	}
	if err := c.wait(ctx, c.cfg.Hold); err != nil {
		return err
	}
	c.mark(ctx, "start "+victim.Service, "docker start")
	if err := c.d.start(ctx, victim.Container); err != nil {
		return err
	}
	if err := c.waitReady(ctx, victim); err != nil {
		return err
	}
	if err := c.wait(ctx, c.cfg.Settle); err != nil {
		return err
	}

	// A silo is cut off from the others (and from the host), and the cut
	// heals.
	cut := c.silos[2]
	before, err := c.d.inspect(ctx, cut.Container)
	if err != nil {
		return err
	}
	c.mark(ctx, "partition "+cut.Service, "docker network disconnect")
	if err := c.d.disconnect(ctx, c.network, cut.Container); err != nil {
		return err
	}
	if err := c.wait(ctx, c.cfg.Hold); err != nil {
		return err
	}
	c.mark(ctx, "heal "+cut.Service, "docker network connect")
	if err := c.d.connect(ctx, c.network, cut.Container, before.Networks[c.network]); err != nil {
		return err
	}
	after, err := c.d.inspect(ctx, cut.Container)
	if err != nil {
		return err
	}
	// The silo still advertises its old address, and the others know it
	// by its service name: an address or a name that changed would leave
	// it unreachable, a fault of the test, not of the cluster. connect
	// asked for both back.
	was, is := before.Networks[c.network], after.Networks[c.network]
	if was.IP != is.IP {
		return fmt.Errorf("chaos: %s came back on %s with address %q, not %q: the network handed its address to another container", cut.Service, c.network, is.IP, was.IP)
	}
	if !slices.Contains(is.Aliases, cut.Service) {
		return fmt.Errorf("chaos: %s came back on %s under the names %q, without its service name", cut.Service, c.network, is.Aliases)
	}
	if err := c.waitReady(ctx, cut); err != nil {
		return err
	}
	if err := c.wait(ctx, c.cfg.Settle); err != nil {
		return err
	}

	// Every silo in turn stops gracefully and starts again.
	for _, s := range c.silos {
		c.mark(ctx, "restart "+s.Service, fmt.Sprintf("docker restart -t %d", int(c.cfg.Grace.Seconds())))
		if err := c.d.restart(ctx, s.Container, c.cfg.Grace); err != nil {
			return err
		}
		if err := c.waitReady(ctx, s); err != nil {
			return err
		}
		if err := c.wait(ctx, c.cfg.Settle); err != nil {
			return err
		}
	}
	return nil
}

// mark begins a phase at the start of the timeline's next second, waiting
// for it, and ends the one before there.
func (c *chaos) mark(ctx context.Context, name, action string) {
	now := c.clock.Now()
	i := c.tl.index(now) + 1
	if d := c.tl.at(i).Sub(now); d > 0 {
		select {
		case <-ctx.Done():
		case <-c.clock.After(d):
		}
	}
	c.endLast(i)
	c.phases = append(c.phases, phase{Name: name, Action: action, Start: i, End: -1})
	c.logf("%s (%s)", name, action)
}

// finish ends the last phase at the start of the current second: the
// second in progress is not over, so it is not counted.
func (c *chaos) finish() { c.endLast(c.tl.index(c.clock.Now())) }

func (c *chaos) endLast(i int) {
	if n := len(c.phases); n > 0 && c.phases[n-1].End < 0 {
		c.phases[n-1].End = max(i, c.phases[n-1].Start)
	}
}

// wait waits for d, or until ctx ends.
func (c *chaos) wait(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.clock.After(d):
		return nil
	}
}

// waitReady asks s's /readyz until it answers 200, for at most
// ReadyTimeout.
func (c *chaos) waitReady(ctx context.Context, s silo) error {
	deadline := c.clock.Now().Add(c.cfg.ReadyTimeout)
	for {
		err := c.ready(ctx, s)
		if err == nil {
			return nil
		}
		if !c.clock.Now().Before(deadline) {
			return fmt.Errorf("chaos: %s is not ready %v after it started: %w", s.Service, c.cfg.ReadyTimeout, err)
		}
		if err := c.wait(ctx, c.cfg.ReadyPoll); err != nil {
			return err
		}
	}
}
