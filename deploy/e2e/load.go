package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// adder adds delta to the counter key and returns the reply: the
// Counter.Add of the cluster under test, or a fake in tests.
type adder func(ctx context.Context, key string, delta int64) (addReply, error)

// loadConfig shapes the load.
type loadConfig struct {
	// Workers call at once, each one call at a time. Default 8.
	Workers int
	// Counters is how many counters the workers share; each worker walks
	// all of them from its own offset, so a counter is called by several
	// workers, sometimes at once. Default 64.
	Counters int
	// Prefix starts every counter's key, so that a run never meets the
	// counts of an earlier one in the shared database.
	Prefix string
	// CallTimeout bounds each call: one stuck on a silo that is gone
	// counts as failed rather than stall its worker. Default 2s.
	CallTimeout time.Duration
	// Backoff is how long a worker waits after a failed call, so that a
	// refusal does not spin. Default 50ms.
	Backoff time.Duration
	// Pace is the least time from the start of a worker's call to the
	// start of its next, which holds the load to Workers/Pace calls a
	// second at most; 0 sends each call as soon as the last returns. The
	// chaos load runs unpaced; the modest load after the overload soak
	// is paced, so that it stays well below what the cluster serves.
	Pace time.Duration
}

func (c *loadConfig) setDefaults() {
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Counters == 0 {
		c.Counters = 64
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 2 * time.Second
	}
	if c.Backoff == 0 {
		c.Backoff = 50 * time.Millisecond
	}
}

func (c *loadConfig) validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("load: workers %d: want at least 1", c.Workers)
	case c.Counters < 1:
		return fmt.Errorf("load: counters %d: want at least 1", c.Counters)
	case c.Prefix == "":
		return fmt.Errorf("load: the counter key prefix is empty")
	case c.CallTimeout <= 0 || c.Backoff < 0:
		return fmt.Errorf("load: call timeout %v and backoff %v must be positive", c.CallTimeout, c.Backoff)
	case c.Pace < 0 || c.Pace >= time.Second:
		// The recovery rule wants a call of every worker in every second.
		return fmt.Errorf("load: pace %v must be at least 0 and under 1s", c.Pace)
	}
	return nil
}

// keys returns the counters' keys.
func (c *loadConfig) keys() []string {
	keys := make([]string, c.Counters)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%03d", c.Prefix, i)
	}
	return keys
}

// generator drives the counters: its workers add 1 to them in a loop,
// and the ledger and timeline record every call.
type generator struct {
	cfg    loadConfig
	add    adder
	clock  clockwork.Clock
	keys   []string
	ledger *ledger
	tl     *timeline

	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// newGenerator returns a generator whose timeline starts now.
func newGenerator(cfg loadConfig, add adder, clock clockwork.Clock) (*generator, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	keys := cfg.keys()
	return &generator{
		cfg:    cfg,
		add:    add,
		clock:  clock,
		keys:   keys,
		ledger: newLedger(keys),
		tl:     newTimeline(clock.Now(), cfg.Workers),
	}, nil
}

// start starts the workers; stop ends them.
func (g *generator) start(ctx context.Context) {
	ctx, g.cancel = context.WithCancel(ctx)
	for w := range g.cfg.Workers {
		g.wg.Go(func() { g.work(ctx, w) })
	}
}

// stop ends the workers and waits for them. Idempotent.
func (g *generator) stop() {
	g.stopOnce.Do(func() {
		if g.cancel != nil {
			g.cancel()
		}
		g.wg.Wait()
	})
}

// work is worker w's loop, until ctx ends: it walks the counters from its
// own offset, adding 1 to each.
func (g *generator) work(ctx context.Context, w int) {
	n := len(g.keys)
	for i := w * n / g.cfg.Workers; ctx.Err() == nil; i = (i + 1) % n {
		key := g.keys[i]
		began := g.clock.Now()
		tk := g.ledger.send(key, began)
		callCtx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
		r, err := g.add(callCtx, key, 1)
		cancel()
		now := g.clock.Now()
		if err != nil {
			if ctx.Err() != nil {
				return // stopping: not the cluster's failure
			}
			g.tl.record(w, now, err, verdict{})
			select {
			case <-ctx.Done():
				return
			case <-g.clock.After(g.cfg.Backoff):
			}
			continue
		}
		g.tl.record(w, now, nil, g.ledger.ack(tk, r, now))
		if wait := began.Add(g.cfg.Pace).Sub(now); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-g.clock.After(wait):
			}
		}
	}
}

// readAll reads every counter's count with an Add of 0, trying each
// until it answers or attempts run out, and checks the counts against
// the ledger. Call it after stop.
func (g *generator) readAll(ctx context.Context, attempts int) finalCheck {
	counts := map[string]int64{}
	errs := map[string]error{}
	for _, key := range g.keys {
		for a := 0; a < attempts && ctx.Err() == nil; a++ {
			callCtx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
			r, err := g.add(callCtx, key, 0)
			cancel()
			if err == nil {
				counts[key] = r.Value
				delete(errs, key)
				break
			}
			errs[key] = err
			select {
			case <-ctx.Done():
			case <-g.clock.After(g.cfg.Backoff):
			}
		}
		if _, ok := counts[key]; !ok && errs[key] == nil {
			errs[key] = ctx.Err()
		}
	}
	return g.ledger.final(counts, errs)
}
