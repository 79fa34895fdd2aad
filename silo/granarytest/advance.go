package granarytest

import (
	"fmt"
	"strings"
	"time"
)

// settlePoll is how often settle looks at the cluster while it waits.
const settlePoll = 200 * time.Microsecond

// quietFor is how long the cluster must look settled, with nothing
// moving, for settle to take it as settled. It covers the goroutine hops
// that no silo counts: the reminder service's tick, from the service
// starting the grain call on a goroutine of its own to the call being
// queued, and from its answer back to the service's loop, which skips
// the next tick while one runs; and an answer, taken off the network,
// on its way to the goroutine that waits for it. None of these has a
// hook this package can see (the tick's goroutine is the silo's
// internals). Envelopes between silos are counted exactly, from queued
// to received (see unsettled), and do not rely on it.
const quietFor = 2 * time.Millisecond

// lossGrace is how long the envelopes the silos wrote and the envelopes
// they received may disagree, cluster-wide, with nothing moving at all,
// before settle takes the difference for envelopes lost with a broken
// stream (Kill and Partition cut streams with frames in flight, which no
// silo counts) and counts from there. It is paid once per such loss; the
// envelopes in flight between silos are otherwise counted exactly.
const lossGrace = 50 * time.Millisecond

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
// Calls between silos are waited for as they go: an envelope from one
// silo to another counts as busy from when it is queued for sending
// until the other silo has received it and handed it to its scheduler
// (the silos' transports count both, and the cluster-wide sums match
// exactly when nothing is in flight). What no silo counts (a reminder's
// tick on its way to the grain call, see quietFor) is waited for by a
// quiet period: the cluster counts as settled once it has looked so, with
// nothing moving, for a couple of milliseconds, so each step costs at
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
// busy. mu held.
func (c *Cluster) settle() {
	c.t.Helper()
	deadline := time.Now().Add(Timeout)
	var last snapshot
	var since time.Time // since when the looks are all as last
	for {
		busy, snap := c.unsettled()
		inFlight := int64(snap.sent-snap.received) - c.lost
		if since.IsZero() || snap != last {
			since, last = time.Now(), snap
		}
		switch {
		case busy != "":
			since = time.Time{}
		case inFlight != 0:
			if time.Since(since) >= lossGrace {
				c.lost += inFlight // lost with a broken stream
				since = time.Time{}
				continue
			}
			busy = fmt.Sprintf("%d envelopes written by a silo and not yet received by another", inFlight)
		case time.Since(since) >= quietFor:
			return
		}
		if busy != "" && time.Now().After(deadline) {
			c.t.Fatalf("granarytest: the cluster did not settle within %v at %v: %s", Timeout, c.clock.Now(), busy)
		}
		time.Sleep(settlePoll)
	}
}

// snapshot is what moves while the cluster works: the clock's waiters and
// the envelopes the silos' transports wrote and received, summed over
// every silo the cluster started (a stopped silo's counters stay).
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
	for _, m := range c.all() {
		if c.isUp(m) {
			continue
		}
		if st := m.s.Stats(); st.Cluster != nil {
			snap.sent += st.Cluster.Transport.EnvelopesSent
			snap.received += st.Cluster.Transport.EnvelopesReceived
		}
	}
	for _, m := range c.running() {
		if !m.s.TestHooks().CollectorCaughtUp(now) {
			what = append(what, m.name+": the idle collector's looks due")
		}
		if !m.s.TestHooks().TimersSwept(now) {
			what = append(what, m.name+": grain timers due")
		}
		st := m.s.Stats()
		if sc := st.Scheduler; sc.QueuedGroups > 0 || sc.RunningWorkers > sc.SpinningWorkers {
			what = append(what, fmt.Sprintf("%s: %d turns queued, %d running", m.name, sc.QueuedGroups, sc.RunningWorkers-sc.SpinningWorkers))
		}
		if st.Cluster != nil {
			tp := st.Cluster.Transport
			if tp.EnvelopesUnsent > 0 {
				what = append(what, fmt.Sprintf("%s: %d envelopes queued for other silos", m.name, tp.EnvelopesUnsent))
			}
			snap.sent += tp.EnvelopesSent
			snap.received += tp.EnvelopesReceived
		}
	}
	return strings.Join(what, "; "), snap
}
