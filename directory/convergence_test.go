package directory_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
)

// soakSeeds runs TestConvergence on more histories than the default:
// go test ./directory -run Convergence -seeds 100000.
var soakSeeds = flag.Int("seeds", 0, "random histories per mode for TestConvergence (default 300)")

// TestConvergence plays random histories, joins, graceful leaves, crashes
// and their detection, activations, deactivations and lookups, with the
// network's messages delivered in random order, and checks the promise of
// the package at quiescence (see checkConverged).
//
// With common views every live silo installs each view at the same moment
// (messages still cross view changes in any order), and the strict promise
// holds: every activation still held is its grain's entry. With skewed
// views each silo installs the same views in the same order, but at its own
// moments; then at quiescence each grain still has at most one entry, at
// its owner, naming a live silo, but an activation may have lost its entry
// (it is caught at its owner's next change, or by a caller that finds it
// missing).
func TestConvergence(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 50
	}
	if *soakSeeds > 0 {
		seeds = uint64(*soakSeeds)
	}
	for _, skew := range []bool{false, true} {
		t.Run(map[bool]string{false: "common views", true: "skewed views"}[skew], func(t *testing.T) {
			var sum directory.Stats
			for seed := range seeds {
				s := newSim(t, seed, skew)
				s.run(120)
				if err := s.checkConverged(!skew); err != nil {
					t.Fatalf("seed %d: %v\nlast steps:\n%s", seed, err, strings.Join(s.trace[max(0, len(s.trace)-40):], "\n"))
				}
				for _, d := range s.dirs {
					st := d.Stats()
					sum.Forwarded += st.Forwarded
					sum.Refused += st.Refused
					sum.HandedOff += st.HandedOff
					sum.Dropped += st.Dropped
					sum.Lost += st.Lost
				}
			}
			t.Logf("%d histories: %d requests passed on, %d refused at the hop bound, %d entries handed off, %d dropped, %d activations lost",
				seeds, sum.Forwarded, sum.Refused, sum.HandedOff, sum.Dropped, sum.Lost)
		})
	}
}

// sim drives a cluster at random, as a membership layer and silos would.
type sim struct {
	*cluster
	r          *rand.Rand
	skew       bool
	view       []string            // the latest view: the active silos
	undetected []string            // crashed, still in view
	leaving    []string            // left the view, not yet gone
	pending    map[string][]mevent // skew: events each silo has yet to install
	gone       []string            // silos announced dead
	ids        []grain.ID
	names, act int
	trace      []string
}

// mevent is one membership event: a view, or a death.
type mevent struct {
	view []string
	dead string
}

func newSim(t *testing.T, seed uint64, skew bool) *sim {
	cfg := directory.DefaultConfig()
	cfg.Clock = clockwork.NewFakeClock()
	cfg.Logger = zap.NewNop()
	cfg.CacheSize = 8 // small, so eviction is exercised too
	cfg.HandoffBatch = 3
	s := &sim{
		cluster: newCluster(t, cfg),
		r:       rand.New(rand.NewPCG(seed, 0x5eed)),
		skew:    skew,
		pending: make(map[string][]mevent),
	}
	s.unregisterFailed = true
	for i := range 16 {
		s.ids = append(s.ids, grain.NewID("t", fmt.Sprint(i)))
	}
	for range 3 {
		s.join()
	}
	return s
}

func (s *sim) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf(format, args...))
}

// announce gives ev to every live silo: at once, or, with skew, into its
// queue of events to install later.
func (s *sim) announce(ev mevent, except string) {
	for _, silo := range s.live() {
		if silo == except {
			continue
		}
		if s.skew {
			s.pending[silo] = append(s.pending[silo], ev)
		} else {
			s.install(silo, ev)
		}
	}
}

func (s *sim) install(silo string, ev mevent) {
	if ev.view != nil {
		s.logf("%s installs %v", silo, ev.view)
		s.setMembers(silo, ev.view)
	}
	if ev.dead != "" {
		s.logf("%s: %s is dead", silo, ev.dead)
		s.dirs[silo].SiloDead(ev.dead)
	}
}

// members returns the silos of the view that run and stay.
func (s *sim) members() []string {
	var m []string
	for _, silo := range s.view {
		if !s.crashed[silo] {
			m = append(m, silo)
		}
	}
	return m
}

func (s *sim) pick(from []string) string { return from[s.r.IntN(len(from))] }

func (s *sim) join() {
	s.names++
	silo := fmt.Sprintf("s%d", s.names)
	s.add(silo)
	s.view = append(slices.Clone(s.view), silo)
	// The joining silo knows first. It learns of recent deaths too, as
	// from memberlist's state: messages the dead sent may still arrive.
	s.install(silo, mevent{view: s.view})
	for _, dead := range s.gone {
		s.dirs[silo].SiloDead(dead)
	}
	s.announce(mevent{view: s.view}, silo)
}

// leave makes silo deactivate its activations and leave the view; it goes
// for good at exit.
func (s *sim) leave(silo string) {
	s.logf("%s leaves", silo)
	for it := range s.localItems(silo) {
		s.deactivate(silo, it.ID, it.Entry)
	}
	s.view = slices.DeleteFunc(slices.Clone(s.view), func(x string) bool { return x == silo })
	s.install(silo, mevent{view: s.view})
	s.announce(mevent{view: s.view}, silo)
	s.leaving = append(s.leaving, silo)
}

func (s *sim) exit(silo string) {
	s.logf("%s exits", silo)
	s.leaving = slices.DeleteFunc(s.leaving, func(x string) bool { return x == silo })
	s.crash(silo)
	delete(s.pending, silo)
	s.gone = append(s.gone, silo)
	s.announce(mevent{dead: silo}, "")
}

func (s *sim) crashOne(silo string) {
	s.logf("%s crashes", silo)
	s.crash(silo)
	delete(s.pending, silo)
	s.undetected = append(s.undetected, silo)
}

func (s *sim) detect(silo string) {
	s.logf("%s detected dead", silo)
	s.undetected = slices.DeleteFunc(s.undetected, func(x string) bool { return x == silo })
	s.view = slices.DeleteFunc(slices.Clone(s.view), func(x string) bool { return x == silo })
	s.gone = append(s.gone, silo)
	s.announce(mevent{view: s.view, dead: silo}, "")
}

func (s *sim) installOne() bool {
	var waiting []string
	for _, silo := range s.live() {
		if len(s.pending[silo]) > 0 {
			waiting = append(waiting, silo)
		}
	}
	if len(waiting) == 0 {
		return false
	}
	silo := s.pick(waiting)
	ev := s.pending[silo][0]
	s.pending[silo] = s.pending[silo][1:]
	s.install(silo, ev)
	return true
}

func (s *sim) run(steps int) {
	for range steps {
		// Time passes, so recovery windows close as they would.
		s.cfg.Clock.(*clockwork.FakeClock).Advance(time.Duration(s.r.IntN(100)) * time.Millisecond)
		members := s.members()
		switch k := s.r.IntN(100); {
		case k < 5 && len(s.live()) < 7:
			s.join()
		case k < 8 && len(members) > 1:
			s.leave(s.pick(members))
		case k < 11 && len(s.leaving) > 0:
			s.exit(s.pick(s.leaving))
		case k < 14 && len(members) > 1:
			s.crashOne(s.pick(members))
		case k < 18 && len(s.undetected) > 0:
			s.detect(s.pick(s.undetected))
		case k < 40:
			silo, id := s.pick(members), s.ids[s.r.IntN(len(s.ids))]
			if _, ok := s.locals[silo][id]; !ok {
				s.act++
				s.logf("%s registers %v as %d", silo, id, s.act)
				s.register(silo, id, uint64(s.act))
			}
		case k < 45:
			silo := s.pick(members)
			if items := slices.Collect(s.localItems(silo)); len(items) > 0 {
				it := items[s.r.IntN(len(items))]
				s.logf("%s deactivates %v", silo, it)
				s.deactivate(silo, it.ID, it.Entry)
			}
		case k < 55:
			s.lookup(s.pick(members), s.ids[s.r.IntN(len(s.ids))])
		case k < 70 && s.skew:
			s.installOne()
		default:
			for range 1 + s.r.IntN(4) {
				if n := s.net.Len(); n > 0 {
					i := s.r.IntN(n)
					s.logf("deliver %v", s.net.Messages()[i])
					s.net.Deliver(i)
				}
			}
		}
	}
	// Settle: every crash detected, every leaver gone, every view
	// installed, every message delivered.
	for len(s.undetected) > 0 {
		s.detect(s.undetected[0])
	}
	for len(s.leaving) > 0 {
		s.exit(s.leaving[0])
	}
	for {
		if n := s.net.Len(); n > 0 && (s.r.IntN(2) == 0 || !s.installOne()) {
			s.net.Deliver(s.r.IntN(n))
			continue
		}
		if !s.installOne() && s.net.Len() == 0 {
			return
		}
	}
}
