package protoactor

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
)

// agentProvider is a cluster provider over protoactor's in-memory test
// agent (test.InMemAgent): each member registers with the agent, and
// every change the agent sees becomes the members' cluster topology, as
// with protoactor's own test provider (test.Provider). Unlike that
// provider it starts no goroutine of its own: test.Provider refreshes its
// entry's TTL from a goroutine that never ends, not even after Shutdown,
// and that holds its cluster and actor system, with any grains still in
// it, in memory for the life of the process. The agent never expires
// entries, so the refresh changes nothing.
//
// A member that has left stops following the agent: were it to learn that
// it is no longer in the cluster, its identity lookup would stop all its
// grains one by one (see keptLookup).
type agentProvider struct {
	agent   *test.InMemAgent
	cluster *cluster.Cluster
	left    atomic.Bool
}

func newAgentProvider(agent *test.InMemAgent) *agentProvider {
	return &agentProvider{agent: agent}
}

// StartMember registers the member with the agent.
func (p *agentProvider) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return err
	}
	p.cluster = c
	p.agent.SubscribeStatusUpdate(p.update)
	p.agent.RegisterService(test.NewAgentServiceStatus(c.ActorSystem.ID, host, port, c.GetClusterKinds()))
	return nil
}

// StartClient follows the agent without registering with it.
func (p *agentProvider) StartClient(c *cluster.Cluster) error {
	p.cluster = c
	p.agent.SubscribeStatusUpdate(p.update)
	p.agent.ForceUpdate()
	return nil
}

// Shutdown removes the member from the agent.
func (p *agentProvider) Shutdown(bool) error {
	p.left.Store(true)
	p.agent.DeregisterService(p.cluster.ActorSystem.ID)
	return nil
}

// update hands the members the agent knows to the cluster.
func (p *agentProvider) update() {
	if p.left.Load() {
		return
	}
	services := p.agent.GetStatusHealth()
	members := make([]*cluster.Member, 0, len(services))
	for _, s := range services {
		members = append(members, &cluster.Member{
			Id:    s.ID,
			Host:  s.Host,
			Port:  int32(s.Port),
			Kinds: append([]string(nil), s.Kinds...),
		})
	}
	p.cluster.MemberList.UpdateClusterTopology(members)
}

// keptLookup is an identity lookup whose Shutdown leaves the grains be.
// Shutting the disthash lookup down stops its placement actor, which
// stops every grain it placed and, for each that stops, searches all it
// placed: time in the square of their number, some 20 s for 100,000
// grains and half an hour or more for a million. A member shut down with
// this lookup keeps its grains, idle (they run no goroutine), until the
// member is garbage.
type keptLookup struct{ cluster.IdentityLookup }

// Shutdown does nothing.
func (keptLookup) Shutdown() {}

// lookup wraps protoactor's disthash identity lookup.
func lookup(l cluster.IdentityLookup) cluster.IdentityLookup { return keptLookup{l} }

var _ cluster.ClusterProvider = (*agentProvider)(nil)
