package activation

import (
	"time"

	"go.uber.org/zap"
)

// monitor samples the processors every Config.MonitorInterval, like the Go
// runtime's sysmon. It never touches a ring; it only sets flags that owners
// and thieves read, detaches processors stuck in one turn, and logs.
type monitor struct {
	p    *Pool
	last time.Time // the previous sample
}

func newMonitor(p *Pool) *monitor { return &monitor{p: p, last: p.now()} }

func (m *monitor) run() {
	defer m.p.wg.Done()
	t := m.p.cfg.Clock.NewTicker(m.p.cfg.MonitorInterval)
	defer t.Stop()
	for {
		select {
		case <-m.p.closing:
			return
		case <-t.Chan():
			m.check(m.p.now())
		}
	}
}

// check looks at every processor once. A processor's run counter moves
// whenever a group run starts or a waiting turn takes a processor back;
// while it stands still, one run is in progress. A run ends within
// QuantumTurns turns or, once flagged here, at the next turn boundary, so
// a run still going after HandOnAfter means one turn has held the
// processor for about that long, less QuantumTime. Tracking runs instead
// of turns keeps the monitor's cost off the per-turn path. Monitor only.
//
// Busy time is sampled here too: each group found running is charged the
// time since the previous sample. That costs the hot path nothing (a clock
// read per turn costs more than a short turn on some virtual machines) and
// is exact in aggregate, though coarse for a single short turn.
func (m *monitor) check(now time.Time) {
	p := m.p
	cfg := &p.cfg
	elapsed := now.Sub(m.last)
	m.last = now
	p.coarse.Store(now.UnixNano())
	for _, pp := range *p.allp.Load() {
		st := pp.status.Load()
		g := pp.curGroup.Load()
		run := pp.runSeq.Load()
		if g != nil && (st == pRunning || st == pDetached) && elapsed > 0 {
			g.busy.Add(int64(elapsed))
		}
		if (st != pRunning && st != pDetached) || g == nil || run != pp.mon.run {
			if pp.mon.run != run {
				pp.runSince.Store(now.UnixNano())
			}
			pp.mon.run, pp.mon.runSince = run, now
			pp.mon.warned = false
			continue
		}
		stuck := now.Sub(pp.mon.runSince)
		if stuck >= cfg.QuantumTime {
			pp.preempt.Store(true)
		}
		if pp.next.Load() != nil && !pp.stealNext.Load() {
			// The owner has not reached its next for a whole interval: let
			// an idle worker take it.
			pp.stealNext.Store(true)
			p.wakep()
		}
		if st == pRunning && stuck >= cfg.HandOnAfter {
			p.detach(pp)
		}
		if stuck >= cfg.LongTurnWarning && !pp.mon.warned {
			pp.mon.warned = true
			p.warned.Add(1)
			cfg.Logger.Warn("activation: long turn holds a processor",
				zap.Stringer("group", g.label),
				zap.String("turn", g.runningTurnName()),
				zap.Duration("running", stuck),
				zap.Duration("threshold", cfg.LongTurnWarning))
		}
	}
}

// runningTurnName returns the name of the turn being run: it stays queued
// until it finishes, at batchPos in its queue. Any goroutine.
func (g *Group) runningTurnName() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := &g.app
	if g.headSys {
		q = &g.sys
	}
	t, _ := q.at(int(g.batchPos.Load()))
	return t.Name
}
