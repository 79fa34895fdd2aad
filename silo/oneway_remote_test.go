package silo

import (
	"testing"

	"github.com/granaryio/granary/proto/probe"
)

// TestOneWayRequestsFromAnotherSiloRunInTheOrderSent: one-way requests
// that four senders on one silo send to a grain on another run in each
// sender's order, none lost, and a call a sender makes between them runs
// after all it sent before.
func TestOneWayRequestsFromAnotherSiloRunInTheOrderSent(t *testing.T) {
	t.Parallel()
	caller, _ := probePair(t, func() probe.ProbeGrain { return &sequenceProbe{last: map[string]int64{}} }, func(name string) func(*Config) {
		// The senders outrun the grain: no request may be refused at a
		// queue limit (which would show as a gap, not as disorder).
		return func(cfg *Config) { cfg.QueueLimits = QueueLimits{} }
	})
	sendInOrder(t, probe.NewProbeRef(caller, "ordered"), 4, 100_000, 10_000)
}
