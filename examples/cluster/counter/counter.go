// Package counter implements the Counter grain of the cluster examples
// (proto/examples/cluster): a count that Add increases, whose reply says
// which silo and activation answered. The cluster example
// (examples/cluster) and the example silo binary (examples/silo) both
// host it.
//
// Register chooses where the count lives. In memory it lives as long as
// its activation: a counter activated again, after collection or on
// another silo after its silo died, starts from zero. As persistent state
// (State, kept by the silo's default storage provider) it is read when the
// counter activates and written on every Add that changes it (an Add of
// 0 reads it again), so a counter activated again goes on from its stored
// count, and an Add that was acknowledged is never forgotten.
package counter

import (
	"github.com/granaryio/granary/grain"
	clusterpb "github.com/granaryio/granary/proto/examples/cluster"
	"github.com/granaryio/granary/silo"
)

// State declares a counter's persistent count, kept by the silo's default
// storage provider under the state name "count".
var State = grain.NewStateSpec[*clusterpb.CounterState]("count", "")

// Register registers the Counter grain type on s, with its count as
// persistent state if persistent (s then needs a default storage
// provider: Config.Storage or, for a silo alone, Config.DataDir), else
// in memory. Call it before s.Start.
func Register(s *silo.Silo, persistent bool) error {
	// A counter reports the silo it runs on: its member ID in a cluster,
	// its name alone. Counters activate only once Start has joined the
	// cluster, when Member is set.
	where := func() string {
		if m := s.Member(); m != "" {
			return m
		}
		return s.Info().Name
	}
	if !persistent {
		newCounter := func(grain.ID) clusterpb.CounterGrain { return &memCounter{silo: where()} }
		return clusterpb.RegisterCounterGrain(s, newCounter)
	}
	newCounter := func(grain.ID) clusterpb.CounterGrain { return &storedCounter{silo: where()} }
	return clusterpb.RegisterCounterGrain(s, newCounter, grain.WithState(State))
}

// memCounter implements the Counter grain with its count in memory. Its
// fields are touched only by its activation's turns, which never overlap,
// so it needs no lock.
type memCounter struct {
	clusterpb.UnimplementedCounterGrain

	silo  string // the silo this activation runs on
	value int64
}

var _ clusterpb.CounterGrain = (*memCounter)(nil)

// Add adds to the count and says where it ran.
func (c *memCounter) Add(ctx grain.Context, req *clusterpb.AddRequest) (*clusterpb.AddReply, error) {
	c.value += req.GetDelta()
	return &clusterpb.AddReply{Value: c.value, Silo: c.silo, Activation: ctx.ActivationID()}, nil
}

// storedCounter implements the Counter grain with its count persistent
// state (State), read before the activation starts, written on every Add
// that changes it and read again by one that does not. Like memCounter,
// it needs no lock.
type storedCounter struct {
	clusterpb.UnimplementedCounterGrain

	silo  string // the silo this activation runs on
	state *grain.State[*clusterpb.CounterState]
}

var (
	_ clusterpb.CounterGrain = (*storedCounter)(nil)
	_ grain.Activator        = (*storedCounter)(nil)
)

// OnActivate takes the count the runtime read from storage.
func (c *storedCounter) OnActivate(ctx grain.Context) error {
	c.state = State.Of(ctx)
	return nil
}

// Add adds to the count, writes it, and says where it ran. An Add of 0
// changes nothing, so it reads the stored count instead of writing it:
// the answer is storage's, even from an activation that another has
// outdated. If the write or that read fails, the count stays as it was
// and the activation deactivates: the
// write may have been stored anyway, or another activation of the
// counter (a transient duplicate) may have written since this one read,
// so this one's count and ETag can no longer be trusted, and the next
// call reads them again.
func (c *storedCounter) Add(ctx grain.Context, req *clusterpb.AddRequest) (*clusterpb.AddReply, error) {
	v := c.state.Value()
	if req.GetDelta() == 0 {
		if err := c.state.Read(ctx); err != nil {
			ctx.DeactivateOnIdle()
			return nil, err
		}
		return &clusterpb.AddReply{Value: c.state.Value().Value, Silo: c.silo, Activation: ctx.ActivationID()}, nil
	}
	old := v.Value
	v.Value += req.GetDelta()
	if err := c.state.Write(ctx); err != nil {
		v.Value = old
		ctx.DeactivateOnIdle()
		return nil, err
	}
	return &clusterpb.AddReply{Value: v.Value, Silo: c.silo, Activation: ctx.ActivationID()}, nil
}
