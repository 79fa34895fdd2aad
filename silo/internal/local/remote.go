package local

import (
	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
)

// Cluster is the cluster side as the local runtime sees it: what the
// runtime asks of the other silos. A silo alone has none.
type Cluster interface {
	// Self is this silo's member ID.
	Self() string
	// Resolve routes a call whose grain has no activation here: it asks
	// the directory, places the grain, or forwards the call. t is nil for
	// a type this silo does not host.
	Resolve(c *Call, t *GrainType)
	// Forward sends a call on to the activation that entry names; placed
	// says placement chose that silo.
	Forward(to directory.Entry, c *Call, placed bool)
	// Register registers a new activation in the directory and then
	// starts it (Runtime.StartActivation) or gives it up.
	Register(a *Activation)
	// Unregister removes a dead activation's directory entry.
	Unregister(a *Activation)
	// Reply answers the silo a call came from.
	Reply(c *Call)
	// ResolveObserver routes a call to an observer of client to the
	// client's home gateway.
	ResolveObserver(c *Call, client string)
	// RemindersChanged tells the silo that owns id's reminders, whose
	// ring position is h, that they changed.
	RemindersChanged(id grain.ID, h uint64)
}

// Gateway is the client gateway as the local runtime sees it. A silo
// that serves no clients has none.
type Gateway interface {
	// Reply answers the client a call came from.
	Reply(c *Call)
	// DeliverObserver sends a call to an observer of client, if this
	// gateway is the client's home; it reports whether it was.
	DeliverObserver(client string, c *Call) bool
	// HomeEntries are the directory entries of the clients whose home is
	// this gateway.
	HomeEntries() []directory.Item
}
