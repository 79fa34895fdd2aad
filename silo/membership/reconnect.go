package membership

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Reconnecting. memberlist syncs member lists only with members it takes
// for alive, and gossips to a dead one only for GossipToTheDeadTime; past
// that it forgets the member. When a partition outlasts that window, each
// side has forgotten the other, and nothing in memberlist brings them
// together again. So each silo keeps, for ReconnectTimeout, the gossip
// address of every member it saw fail, and tries a join there every
// ReconnectInterval, backing off while the attempts fail. A join is a
// member-list sync over TCP: if the member is alive behind a healed
// partition, the two sides learn of each other and their silos refute
// the deaths gossiped about them. A join that succeeds ends the attempts
// either way: the address answered for the cluster, and whatever lives
// there is now known.

// reconnectMaxBackoff is the longest wait between attempts at one member,
// in ReconnectIntervals.
const reconnectMaxBackoff = 8

// maxReconnecting bounds the failed members a silo tries to reach again;
// the oldest are dropped first.
const maxReconnecting = 256

// maxReconnectsInFlight bounds the joins in flight at once: each may wait
// up to TCPTimeout for an unreachable address.
const maxReconnectsInFlight = 4

// reconnectState is one failed member this silo tries to reach again.
type reconnectState struct {
	addr     string
	failed   time.Time // when it was seen failing
	next     time.Time // when to try next
	wait     time.Duration
	inFlight bool
	gen      uint64 // which failure: a join's outcome counts for its own only
}

// reconnectAttempt is a join to start: at addr, for the failure gen.
type reconnectAttempt struct {
	addr string
	gen  uint64
}

// reconnector holds the failed members to reach again. Its mu is taken
// after Memberlist.mu, never before.
type reconnector struct {
	mu      sync.Mutex
	members map[string]*reconnectState // by member ID
	order   []string                   // member IDs, oldest failure first
	gen     uint64                     // failures recorded
	wg      sync.WaitGroup             // the loop and the joins in flight
}

// failed records that member id, gossiping at addr, failed. Any
// goroutine.
func (r *reconnector) failed(id, addr string, now time.Time, interval time.Duration) {
	if addr == "" || interval <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.members == nil {
		r.members = make(map[string]*reconnectState)
	}
	prev, ok := r.members[id]
	if !ok {
		r.order = append(r.order, id)
	}
	r.gen++
	// A join still in flight for an earlier failure keeps a second one
	// from starting; its outcome will not count for this failure.
	r.members[id] = &reconnectState{addr: addr, failed: now, next: now.Add(interval), wait: interval,
		inFlight: ok && prev.inFlight, gen: r.gen}
	for len(r.order) > maxReconnecting {
		delete(r.members, r.order[0])
		r.order = r.order[1:]
	}
}

// forget stops the attempts at member id: it is alive, or they are over.
// Any goroutine.
func (r *reconnector) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked(id)
}

func (r *reconnector) forgetLocked(id string) {
	if _, ok := r.members[id]; !ok {
		return
	}
	delete(r.members, id)
	for i, x := range r.order {
		if x == id {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
}

// due returns the members to try now, marked in flight, and drops those
// past timeout. It starts at most maxReconnectsInFlight joins at once.
func (r *reconnector) due(now time.Time, timeout time.Duration) map[string]reconnectAttempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	inFlight := 0
	for _, st := range r.members {
		if st.inFlight {
			inFlight++
		}
	}
	var out map[string]reconnectAttempt
	for _, id := range append([]string(nil), r.order...) {
		st := r.members[id]
		switch {
		case now.Sub(st.failed) > timeout && !st.inFlight:
			r.forgetLocked(id)
		case st.inFlight || now.Before(st.next) || inFlight >= maxReconnectsInFlight:
		default:
			st.inFlight = true
			inFlight++
			if out == nil {
				out = make(map[string]reconnectAttempt)
			}
			out[id] = reconnectAttempt{st.addr, st.gen}
		}
	}
	return out
}

// attempted records the outcome of a join at member id for its failure
// gen: success ends the attempts, failure doubles the wait up to
// maxWait.
func (r *reconnector) attempted(id string, gen uint64, ok bool, now time.Time, maxWait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.members[id]
	switch {
	case st == nil:
		return // seen alive meanwhile
	case st.gen != gen:
		st.inFlight = false // it failed again since: try afresh
		return
	}
	if ok {
		r.forgetLocked(id)
		return
	}
	st.inFlight = false
	st.wait = min(2*st.wait, maxWait)
	st.next = now.Add(st.wait)
}

// reconnectLoop tries the failed members every ReconnectInterval until
// Leave or Close begins.
func (m *Memberlist) reconnectLoop() {
	defer m.rc.wg.Done()
	every := m.cfg.ReconnectInterval
	t := m.cfg.Clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.closingc:
			return
		case <-t.Chan():
		}
		for id, at := range m.rc.due(m.cfg.Clock.Now(), m.cfg.ReconnectTimeout) {
			m.rc.wg.Add(1)
			go m.reconnect(id, at, reconnectMaxBackoff*every)
		}
	}
}

// reconnect tries one join where member id gossiped.
func (m *Memberlist) reconnect(id string, at reconnectAttempt, maxWait time.Duration) {
	defer m.rc.wg.Done()
	addr := at.addr
	n, err := m.ml.Join([]string{addr})
	ok := err == nil && n > 0
	if ok {
		m.log.Info("membership: reached a failed member's address again", zap.String("failed", id), zap.String("addr", addr))
	} else {
		m.log.Debug("membership: a failed member's address does not answer", zap.String("failed", id), zap.String("addr", addr), zap.Error(err))
	}
	m.rc.attempted(id, at.gen, ok, m.cfg.Clock.Now(), maxWait)
}
