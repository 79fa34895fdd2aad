package cluster

import (
	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/silo/internal/local"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ResolveObserver forwards a call to an observer of client to the client's
// home gateway. While the directory is asked where a client's home is,
// later calls to its observers queue behind the first, so that one
// caller's calls to an observer reach it in the order they were made:
// none overtakes another once the answer is cached.
func (cl *Cluster) ResolveObserver(c *local.Call, client string) {
	id := local.ClientGrainID(client)
	cl.obsMu.Lock()
	if q := cl.obsLookups[client]; q != nil {
		q.calls = append(q.calls, c)
		cl.obsMu.Unlock()
		return
	}
	if e, ok := cl.Dir.CachedLookup(id); ok && e.Silo != cl.SelfID {
		cl.obsMu.Unlock()
		cl.Forward(e, c, false)
		return
	}
	q := &observerLookup{calls: []*local.Call{c}}
	if cl.obsLookups == nil {
		cl.obsLookups = map[string]*observerLookup{}
	}
	cl.obsLookups[client] = q
	cl.obsMu.Unlock()
	cl.Dir.Lookup(id, func(e directory.Entry, found bool, err error) {
		for {
			cl.obsMu.Lock()
			calls := q.calls
			q.calls = nil
			if len(calls) == 0 {
				delete(cl.obsLookups, client)
				cl.obsMu.Unlock()
				return
			}
			cl.obsMu.Unlock()
			for _, c := range calls {
				cl.routeToHome(c, client, e, found, err)
			}
		}
	})
}

// observerLookup is a directory lookup of a client's home in flight, and
// the calls to the client's observers that wait for it, in order.
type observerLookup struct {
	calls []*local.Call
}

// routeToHome sends a call to an observer of client on, given the
// directory's answer: the home's entry e, if found.
func (cl *Cluster) routeToHome(c *local.Call, client string, e directory.Entry, found bool, err error) {
	id := local.ClientGrainID(client)
	switch {
	case err != nil && cl.retryLater(c, func() { cl.s.RouteObserver(c) }):
	case err != nil:
		cl.s.Fail(nil, c, status.Errorf(codes.Unavailable, "granary: locating the client of %s: %v", c.ID, status.Convert(err).Message()))
	case !found:
		cl.s.Fail(nil, c, local.ObserverGone(c.ID))
	case e.Silo != cl.SelfID:
		cl.Forward(e, c, false)
	case cl.s.Gw != nil && cl.s.Gw.DeliverObserver(client, c):
		// The client made this gateway its home while the lookup ran.
	default:
		// The entry names this silo, whose gateway does not hold the
		// client: left over from a connection that ended.
		cl.Dir.Invalidate(id, e)
		cl.Dir.Unregister(id, e)
		cl.s.Fail(nil, c, local.ObserverGone(c.ID))
	}
}
