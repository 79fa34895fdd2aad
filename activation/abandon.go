package activation

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// AbandonedTurn is a turn that was still running when Close stopped
// waiting for it (Config.CloseTimeout).
type AbandonedTurn struct {
	Group string // the label of the turn's group: for a grain, its ID
	// Turn is the name of the turn: for a grain, the method it serves.
	// A turn that called another group's turn inline is named by the
	// outer turn; its stack shows the inner one.
	Turn string
	// Running is how long the turn had run when it was abandoned, to
	// within the monitor's interval; for a turn whose start the pool did
	// not see, at least CloseTimeout.
	Running time.Duration
	// Waiting: the turn was waiting (Exec.Wait or Exec.Blocking) without
	// a processor, rather than running grain code on one.
	Waiting bool
	// Stack is the stack of the turn's goroutine.
	Stack string
}

// execReport is what an Exec publishes for Close's report. cur is set at
// each group run, one atomic store; the wait fields are written under
// waitMu, which nobody else takes until Close gives up, as a turn starts
// and ends a wait (which costs goroutine switches anyway), with the
// monitor's coarse time rather than a clock read.
type execReport struct {
	cur atomic.Pointer[Group]

	waitMu    sync.Mutex
	waitG     *Group
	waitName  string
	waitSince int64 // Pool.coarse when the wait began
}

// noteWait records that the turn of frame f waits from now. Owner only.
func (e *Exec) noteWait(f *frame) {
	r := &e.report
	since := e.pool.coarse.Load()
	r.waitMu.Lock()
	r.waitG, r.waitName, r.waitSince = f.g, f.name, since
	r.waitMu.Unlock()
}

// noteWaitEnd records that the wait ended. Owner only.
func (e *Exec) noteWaitEnd() {
	r := &e.report
	r.waitMu.Lock()
	r.waitG, r.waitName = nil, ""
	r.waitMu.Unlock()
}

// stuckTurns describes the turns of the goroutines still alive after
// CloseTimeout. Close only, after the wait timed out.
//
// Goroutine stacks are matched to turns without a goroutine ID, which
// would cost every new worker a stack walk: after the timeout every
// worker goroutine still alive holds a stuck turn, so the stacks of the
// goroutines in a worker's loop are theirs. Waiting turns are told from
// running ones by their wait frame; a turn gets its goroutine's stack
// when it is the only stuck turn of its kind, and otherwise the stacks of
// every stuck goroutine of its kind.
func (p *Pool) stuckTurns() []AbandonedTurn {
	now := p.now()
	p.mu.Lock()
	execs := make([]*Exec, 0, len(p.execs))
	for e := range p.execs {
		execs = append(execs, e)
	}
	p.mu.Unlock()
	// Where a processor still runs a group, the monitor knows since when.
	since := map[*Group]time.Time{}
	for _, pp := range *p.allp.Load() {
		if g := pp.curGroup.Load(); g != nil {
			if t := pp.runSince.Load(); t != 0 {
				since[g] = time.Unix(0, t)
			}
		}
	}
	var out []AbandonedTurn
	for _, e := range execs {
		r := &e.report
		a := AbandonedTurn{Running: p.cfg.CloseTimeout}
		r.waitMu.Lock()
		if r.waitG != nil {
			a.Group, a.Turn, a.Waiting = r.waitG.Label(), r.waitName, true
			a.Running = max(a.Running, now.Sub(time.Unix(0, r.waitSince)))
		}
		r.waitMu.Unlock()
		if !a.Waiting {
			g := r.cur.Load()
			if g == nil {
				continue // between groups when Close began; it is on its way out
			}
			a.Group, a.Turn = g.Label(), g.runningTurnName()
			if t, ok := since[g]; ok && now.Sub(t) > a.Running {
				a.Running = now.Sub(t)
			}
		}
		out = append(out, a)
	}
	running, waiting := workerStacks()
	for i := range out {
		stacks := running
		if out[i].Waiting {
			stacks = waiting
		}
		out[i].Stack = strings.Join(stacks, "\n\n")
	}
	return out
}

// workerStacks returns the stacks of the goroutines inside a worker's
// loop, split into those waiting in Exec.Wait or Exec.Blocking and the
// others.
func workerStacks() (running, waiting []string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case !strings.Contains(g, "activation.(*Exec).loop"):
		case strings.Contains(g, "activation.(*Exec).Wait(") || strings.Contains(g, "activation.(*Exec).Blocking("):
			waiting = append(waiting, g)
		default:
			running = append(running, g)
		}
	}
	return running, waiting
}
