package silo

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/testwait"
	"github.com/granaryio/granary/proto/probe"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// partitionHealTimeout is how long the cluster has, once its membership
// converged after a partition healed, to be back to one activation per
// grain: a membership round and a directory round, with room for -race.
const partitionHealTimeout = 5 * time.Second

// TestClusterPartitionHealLeavesOneActivation: silo c is cut off from a
// and b (membership and network) until each side takes the other for
// dead, while every grain is called from both sides, so most grains get
// an activation on each side. Once the partition heals and the
// membership converges, every grain must be back to one activation in
// the whole cluster, named by its entry at its owner, within a bounded
// time and without calls: a duplicate that only a later call would trip
// over is still a duplicate.
//
// "together": every silo hears of the heal at once.
//
// "first message lost": the order of the chaos run in Docker, where
// gossip is back before every silo has heard of it, and a message right
// after the heal can fail. c hears first, and re-registers its grains
// at a while a still takes c for dead, so a sends them back unplaced;
// then a hears, but its request that c register everything again
// (OpResync) fails, as the first message on a link just back may. c's
// registrations must be sent again until they land (they were dropped
// once), and so must the resync request.
func TestClusterPartitionHealLeavesOneActivation(t *testing.T) {
	t.Parallel()
	for _, heal := range []string{"together", "first message lost"} {
		t.Run(heal, func(t *testing.T) {
			t.Parallel()
			testPartitionHeal(t, heal)
		})
	}
}

func testPartitionHeal(t *testing.T, heal string) {
	logs := map[string]*observer.ObservedLogs{}
	tc := newTestCluster(t, []string{"a", "b", "c"}, clusterOpt{tweak: func(cfg *Config) {
		core, obs := observer.New(zapcore.DebugLevel)
		logs[cfg.Name] = obs // silos start one at a time
		if cfg.Logger != nil {
			core = zapcore.NewTee(core, cfg.Logger.Core())
		}
		cfg.Logger = zap.New(core)
	}})
	a, b, c := tc.silo("a"), tc.silo("b"), tc.silo("c")
	silos := []*Silo{a, b, c}
	ks := keys("heal", 90)
	for i, k := range ks {
		if _, err := tc.call(silos[i%3], k, nil); err != nil {
			t.Fatal(err)
		}
	}

	tc.hub.Partition([]string{c.Member()}, []string{a.Member(), b.Member()})
	tc.net.Partition([]string{addrOf("c")}, []string{addrOf("a"), addrOf("b")})
	testwait.For(t, defaultTestTimeout, "both sides to see the partition", func() bool {
		return ringLen(a) == 2 && ringLen(b) == 2 && ringLen(c) == 1
	})
	for _, via := range silos {
		for _, k := range ks {
			if _, err := tc.call(via, k, nil); err != nil {
				t.Fatalf("calling %s through %s during the partition: %v", k, via.cfg.Name, err)
			}
		}
	}
	dups := 0
	for _, k := range ks {
		if len(holders(silos, k)) > 1 {
			dups++
		}
	}
	if dups == 0 {
		t.Fatal("the partition made no duplicate activation: the test exercises nothing")
	}
	t.Logf("%d of %d grains have an activation on each side of the partition", dups, len(ks))

	switch heal {
	case "together":
		tc.hub.Heal()
		tc.net.Heal()
	case "first message lost":
		tc.hub.Hold(a.Member())
		dropped := a.Stats().Cluster.Directory.Dropped
		tc.hub.Heal()
		tc.net.Heal()
		testwait.For(t, defaultTestTimeout, "a to send c's registrations back while it takes c for dead", func() bool {
			return ringLen(b) == 3 && ringLen(c) == 3 &&
				a.Stats().Cluster.Directory.Dropped > dropped
		})
		// The link from a to c fails once more while a hears of c.
		tc.net.Partition([]string{addrOf("c")}, []string{addrOf("a")})
		tc.hub.Release(a.Member())
		testwait.For(t, defaultTestTimeout, "a's request that c register again to fail", func() bool {
			return logs["a"].FilterMessageSnippet("asking a silo to register again failed").Len() > 0
		})
		tc.net.Heal()
	}
	tc.waitConverged()
	if heal == "first message lost" {
		// The request that failed is asked again, and arrives.
		testwait.For(t, defaultTestTimeout, "c to hear a's request to register again", func() bool {
			return logs["c"].FilterMessageSnippet("another silo took this one for dead").
				FilterField(zap.String("from", a.Member())).Len() > 0
		})
	}

	var problems []string
	t.Cleanup(func() {
		if t.Failed() && len(problems) > 0 {
			slices.Sort(problems)
			if n := len(problems); n > 10 {
				problems = append(problems[:10], fmt.Sprintf("... and %d more", n-10))
			}
			t.Logf("what was wrong last:\n\t%s", strings.Join(problems, "\n\t"))
		}
	})
	testwait.For(t, partitionHealTimeout, "the cluster to be back to one activation per grain after the membership converged", func() bool {
		problems = singleActivationProblems(silos, ks)
		return len(problems) == 0
	})
}

// singleActivationProblems checks, for each probe key, that at most one
// silo holds an activation of it and that the entry at the grain's owner
// names that activation; it returns what it found wrong.
func singleActivationProblems(silos []*Silo, ks []string) []string {
	names := map[string]string{} // member ID → silo name
	entries := map[grain.ID]directory.Entry{}
	for _, s := range silos {
		names[s.Member()] = s.cfg.Name
		for _, it := range entriesOf(s) {
			if ownerOf(s, it.ID) == s.Member() {
				entries[it.ID] = it.Entry
			}
		}
	}
	var problems []string
	for _, k := range ks {
		var acts []string
		var held directory.Entry
		for _, s := range silos {
			if a := localActivation(s, probe.ProbeGrainType, k); a != nil {
				acts = append(acts, fmt.Sprintf("%s#%d", s.cfg.Name, a.ActID))
				held = directory.Entry{Silo: s.Member(), Activation: a.ActID}
			}
		}
		e, ok := entries[probeGrainID(k)]
		entry := "none"
		if ok {
			entry = fmt.Sprintf("%s#%d", names[e.Silo], e.Activation)
		}
		switch {
		case len(acts) > 1:
			problems = append(problems, fmt.Sprintf("%s: %d activations %v, entry %s", k, len(acts), acts, entry))
		case len(acts) == 1 && e != held:
			problems = append(problems, fmt.Sprintf("%s: activation %s, entry %s", k, acts[0], entry))
		}
	}
	return problems
}
