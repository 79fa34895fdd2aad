package activation

import (
	"fmt"
	"strings"
)

// debugState describes the pool's queues for a failing test.
func (p *Pool) debugState(groups ...*Group) string {
	var b strings.Builder
	fmt.Fprintf(&b, "quiescent=%v blocked=%d npidle=%d nspinning=%d workers=%d gq=%d inbox=%v\n",
		p.quiescent(), p.blocked.Load(), p.npidle.Load(), p.nspinning.Load(), p.nworkers.Load(), p.gqlen.Load(), p.inbox.Load() != nil)
	for _, pp := range *p.allp.Load() {
		next := "-"
		if g := pp.next.Load(); g != nil {
			next = g.Label()
		}
		fmt.Fprintf(&b, "proc %d status=%d ring=%d next=%s stealNext=%v parked=%v\n",
			pp.id, pp.status.Load(), pp.runqtail.Load()-pp.runqhead.Load(), next, pp.stealNext.Load(), pp.parked != nil)
	}
	p.mu.Lock()
	fmt.Fprintf(&b, "idle=%d spares=%d\n", len(p.idle), len(p.spares))
	p.mu.Unlock()
	for _, g := range groups {
		if st, n := g.state.Load(), g.queueLen(); st != groupIdle || n != 0 {
			g.mu.Lock()
			h := g.headLocked()
			g.mu.Unlock()
			_, isRes := h.Task.(*resumer)
			fmt.Fprintf(&b, "group %s state=%d queued=%d head=%q resumer=%v\n", g.label, st, n, h.Name, isRes)
		}
	}
	return b.String()
}
