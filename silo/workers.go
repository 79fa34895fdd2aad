package silo

import (
	"math"
	"sync"

	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/grain"
)

// workerSet holds the local activations of one stateless-worker grain ID.
// Sets are never removed from the catalog: removing one could orphan an
// activation another goroutine is adding to it, and a set is small.
type workerSet struct {
	mu   sync.Mutex
	acts []*activationRec
}

// workerFor picks the activation of a stateless worker that takes c: an
// idle one, else a new one while fewer than the type's bound exist, else
// the least loaded. Lock order: set, then activation.
func (s *Runtime) workerFor(id grain.ID, t *grainType, c *call) (a *activationRec, queued bool) {
	v, ok := t.sets.Load(id.Key)
	if !ok {
		if s.stopping.Load() {
			return nil, false
		}
		v, _ = t.sets.LoadOrStore(id.Key, &workerSet{})
	}
	ws := v.(*workerSet)
	ws.mu.Lock()
	var best *activationRec
	bestLoad := math.MaxInt
	for _, a := range ws.acts {
		a.mu.Lock()
		load := a.gate.Running() + a.queuedLocked()
		usable := (a.state == valid || a.state == activating) && !a.deactPending && !a.holdsChainLocked(c)
		a.mu.Unlock()
		if usable && load < bestLoad {
			best, bestLoad = a, load
		}
	}
	var fresh *activationRec
	if bestLoad > 0 && len(ws.acts) < t.workers {
		s.live.Add(1) // before looking at stopping: see activationFor
		if s.stopping.Load() {
			s.unreserve()
		} else {
			fresh = s.newActivation(id, t)
			fresh.set = ws
			fresh.pushLocked(c) // queued before it is published: see activationFor
			c.act = fresh
			ws.acts = append(ws.acts, fresh)
			best = fresh
		}
	}
	if best == nil {
		// Every worker is ending or in this call's chain: take one that
		// is not dead; submit retries or reports a deadlock.
		for _, a := range ws.acts {
			a.mu.Lock()
			alive := a.state != dead
			a.mu.Unlock()
			if alive {
				best = a
				break
			}
		}
	}
	ws.mu.Unlock()
	if fresh != nil {
		s.activated(fresh)
		return fresh, true
	}
	return best, false
}

// remove drops a from the set; it reports whether a was there.
func (ws *workerSet) remove(a *activationRec) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i, x := range ws.acts {
		if x == a {
			ws.acts = append(ws.acts[:i], ws.acts[i+1:]...)
			return true
		}
	}
	return false
}

func (ws *workerSet) snapshot() []*activationRec {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return append([]*activationRec(nil), ws.acts...)
}

// kindOf is how a method's requests share an activation.
func kindOf(m *grain.MethodDesc) admission.Kind {
	switch {
	case m.AlwaysInterleave:
		return admission.Interleave
	case m.ReadOnly:
		return admission.ReadOnly
	}
	return admission.Exclusive
}
