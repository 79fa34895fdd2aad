package cluster

import (
	"sync"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/internal/local"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Locating a grain. A call whose grain has no activation on this silo and
// no entry in the directory's cache waits for a directory lookup, which
// may go to another silo. While one lookup of a grain is in flight, later
// calls to that grain queue behind the call that started it (resolving),
// so that one sender's calls to a grain leave this silo in the order it
// made them, whatever order lookups would have come back in: the calls
// behind follow the first to wherever it went, the silo the directory
// named or the one placement picked, in order. Should the first fail or
// be refused, the next starts a lookup of its own. A lookup to be retried
// keeps its queue until the retry ends. A burst of calls to a grain not
// yet located thus costs one lookup, not one each.
//
// resolvingN counts the grains being located, so that a call reads the
// queues, under their lock, only while some lookup is in flight; the
// common case, a cached entry, costs one atomic load more.

// waiting is a call queued behind the lookup of its grain, with its type
// (nil when this silo does not host it).
type waiting struct {
	c *local.Call
	t *local.GrainType
}

// resolution is where a call went after its grain was located, for the
// calls queued behind it to follow: ok when it went anywhere; then here
// when it was routed to this silo, else to the silo to names, placed
// when placement chose that silo.
type resolution struct {
	ok, here, placed bool
	to               directory.Entry
}

// Resolve routes a call whose grain has no activation on this silo: to
// the silo the directory names, else to the silo placement picks. t is
// nil when this silo does not host the type. The call's callee ownership
// passes on with it.
//
// A call that another silo passed on here, believing its activation was
// here, asks the grain's owner rather than this silo's cache: after a
// membership change two silos' caches can each name the other, and
// trusting them would bounce the call until its hop bound, and every
// call after it, for as long as both entries live.
func (cl *Cluster) Resolve(c *local.Call, t *local.GrainType) {
	if cl.resolvingN.Load() != 0 && cl.queueBehind(c, t, false) {
		return
	}
	if c.Hops == 0 {
		if e, ok := cl.Dir.CachedLookup(c.ID); ok && e.Silo != cl.SelfID {
			cl.Forward(e, c, false)
			return
		}
	}
	if cl.queueBehind(c, t, true) {
		return
	}
	cl.locate(c, t)
}

// queueBehind queues c behind the lookup in flight for its grain, if
// there is one, and reports whether it did. Otherwise, if start is set,
// it records that c's lookup is now in flight.
func (cl *Cluster) queueBehind(c *local.Call, t *local.GrainType, start bool) bool {
	cl.resolveMu.Lock()
	defer cl.resolveMu.Unlock()
	if q, ok := cl.resolving[c.ID]; ok {
		cl.resolving[c.ID] = append(q, waiting{c, t})
		return true
	}
	if start {
		if cl.resolving == nil {
			cl.resolving = map[grain.ID][]waiting{}
		}
		cl.resolving[c.ID] = nil
		cl.resolvingN.Add(1)
	}
	return false
}

// nextWaiting takes the oldest call queued behind the lookup of id, or
// ends the lookup's record when none is left.
func (cl *Cluster) nextWaiting(id grain.ID) (waiting, bool) {
	cl.resolveMu.Lock()
	defer cl.resolveMu.Unlock()
	q := cl.resolving[id]
	if len(q) == 0 {
		delete(cl.resolving, id)
		cl.resolvingN.Add(-1)
		return waiting{}, false
	}
	w := q[0]
	q[0] = waiting{}
	cl.resolving[id] = q[1:]
	return w, true
}

// locate looks c's grain up, routes c by the answer, and then the calls
// queued behind it.
func (cl *Cluster) locate(c *local.Call, t *local.GrainType) {
	id := c.ID // c is not ours once routed
	if r, inline := cl.lookup(c, t); inline {
		cl.drain(id, r)
	}
}

// drain routes the calls queued behind the lookup of id, oldest first, as
// r says the call before them went, until none is left or one needs a
// lookup of its own that does not answer at once (its answer drains the
// rest). A call follows the one before it only where that cannot bring
// it back to Resolve at once: not to this silo once it is stopping, nor
// to a silo that is gone; it asks the directory instead.
func (cl *Cluster) drain(id grain.ID, r resolution) {
	for {
		w, ok := cl.nextWaiting(id)
		switch {
		case !ok:
			return
		case r.ok && r.here && !cl.s.Stopping.Load():
			// (A stopping silo activates nothing, and Route would send
			// the call back to Resolve, behind this very queue.)
			r = cl.routeHere(w.c)
		case r.ok && !r.here && !cl.View.Load().gone(r.to.Silo):
			r = cl.forwardTo(r.to, w.c, r.placed)
		default:
			var inline bool
			if r, inline = cl.lookup(w.c, w.t); !inline {
				return
			}
		}
	}
}

// lookup asks the directory where c's grain is and routes c by the
// answer. It reports inline, with where c went, when the answer came
// before it returned, so that the caller drains the queue behind c; else
// the answer's callback drains it, unless c waits to retry its lookup,
// whose retry then does.
func (cl *Cluster) lookup(c *local.Call, t *local.GrainType) (r resolution, inline bool) {
	id := c.ID // c is not ours once routed
	ask := cl.Dir.Lookup
	if c.Hops > 0 {
		ask = cl.Dir.LookupOwner
	}
	// Whichever of the callback and this goroutine comes second drains:
	// the callback has routed c by then.
	var mu sync.Mutex
	var answered, returned bool
	var got resolution
	ask(id, func(e directory.Entry, found bool, err error) {
		res, retrying := cl.located(c, t, e, found, err)
		if retrying {
			return
		}
		mu.Lock()
		if returned {
			mu.Unlock()
			cl.drain(id, res)
			return
		}
		answered, got = true, res
		mu.Unlock()
	})
	mu.Lock()
	defer mu.Unlock()
	returned = true
	return got, answered
}

// located routes c, given the directory's answer: the entry e of its
// activation, if found. It reports where c went, or that it will retry
// the lookup after a backoff.
func (cl *Cluster) located(c *local.Call, t *local.GrainType, e directory.Entry, found bool, err error) (r resolution, retrying bool) {
	switch {
	case err != nil && cl.retryLater(c, func() { cl.locate(c, t) }):
		return resolution{}, true
	case err != nil:
		cl.s.Fail(nil, c, status.Errorf(codes.Unavailable, "granary: locating %s: %v", c.ID, status.Convert(err).Message()))
		return resolution{}, false
	case found && e.Silo != cl.SelfID:
		return cl.forwardTo(e, c, false), false
	case found && cl.s.ActivationByID(c.ID, e.Activation) != nil:
		// Made here since the call missed the catalog.
		return cl.routeHere(c), false
	}
	if found {
		// The entry names an activation of this silo that is gone: its
		// unregistration is late or was lost. (An activation is in the
		// catalog before it registers.)
		cl.Dir.Invalidate(c.ID, e)
		cl.Dir.Unregister(c.ID, e)
	}
	return cl.place(c, t), false
}

// routeHere routes c to its grain's activation on this silo, making it
// if need be, without asking the directory.
func (cl *Cluster) routeHere(c *local.Call) resolution {
	c.PlacedHere = true
	cl.s.Route(nil, c)
	return resolution{ok: true, here: true}
}

// forwardTo forwards c to the silo to names.
func (cl *Cluster) forwardTo(to directory.Entry, c *local.Call, placed bool) resolution {
	cl.Forward(to, c, placed)
	return resolution{ok: true, to: to, placed: placed}
}
