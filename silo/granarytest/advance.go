package granarytest

import (
	"fmt"
	"strings"
	"time"
)

// settlePoll is how often settle looks at the cluster while it waits.
const settlePoll = 200 * time.Microsecond

// quietFor is how long the cluster must look settled, with no envelope
// sent or received between silos and nothing changed on the clock, for
// settle to take it as settled: what crosses between silos (a reminder's
// tick to a grain on another silo, a grain's call to another) shows only
// in the transports' counters as each hop is written and read, and
// between a hop being queued and written nothing shows.
const quietFor = 2 * time.Millisecond

// Advance moves the shared fake clock on by d and returns once what the
// clock started has run: grain timers and reminders due by then have
// ticked (each periodic timer once per period, since Advance steps from
// one due timer to the next), the idle collector has deactivated the
// grains idle past their age, calls whose timeout passed have failed, and
// grain code sleeping on the clock has woken, with the turns all that
// queued run to their end.
//
// Precisely: Advance steps the clock to each due one-shot clock timer in
// turn (grain timers, reminders, sleeps, the silos' retries), then to the
// end; at each step it fires what is due and waits until the cluster is
// settled. Settled means: every tick sent on a clock channel has been
// received, and its owner has set its timer again or stopped it (or had
// a moment to act on it); every clock callback has returned; each silo's
// idle collector has finished the tick it was due, and its grain-timer
// wheel has queued every tick due; and no silo's scheduler has a turn
// queued or running. Tickers do not make steps: the silos' periodic
// sweeps (call timeouts, the collector, load reports) fire once at each
// step they are due, as a real ticker drops the ticks a slow reader
// missed.
//
// Calls between silos are waited for as they go: the cluster counts as
// settled only once it has looked so, with no envelope sent or received
// between silos, for a couple of milliseconds, so each step costs at
// least that much real time. What Advance does not wait for: turns
// blocked (on grain.Context.Sleep past the new time, on a call that
// waits for one, in Blocking), messages to clients, and storage writes
// outside turns. A turn that
// runs without end keeps Advance waiting until it fails the test after
// Timeout. Advance fails the test on the real clock (WithRealClock), and
// must not be called from grain code.
func (c *Cluster) Advance(d time.Duration) {
	c.t.Helper()
	if c.clock == nil {
		c.t.Fatalf("granarytest: Advance on the real clock: the cluster was made WithRealClock")
	}
	if d < 0 {
		c.t.Fatalf("granarytest: Advance(%v): the clock does not go back", d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(d)
}

// Now returns the cluster's clock's time.
func (c *Cluster) Now() time.Time { return c.Clock().Now() }

// advanceLocked is Advance. mu held.
func (c *Cluster) advanceLocked(d time.Duration) {
	c.t.Helper()
	end := c.clock.Now().Add(d)
	for {
		c.settle()
		next, ok := c.clock.nextStep()
		if !ok || next.After(end) {
			break
		}
		c.clock.moveTo(next)
	}
	c.clock.moveTo(end)
	c.settle()
}

// settle waits until the cluster is settled (see Advance) and stays so
// for quietFor with nothing moving, since what settles one part may
// start another. It fails the test after Timeout, saying what was still
// busy.
func (c *Cluster) settle() {
	c.t.Helper()
	deadline := time.Now().Add(Timeout)
	var since time.Time
	var last snapshot
	for {
		busy, snap := c.unsettled()
		switch {
		case busy != "":
			since = time.Time{}
			if time.Now().After(deadline) {
				c.t.Fatalf("granarytest: the cluster did not settle within %v at %v: %s", Timeout, c.clock.Now(), busy)
			}
		case since.IsZero() || snap != last:
			since, last = time.Now(), snap
		case time.Since(since) >= quietFor:
			return
		}
		time.Sleep(settlePoll)
	}
}

// snapshot is what moves while the cluster works: the clock's waiters and
// the envelopes the silos' transports sent and received.
type snapshot struct {
	version        uint64
	sent, received uint64
}

// unsettled says what in the cluster is still busy with what the clock
// started, or "" when nothing is, with a snapshot of what moves.
func (c *Cluster) unsettled() (string, snapshot) {
	busy, version := c.clock.unsettled()
	snap := snapshot{version: version}
	var what []string
	if busy != "" {
		what = append(what, busy)
	}
	now := c.clock.Now()
	for _, m := range c.running() {
		if !m.collectorDone(now) {
			what = append(what, m.name+": the idle collector's tick")
		}
		if !m.s.TestHooks().TimersSwept(now) {
			what = append(what, m.name+": grain timers due")
		}
		st := m.s.Stats()
		if sc := st.Scheduler; sc.QueuedGroups > 0 || sc.RunningWorkers > sc.SpinningWorkers {
			what = append(what, fmt.Sprintf("%s: %d turns queued, %d running", m.name, sc.QueuedGroups, sc.RunningWorkers-sc.SpinningWorkers))
		}
		if st.Cluster != nil {
			snap.sent += st.Cluster.Transport.EnvelopesSent
			snap.received += st.Cluster.Transport.EnvelopesReceived
		}
	}
	return strings.Join(what, "; "), snap
}
