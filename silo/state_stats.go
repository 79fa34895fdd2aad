package silo

import (
	"slices"
	"strings"

	"github.com/granaryio/granary/silo/internal/local"
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
	if !s.rt.Started.Load() {
		return st // openStorage has not published the providers
	}
	for name, p := range s.rt.Providers {
		cp, ok := p.(*local.CountingProvider)
		if !ok {
			continue
		}
		ops := StateOps(cp.Snapshot())
		st.add(ops)
		st.Providers = append(st.Providers, ProviderStateOps{Provider: name, StateOps: ops})
	}
	slices.SortFunc(st.Providers, func(a, b ProviderStateOps) int { return strings.Compare(a.Provider, b.Provider) })
	return st
}
