package silo

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
)

// StateOps counts the persistent-state operations grains made through
// one storage provider, or through all of them: each read, write and
// clear that reached the provider, and of those, the ones that failed.
// Reads include the read before an activation's OnActivate.
type StateOps struct {
	Reads, Writes, Clears uint64
	// ReadFailures, WriteFailures and ClearFailures count the operations
	// the provider answered with an error: the store could not be
	// reached or failed, the state was too large, the call's context
	// ended, or the ETag was stale.
	ReadFailures, WriteFailures, ClearFailures uint64
	// Conflicts counts the writes and clears refused for a stale ETag
	// (another activation wrote first); they count as failures too.
	Conflicts uint64
}

// Failures is the number of failed operations of every kind.
func (o StateOps) Failures() uint64 { return o.ReadFailures + o.WriteFailures + o.ClearFailures }

func (o *StateOps) add(x StateOps) {
	o.Reads += x.Reads
	o.Writes += x.Writes
	o.Clears += x.Clears
	o.ReadFailures += x.ReadFailures
	o.WriteFailures += x.WriteFailures
	o.ClearFailures += x.ClearFailures
	o.Conflicts += x.Conflicts
}

// ProviderStateOps is the StateOps of one storage provider, by the name
// grain types give it in their state declarations.
type ProviderStateOps struct {
	Provider string
	StateOps
}

// StateStats is a snapshot of a silo's persistent-state counters since
// Start: the totals over every provider, and each provider's own.
type StateStats struct {
	StateOps
	// Providers holds every provider the silo resolved at Start, sorted
	// by name.
	Providers []ProviderStateOps
}

// StateStats returns the silo's persistent-state counters: all zero
// before Start. Any goroutine.
func (s *Silo) StateStats() StateStats {
	var st StateStats
	if !s.started.Load() {
		return st // openStorage has not published the providers
	}
	for name, p := range s.providers {
		cp, ok := p.(*countingProvider)
		if !ok {
			continue
		}
		ops := cp.snapshot()
		st.add(ops)
		st.Providers = append(st.Providers, ProviderStateOps{Provider: name, StateOps: ops})
	}
	slices.SortFunc(st.Providers, func(a, b ProviderStateOps) int { return strings.Compare(a.Provider, b.Provider) })
	return st
}


// countingProvider is a storage provider that counts the operations it
// passes on. Any goroutine.
type countingProvider struct {
	storage.Provider

	reads, writes, clears                      atomic.Uint64
	readFailures, writeFailures, clearFailures atomic.Uint64
	conflicts                                  atomic.Uint64
}

func (c *countingProvider) ReadState(ctx context.Context, id grain.ID, name string) (storage.Record, error) {
	c.reads.Add(1)
	r, err := c.Provider.ReadState(ctx, id, name)
	if err != nil {
		c.readFailures.Add(1)
	}
	return r, err
}

func (c *countingProvider) WriteState(ctx context.Context, id grain.ID, name string, data []byte, etag string) (string, error) {
	c.writes.Add(1)
	e, err := c.Provider.WriteState(ctx, id, name, data, etag)
	if err != nil {
		c.writeFailures.Add(1)
		c.maybeConflict(err)
	}
	return e, err
}

func (c *countingProvider) ClearState(ctx context.Context, id grain.ID, name string, etag string) (string, error) {
	c.clears.Add(1)
	e, err := c.Provider.ClearState(ctx, id, name, etag)
	if err != nil {
		c.clearFailures.Add(1)
		c.maybeConflict(err)
	}
	return e, err
}

func (c *countingProvider) maybeConflict(err error) {
	if errors.Is(err, storage.ErrETagMismatch) {
		c.conflicts.Add(1)
	}
}

func (c *countingProvider) snapshot() StateOps {
	return StateOps{
		Reads:         c.reads.Load(),
		Writes:        c.writes.Load(),
		Clears:        c.clears.Load(),
		ReadFailures:  c.readFailures.Load(),
		WriteFailures: c.writeFailures.Load(),
		ClearFailures: c.clearFailures.Load(),
		Conflicts:     c.conflicts.Load(),
	}
}
