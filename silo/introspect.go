package silo

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/internal/cluster"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/membership"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file answers operators: what a silo is, who its peers are, where a
// grain is active, which activations are busiest. The admin HTTP server
// (package silo/admin) serves it; none of it is on a call's path.

// Info describes a silo for operators.
type Info struct {
	Name string
	// Member is the silo's member ID in its cluster, "" for a silo alone.
	Member string
	// Status is "joining" until Start returns, "active" while the silo
	// serves, "shutting-down" from Stop or Close, and "stopped" once they
	// are done.
	Status string
	// Started is when Start began, by the silo's clock; zero before.
	Started time.Time
	// The addresses the silo serves on, as others reach them; "" for what
	// it does not serve.
	GossipAddr, GRPCAddr, GatewayAddr, AdminAddr string
}

// Statuses of Info.Status.
const (
	StatusJoining      = "joining"
	StatusActive       = "active"
	StatusShuttingDown = "shutting-down"
	StatusStopped      = "stopped"
)

// Info returns the silo's description. Any goroutine.
func (s *Silo) Info() Info {
	in := Info{Name: s.cfg.Name, AdminAddr: s.cfg.AdminAddr, Status: s.status()}
	if t := s.startedAt.Load(); t != nil {
		in.Started = *t
	}
	if s.published() {
		in.Member = s.Member()
		in.GossipAddr, in.GRPCAddr = s.ClusterAddrs()
		in.GatewayAddr = s.advertisedGateway()
	}
	return in
}

// advertisedGateway is the gateway address clients are told to dial, or
// the bound one when there is none to tell; "" without a gateway.
func (s *Silo) advertisedGateway() string {
	if s.gw != nil && s.gw.Addr != "" {
		return s.gw.Addr
	}
	return s.GatewayAddr()
}

func (s *Silo) status() string {
	switch {
	case s.rt.Closed.Err() != nil:
		return StatusStopped
	case s.rt.Stopping.Load():
		return StatusShuttingDown
	case s.up.Load():
		return StatusActive
	}
	return StatusJoining
}

// Ready returns nil while the silo serves calls: Start has returned (the
// silo joined its cluster and its gateway serves) and Stop has not begun.
// Otherwise it says why not. Any goroutine.
func (s *Silo) Ready() error {
	switch st := s.status(); st {
	case StatusActive:
		return nil
	case StatusJoining:
		return errors.New("silo: not started yet")
	default:
		return errors.New("silo: " + st)
	}
}

// Members returns the cluster's live members sorted by ID, this silo
// included, as the membership last gossiped them; a silo alone returns
// one member for itself, with its load as of now, and so does a silo
// whose Start has not returned. Under mutual TLS a member that gossip
// knows but that has not yet proved a silo certificate of the cluster's
// CA is left out: it is no member of the cluster. Any goroutine.
func (s *Silo) Members() []membership.Member {
	if cl := s.startedCluster(); cl != nil && cl.Mship != nil {
		ms := cl.Mship.Members()
		if cl.Gate != nil {
			cl.ViewMu.Lock()
			ms = slices.DeleteFunc(ms, func(m membership.Member) bool {
				_, admitted := cl.Members[m.ID]
				return m.ID != cl.SelfID && !admitted
			})
			cl.ViewMu.Unlock()
		}
		return ms
	}
	st := membership.StatusActive
	switch s.status() {
	case StatusJoining:
		st = membership.StatusJoining
	case StatusShuttingDown:
		st = membership.StatusShuttingDown
	case StatusStopped:
		st = membership.StatusDead
	}
	m := membership.Member{
		ID: s.cfg.Name, Name: s.cfg.Name, GatewayAddr: s.advertisedGateway(), AdminAddr: s.cfg.AdminAddr,
		Types: s.rt.HostedTypes(), Status: st, Activations: uint64(max(s.rt.Live.Load(), 0)),
	}
	if s.rt.Pool != nil {
		m.Queued = uint64(s.rt.Pool.Stats().QueuedGroups)
	}
	return []membership.Member{m}
}

// TypeStats is a grain type's share of a silo's activations.
type TypeStats struct {
	Type        string
	Activations int // in the catalog: activating, serving or deactivating
}

// TypeStats returns every registered grain type with its activation
// count, sorted by type. Any goroutine.
func (s *Silo) TypeStats() []TypeStats {
	out := make([]TypeStats, 0, len(s.rt.Types))
	for name, t := range s.rt.Types {
		out = append(out, TypeStats{Type: name, Activations: int(max(t.Live.Load(), 0))})
	}
	slices.SortFunc(out, func(a, b TypeStats) int { return cmp.Compare(a.Type, b.Type) })
	return out
}

// Lookup says where grain id is active: the member ID of the silo that
// holds its activation (this silo's name for a silo alone), or found
// false. In a cluster it asks the directory, past this silo's cache; a
// stateless worker, which the directory does not hold, is found only on
// this silo. Errors: NotFound for a type no silo hosts, InvalidArgument
// for a malformed ID, Unavailable before Start has returned or when the
// directory cannot answer. Any goroutine.
func (s *Silo) Lookup(ctx context.Context, id grain.ID) (member string, found bool, err error) {
	if !s.up.Load() {
		return "", false, status.Error(codes.Unavailable, s.Ready().Error())
	}
	if err := s.checkAdminID(id); err != nil {
		return "", false, err
	}
	if t := s.rt.Types[id.Type]; t != nil && (t.Opts.StatelessWorker || s.cl == nil) {
		if len(s.localActivations(id)) > 0 {
			return s.self(), true, nil
		}
		return "", false, nil
	}
	type answer struct {
		e     directory.Entry
		found bool
		err   error
	}
	ch := make(chan answer, 1)
	s.cl.Dir.LookupOwner(id, func(e directory.Entry, found bool, err error) { ch <- answer{e, found, err} })
	select {
	case a := <-ch:
		if a.err != nil {
			return "", false, a.err
		}
		return a.e.Silo, a.found, nil
	case <-ctx.Done():
		return "", false, status.FromContextError(ctx.Err()).Err()
	}
}

// Deactivate asks grain id's activations on this silo (one, or a
// stateless worker's several) to deactivate once the requests they run
// end, with grain.DeactivateOperator; a request that arrives meanwhile
// activates the grain again. It reports whether there was one here; it
// does not wait for the deactivation. Any goroutine.
func (s *Silo) Deactivate(ctx context.Context, id grain.ID) (bool, error) {
	if err := s.checkAdminID(id); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, status.FromContextError(err).Err()
	}
	acts := s.localActivations(id)
	for _, a := range acts {
		a.RequestDeactivation(grain.DeactivateOperator)
	}
	return len(acts) > 0, nil
}

// checkAdminID checks an ID an operator gave.
func (s *Silo) checkAdminID(id grain.ID) error {
	switch {
	case id.Type == "" || id.Key == "":
		return status.Errorf(codes.InvalidArgument, "granary: grain ID %q needs a type and a key", id)
	case s.rt.Types[id.Type] == nil && !s.hostedElsewhere(id.Type):
		return local.UnknownType(id)
	}
	return nil
}

// hostedElsewhere reports whether another silo of the cluster hosts
// grainType, as far as this one knows.
func (s *Silo) hostedElsewhere(grainType string) bool {
	cl := s.startedCluster()
	return cl != nil && len(cl.View.Load().Hosts[grainType]) > 0
}

// published reports whether what Start sets up (the pool, the cluster,
// the gateway, the reminder service), which it writes without a lock, may
// be read: Start has returned, or the silo is stopping (Start's failure
// sets stopping after it). Any goroutine.
func (s *Silo) published() bool { return s.up.Load() || s.rt.Stopping.Load() }

// startedCluster returns the silo's cluster once published (nil for a
// silo alone, and before then).
func (s *Silo) startedCluster() *cluster.Cluster {
	if s.published() {
		return s.cl
	}
	return nil
}

// localActivations returns grain id's activations in this silo's catalog.
func (s *Silo) localActivations(id grain.ID) []*local.Activation {
	t := s.rt.Types[id.Type]
	if t == nil {
		return nil
	}
	if a, ok := t.Acts.Load(id.Key); ok {
		return []*local.Activation{a}
	}
	if v, ok := t.Sets.Load(id.Key); ok {
		return v.(*local.WorkerSet).Snapshot()
	}
	return nil
}

// self names this silo as Lookup does: its member ID, or its name alone.
func (s *Silo) self() string {
	if m := s.Member(); m != "" {
		return m
	}
	return s.cfg.Name
}

// GrainLoad is an activation's requests over a sampling interval.
type GrainLoad struct {
	ID    grain.ID
	Calls uint64
}

// HotGrains returns the n activations of this silo that received the most
// requests since the previous HotGrains call (since they were made, for
// those made since), the busiest first, leaving out those that received
// none. It visits every activation, so call it from one periodic sampler,
// not per request. Any goroutine; calls are serialised.
func (s *Silo) HotGrains(n int) []GrainLoad {
	if n <= 0 {
		return nil
	}
	s.hotMu.Lock()
	defer s.hotMu.Unlock()
	top := make([]GrainLoad, 0, n+1) // sorted, the busiest first
	s.rt.ForEachActivation(func(a *local.Activation) {
		a.Mu.Lock()
		d := uint64(a.Calls - a.Sampled) // wraps safely: the counters are 32 bits
		a.Sampled = a.Calls
		a.Mu.Unlock()
		if d == 0 || len(top) == n && d <= top[n-1].Calls {
			return
		}
		i, _ := slices.BinarySearchFunc(top, d, func(g GrainLoad, d uint64) int { return cmp.Compare(d, g.Calls) })
		top = slices.Insert(top, i, GrainLoad{ID: a.ID, Calls: d})
		if len(top) > n {
			top = top[:n]
		}
	})
	return top
}
