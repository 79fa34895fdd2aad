package activation

import (
	"bytes"
	"runtime"
	"strconv"
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
// each group run, one atomic store, and goid once when the goroutine
// starts; the wait fields are written under waitMu as a turn starts and
// ends a wait, which costs goroutine switches anyway.
type execReport struct {
	goid atomic.Uint64
	cur  atomic.Pointer[Group]

	waitMu    sync.Mutex
	waitG     *Group
	waitName  string
	waitSince time.Time
}

// noteWait records that the turn of frame f waits from now. Owner only.
func (e *Exec) noteWait(f *frame) {
	r := &e.report
	now := e.pool.now()
	r.waitMu.Lock()
	r.waitG, r.waitName, r.waitSince = f.g, f.name, now
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
	stacks := goroutineStacks()
	var out []AbandonedTurn
	for _, e := range execs {
		r := &e.report
		a := AbandonedTurn{Running: p.cfg.CloseTimeout, Stack: stacks[r.goid.Load()]}
		r.waitMu.Lock()
		if r.waitG != nil {
			a.Group, a.Turn, a.Waiting = r.waitG.Label(), r.waitName, true
			a.Running = now.Sub(r.waitSince)
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
	return out
}

// goroutineID returns the calling goroutine's ID, read from its stack
// header ("goroutine 42 [running]:"). Once per worker goroutine.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		id, _ := strconv.ParseUint(string(b[:i]), 10, 64)
		return id
	}
	return 0
}

// goroutineStacks returns every goroutine's stack by goroutine ID.
func goroutineStacks() map[uint64]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= 64<<20 {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[uint64]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		rest := bytes.TrimPrefix(g, []byte("goroutine "))
		if i := bytes.IndexByte(rest, ' '); i > 0 {
			if id, err := strconv.ParseUint(string(rest[:i]), 10, 64); err == nil {
				out[id] = string(g)
			}
		}
	}
	return out
}
