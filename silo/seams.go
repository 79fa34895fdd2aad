package silo

import (
	"time"

	"github.com/granaryio/granary/grain"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The cluster seams. A single silo uses the local implementations below;
// the cluster supplies distributed ones. The silo consults them only when
// a grain has no activation here, never on a call to a local activation.

// Directory maps grain IDs to the silo that holds their activation.
// Implementations must be safe for concurrent use and must not block on a
// turn's behalf for long: they are called when an activation starts and
// ends, and when a call finds no local activation.
type Directory interface {
	// Register records that silo activated id, unless another silo did
	// first; it returns the silo that holds the activation.
	Register(id grain.ID, silo string) (owner string)
	// Unregister forgets id's activation on silo, if that is the one
	// recorded.
	Unregister(id grain.ID, silo string)
	// Lookup returns the silo that holds id's activation, if any.
	Lookup(id grain.ID) (silo string, ok bool)
}

// Placer picks the silo on which to activate a grain that has no
// activation anywhere. It must not block.
type Placer interface {
	Place(id grain.ID, opts grain.TypeOptions, caller string) (silo string, err error)
}

// Transport carries calls to other silos. Forward must not block: it
// queues the call and calls done exactly once, on any goroutine, with the
// reply or a failure (Unavailable when the silo cannot be reached).
type Transport interface {
	Forward(to string, id grain.ID, m *grain.MethodDesc, req proto.Message, deadline time.Time, done func(proto.Message, error))
}

// localDirectory is the directory of a silo alone: every activation is
// local, and the catalog already knows them.
type localDirectory struct{}

func (localDirectory) Register(_ grain.ID, silo string) string { return silo }
func (localDirectory) Unregister(grain.ID, string)             {}
func (localDirectory) Lookup(grain.ID) (string, bool)          { return "", false }

// localPlacer places every grain on the calling silo.
type localPlacer struct{}

func (localPlacer) Place(_ grain.ID, _ grain.TypeOptions, caller string) (string, error) {
	return caller, nil
}

// noTransport is the transport of a silo alone: there is no other silo.
type noTransport struct{}

func (noTransport) Forward(to string, id grain.ID, _ *grain.MethodDesc, _ proto.Message, _ time.Time, done func(proto.Message, error)) {
	done(nil, status.Errorf(codes.Unavailable, "granary: %s is placed on silo %q, and this silo has no transport to other silos", id, to))
}

// placeRemote asks the directory and placement where a grain without a
// local activation lives; it returns "" when it belongs here.
func (s *Silo) placeRemote(id grain.ID, t *grainType) (string, error) {
	if owner, ok := s.dir.Lookup(id); ok && owner != s.cfg.Name {
		return owner, nil
	}
	to, err := s.placer.Place(id, t.opts, s.cfg.Name)
	if err != nil || to == s.cfg.Name {
		return "", err
	}
	return to, nil
}

// forward sends a call to another silo.
func (s *Silo) forward(to string, c *call) {
	s.tport.Forward(to, c.id, c.method, c.req, c.deadline(), func(resp proto.Message, err error) {
		c.settle(nil, resp, err)
		c.release()
	})
}
