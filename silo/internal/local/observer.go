package local

import (
	"context"
	"strings"

	"github.com/granaryio/granary/grain"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Observers are objects of external clients that grains call. An
// observer's ID is its service's type and a key made of the client's ID,
// '/', and a number the client picked. A client names one gateway as its
// home, which registers the client (clientGrainID) in the directory; a
// call to an observer goes to any silo, which finds the client's home in
// the directory and forwards the call there, and the home gateway sends
// it to the client on the stream the client dialled.

// clientType is the directory's grain type for clients: the entry of
// clientGrainID(c) names the silo whose gateway is client c's home.
const clientType = "granary.v1.Client"

// ClientGrainID is the directory ID of a client.
func ClientGrainID(client string) grain.ID { return grain.ID{Type: clientType, Key: client} }

// DirID is the ID under which the directory knows where the call goes:
// its grain's, or for a call to an observer, its client's.
func (c *Call) DirID() grain.ID {
	if c.Method.Observe != nil {
		if client, _, ok := strings.Cut(c.ID.Key, "/"); ok {
			return ClientGrainID(client)
		}
	}
	return c.ID
}

// ObserverGone is the error of a call to an observer whose client is not
// connected any more.
func ObserverGone(id grain.ID) error {
	return status.Errorf(codes.NotFound, "granary: observer %s is gone: its client is not connected", id)
}

// RouteObserver routes a call to an observer: to its client, when this
// silo's gateway is the client's home, else to the home the directory
// names.
func (s *Runtime) RouteObserver(c *Call) {
	client, _, ok := strings.Cut(c.ID.Key, "/")
	switch {
	case !ok || client == "":
		s.Fail(nil, c, status.Errorf(codes.InvalidArgument, "granary: %s is not an observer's ID: its key must be a client's ID, '/', and a number", c.ID))
	case s.Gw != nil && s.Gw.DeliverObserver(client, c):
	case s.Cl == nil:
		s.Fail(nil, c, ObserverGone(c.ID))
	default:
		s.Cl.ResolveObserver(c, client)
	}
}

// RelayKey names a method of a type this silo does not host.
type RelayKey struct {
	Type, Method string
	Index        uint32
	Observer     bool
}

// maxRelays bounds the relay descriptors kept: calls for more distinct
// methods get a new descriptor each.
const maxRelays = 4096

// relayObserve marks the relay descriptors of observer methods. This silo
// never calls it: observers run in their clients.
func relayObserve(any, context.Context, proto.Message) (proto.Message, error) {
	return nil, status.Error(codes.Internal, "granary: an observer runs in its client, not in a silo")
}

// RelayMethod returns a descriptor for a method of a grain type this
// silo does not host, or of an observer: its request and response decode
// as Empty, which keeps every field as unknown and encodes it back
// unchanged, so the call passes through as it came. The silo that runs
// it, or the client, checks the method.
func (s *Runtime) RelayMethod(k RelayKey) *grain.MethodDesc {
	if m, ok := s.relays.Load(k); ok {
		return m.(*grain.MethodDesc)
	}
	empty := func() proto.Message { return new(emptypb.Empty) }
	m := &grain.MethodDesc{Name: k.Method, FullName: "/" + k.Type + "/" + k.Method, Index: int(k.Index), NewRequest: empty, NewResponse: empty}
	if k.Observer {
		m.Observe = relayObserve
	}
	if s.relayCount.Load() < maxRelays {
		if prev, loaded := s.relays.LoadOrStore(k, m); loaded {
			return prev.(*grain.MethodDesc)
		}
		s.relayCount.Add(1)
	}
	return m
}
