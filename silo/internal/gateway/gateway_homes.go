package gateway

import (
	"strings"
	"sync"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/internal/cluster"
	"github.com/granaryio/granary/silo/internal/local"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// homes are the clients whose home is a gateway: their directory entries.
type homes struct {
	mu sync.Mutex
	m  map[string]directory.Entry // by client ID
}

// isHome reports whether client's home is this gateway.
func (g *Gateway) isHome(client string) bool {
	g.homes.mu.Lock()
	defer g.homes.mu.Unlock()
	_, ok := g.homes.m[client]
	return ok
}

// home makes this gateway the home of client: it registers the client in
// the directory, taking the entry over from a former home, and answers r.
func (g *Gateway) home(client string, r transport.Responder) {
	s := g.s
	if strings.Contains(client, "/") {
		r.Reply(transport.SetStatus(&granaryv1.Envelope{}, status.Errorf(codes.InvalidArgument, "granary: client ID %q contains '/', which observer IDs use as a separator", client)))
		return
	}
	if s.Stopping.Load() {
		r.Reply(transport.SetStatus(&granaryv1.Envelope{}, local.Unavailable(s, "it is stopping")))
		return
	}
	g.homes.mu.Lock()
	if _, ok := g.homes.m[client]; ok {
		g.homes.mu.Unlock()
		r.Reply(&granaryv1.Envelope{})
		return
	}
	var e directory.Entry
	if s.Cl != nil {
		e = directory.Entry{Silo: s.Cl.Self(), Activation: s.NextActID.Add(1)}
	}
	// Recorded before it registers, so a call the new entry brings here
	// finds the client home and does not take the entry for a stale one.
	g.homes.m[client] = e
	g.homes.mu.Unlock()
	if s.Cl == nil {
		r.Reply(&granaryv1.Envelope{})
		return
	}
	g.RegisterHome(client, e, r, 0, 0)
}

// maxHomeTakeovers bounds how often a gateway unregisters another entry
// of a client that moved here before it gives up.
const maxHomeTakeovers = 3

// RegisterHome registers the client's home entry e, retrying while the
// directory cannot answer (retries), and unregistering the entry of the
// client's former home, which it left, when that one is in the way
// (takeovers). It stops as soon as this gateway is no longer the client's
// home (the client's stream ended meanwhile), so that a late attempt never
// takes the entry from the client's next home; an entry it won by then
// it removes again.
func (g *Gateway) RegisterHome(client string, e directory.Entry, r transport.Responder, retries, takeovers uint8) {
	cl := g.Cl
	id := local.ClientGrainID(client)
	gone := func() bool {
		if g.holdsHome(client, e) {
			return false
		}
		r.Reply(transport.SetStatus(&granaryv1.Envelope{}, status.Errorf(codes.Unavailable, "granary: client %s left this gateway while it registered", client)))
		return true
	}
	if gone() {
		return
	}
	cl.Dir.Register(id, e, func(winner directory.Entry, err error) {
		switch {
		case err == nil && winner == e && !g.holdsHome(client, e):
			cl.Dir.Unregister(id, e) // won after the client left
			gone()
		case err != nil && retries < cluster.MaxDirectoryRetries && !cl.Closed.Load():
			g.s.Clock.AfterFunc(cluster.RetryBackoff(retries), func() { g.RegisterHome(client, e, r, retries+1, takeovers) })
		case err != nil:
			g.dropHome(client, e)
			r.Reply(transport.SetStatus(&granaryv1.Envelope{}, status.Errorf(codes.Unavailable, "granary: registering client %s: %v", client, status.Convert(err).Message())))
		case winner == e:
			r.Reply(&granaryv1.Envelope{})
		case takeovers < maxHomeTakeovers && !gone():
			cl.Dir.Invalidate(id, winner)
			cl.Dir.Unregister(id, winner) // reaches the owner before the Register that follows
			g.RegisterHome(client, e, r, retries, takeovers+1)
		case takeovers >= maxHomeTakeovers:
			g.dropHome(client, e)
			r.Reply(transport.SetStatus(&granaryv1.Envelope{}, status.Errorf(codes.Unavailable, "granary: client %s is still registered at silo %s", client, winner.Silo)))
		}
	})
}

// holdsHome reports whether e is still client's home entry here.
func (g *Gateway) holdsHome(client string, e directory.Entry) bool {
	g.homes.mu.Lock()
	defer g.homes.mu.Unlock()
	cur, ok := g.homes.m[client]
	return ok && cur == e
}

// dropHome forgets that this gateway is client's home, if e is still its
// entry.
func (g *Gateway) dropHome(client string, e directory.Entry) {
	g.homes.mu.Lock()
	defer g.homes.mu.Unlock()
	if cur, ok := g.homes.m[client]; ok && cur == e {
		delete(g.homes.m, client)
	}
}

// StreamsEnded is the transport telling the gateway that a client has no
// stream to it any more: the client is not home here any more, and its
// observers are unreachable through this gateway.
func (g *Gateway) StreamsEnded(client string) {
	if g.tport.Connected(client) {
		return // a new stream came up meanwhile, and may have made it home again
	}
	g.homes.mu.Lock()
	e, ok := g.homes.m[client]
	delete(g.homes.m, client)
	g.homes.mu.Unlock()
	if ok && g.Cl != nil {
		g.Cl.Dir.Unregister(local.ClientGrainID(client), e)
	}
}

// leaveHomes makes this gateway nobody's home: the clients are told to go
// away and move home, and grains reach their observers through their next
// home, not through a gateway that is stopping.
func (g *Gateway) leaveHomes() {
	g.homes.mu.Lock()
	m := g.homes.m
	g.homes.m = map[string]directory.Entry{}
	g.homes.mu.Unlock()
	if g.Cl == nil {
		return
	}
	for client, e := range m {
		g.Cl.Dir.Unregister(local.ClientGrainID(client), e)
	}
}

// HomeEntries lists the directory entries of the clients at home here.
func (g *Gateway) HomeEntries() []directory.Item {
	g.homes.mu.Lock()
	defer g.homes.mu.Unlock()
	out := make([]directory.Item, 0, len(g.homes.m))
	for client, e := range g.homes.m {
		out = append(out, directory.Item{ID: local.ClientGrainID(client), Entry: e})
	}
	return out
}

// DeliverObserver sends a call to an observer of client on the client's
// stream, when this gateway is its home, and reports whether it is.
func (g *Gateway) DeliverObserver(client string, c *local.Call) bool {
	if !g.isHome(client) {
		return false
	}
	s := g.s
	o := cluster.NewOutgoing()
	defer o.Free()
	env := o.Env
	env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST
	if c.OneWay {
		env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY
	}
	env.GrainType, env.GrainKey, env.Observer = c.ID.Type, c.ID.Key, true
	env.Method, env.MethodIndex = c.Method.Name, uint32(c.Method.Index)
	switch {
	case c.Raw != nil:
		env.Payload = c.Raw
	case c.Req != nil:
		if err := o.Encode(c.Req); err != nil {
			s.Fail(nil, c, status.Errorf(codes.InvalidArgument, "granary: encoding the request to %s.%s: %v", c.ID, c.Method.Name, err))
			return true
		}
	}
	left := c.Due - s.CallNow()
	if left <= 0 {
		s.Fail(nil, c, local.DeadlineError(c))
		return true
	}
	env.TimeoutNanos = int64(left)
	deadline := s.Epoch.Add(c.Due)
	if c.OneWay {
		if err := g.tport.SendAccepted(client, env, deadline); err != nil {
			g.log.Debug("a one-way call to an observer was not sent", zap.Stringer("observer", c.ID), zap.Error(err))
		}
		c.Release()
		return true
	}
	// Not counted in the gateway's inflight: Stop does not wait for a
	// client to answer its observers; closing the stream fails what is
	// unanswered.
	g.tport.CallAccepted(client, env, deadline, func(resp *granaryv1.Envelope, err error) {
		if err != nil {
			if transport.NotSent(err) {
				err = local.ObserverGone(c.ID)
			}
			s.Fail(nil, c, err)
			return
		}
		if err := transport.StatusOf(resp); err != nil {
			s.Fail(nil, c, err)
			return
		}
		out := c.Method.NewResponse()
		if err := proto.Unmarshal(resp.Payload, out); err != nil {
			s.Fail(nil, c, status.Errorf(codes.Internal, "granary: the reply of observer %s.%s does not decode: %v", c.ID, c.Method.Name, err))
			return
		}
		c.Settle(nil, out, nil)
		c.Release()
	})
	return true
}
