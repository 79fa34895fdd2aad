package admission_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/granaryio/granary/activation/admission"
)

// how says why a request was allowed to start.
type how uint8

const (
	plain      how = iota // nothing it had to run alone with or behind was in the way
	bypassKind            // Interleave: starts whatever runs
	bypassGate            // the gate is Reentrant
	bypassLoop            // call-chain reentrancy: the chain may re-enter
)

// mayReenter is the call-chain reentrancy table, indexed by what the chain
// says and by the gate's ChainReentrant: the scope of the call the running
// request made decides, and the type's option only when it set none.
var mayReenter = map[admission.Chain][2]bool{
	admission.NotInChain:        {false, false}, // nothing to re-enter
	admission.InChain:           {false, true},
	admission.InChainAllowed:    {true, true},
	admission.InChainSuppressed: {false, false},
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

type req struct {
	seq     uint64
	kind    admission.Kind
	how     how // running requests only
	started int // running requests only: its place in start order
}

// model is the reference for Gate: the rules of the package comment written
// out plainly over lists. Its queue is also the owner's FIFO queue.
type model struct {
	reentrant, chainReentrant bool
	running                   []req // in start order
	queue                     []req // in arrival order
}

// fitsAlongside reports whether a request of kind k may run next to
// everything that runs now, with no special permission.
func (m *model) fitsAlongside(k admission.Kind) bool {
	if len(m.running) == 0 {
		return true // an idle activation takes anything
	}
	if k != admission.ReadOnly {
		return false // an Exclusive runs alone
	}
	for _, r := range m.running {
		if r.kind != admission.ReadOnly {
			return false // readers share only with readers
		}
	}
	return true
}

// admit returns the decision for a new request, and why it starts.
func (m *model) admit(k admission.Kind, ch admission.Chain) (admission.Decision, how) {
	if m.reentrant {
		return admission.Start, bypassGate
	}
	if k == admission.Interleave {
		return admission.Start, bypassKind
	}
	if mayReenter[ch][b2i(m.chainReentrant)] {
		return admission.Start, bypassLoop
	}
	// Anyone else waits for requests queued before it.
	if len(m.queue) == 0 && m.fitsAlongside(k) {
		return admission.Start, plain
	}
	if ch != admission.NotInChain {
		// Waiting would mean waiting for a request that waits for us.
		return admission.Deadlock, plain
	}
	return admission.Queue, plain
}

func (m *model) isRunning(seq uint64) bool {
	return slices.ContainsFunc(m.running, func(r req) bool { return r.seq == seq })
}

func TestGateMatchesModel(t *testing.T) {
	for _, cfg := range []struct{ reentrant, chainReentrant bool }{
		{false, false}, {false, true}, {true, false}, {true, true},
	} {
		t.Run(fmt.Sprintf("reentrant=%t,chain=%t", cfg.reentrant, cfg.chainReentrant), func(t *testing.T) {
			for seed := uint64(1); seed <= 4; seed++ {
				checkAgainstModel(t, cfg.reentrant, cfg.chainReentrant, seed, 5000)
			}
		})
	}
}

// checkAgainstModel plays steps random steps on a Gate and on the model and
// fails at the first difference or broken invariant.
func checkAgainstModel(t *testing.T, reentrant, chainReentrant bool, seed uint64, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	g := &admission.Gate{Reentrant: reentrant, ChainReentrant: chainReentrant}
	m := &model{reentrant: reentrant, chainReentrant: chainReentrant}
	var nextSeq uint64
	var lastFromQueue uint64 // seq of the last request Next started
	var startOrder int
	decisions := map[admission.Decision]int{}
	byChain := map[admission.Chain]map[admission.Decision]int{}
	maxQueue := 0

	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, step %d: %s\nrunning %v\nqueue %v", seed, step, fmt.Sprintf(format, args...), m.running, m.queue)
	}

	// drain offers the head of the owner's queue through Next, in order,
	// until one may not start.
	drain := func(step int) {
		t.Helper()
		for len(m.queue) > 0 {
			head := m.queue[0]
			want := m.fitsAlongside(head.kind)
			got := g.Next(head.seq, head.kind)
			if got != want {
				fail(step, "Next(%d, %s) = %t, model says %t", head.seq, kindName(head.kind), got, want)
			}
			if !got {
				return
			}
			if head.seq <= lastFromQueue {
				fail(step, "Next started %d after %d", head.seq, lastFromQueue)
			}
			lastFromQueue = head.seq
			m.queue = m.queue[1:]
			startOrder++
			m.running = append(m.running, req{seq: head.seq, kind: head.kind, how: plain, started: startOrder})
		}
	}

	for step := range steps {
		// Arrivals outweigh finishes until a few requests run, so the
		// queue grows, and then finishes win, so the lists stay short.
		arrive := 5
		if len(m.running) >= 6 {
			arrive = 3
		}
		switch r := rng.IntN(10); {
		case r < arrive: // a request arrives
			nextSeq++
			k := []admission.Kind{ex, ex, ro, ro, ro, il}[rng.IntN(6)]
			ch := admission.NotInChain
			if len(m.running) > 0 && rng.IntN(3) == 0 {
				holder := m.running[rng.IntN(len(m.running))]
				if !g.Holds(holder.seq) {
					fail(step, "Holds(%d) = false for a running request", holder.seq)
				}
				// Half the calls that made a chain set no scope.
				ch = []admission.Chain{admission.InChain, admission.InChain, admission.InChainAllowed, admission.InChainSuppressed}[rng.IntN(4)]
			}
			want, why := m.admit(k, ch)
			queuedBefore := len(m.queue)
			var got admission.Decision
			if ch <= admission.InChain && rng.IntN(2) == 0 {
				got = g.Admit(nextSeq, k, ch == admission.InChain)
			} else {
				got = g.AdmitChain(nextSeq, k, ch)
			}
			if got != want {
				fail(step, "Admit(%d, %s, %s) = %s, model says %s",
					nextSeq, kindName(k), chainName(ch), decisionName(got), decisionName(want))
			}
			decisions[got]++
			if byChain[ch] == nil {
				byChain[ch] = map[admission.Decision]int{}
			}
			byChain[ch][got]++
			switch got {
			case admission.Start:
				// Nothing started plainly past a queued request.
				if why == plain && queuedBefore > 0 {
					fail(step, "Admit started %d past %d queued requests", nextSeq, queuedBefore)
				}
				startOrder++
				m.running = append(m.running, req{seq: nextSeq, kind: k, how: why, started: startOrder})
			case admission.Queue:
				m.queue = append(m.queue, req{seq: nextSeq, kind: k})
			}
		case r < 9: // a running request finishes
			if len(m.running) == 0 {
				continue
			}
			i := rng.IntN(len(m.running))
			g.Finish(m.running[i].seq)
			m.running = slices.Delete(m.running, i, i+1)
			drain(step)
		default: // a queued request's caller gives up
			if len(m.queue) == 0 {
				continue
			}
			i := rng.IntN(len(m.queue))
			g.Drop()
			m.queue = slices.Delete(m.queue, i, i+1)
			drain(step)
		}
		maxQueue = max(maxQueue, len(m.queue))

		if g.Running() != len(m.running) || g.Queued() != len(m.queue) {
			fail(step, "Running, Queued = %d, %d, model has %d, %d", g.Running(), g.Queued(), len(m.running), len(m.queue))
		}
		if want := len(m.running) == 0 && len(m.queue) == 0; g.Idle() != want {
			fail(step, "Idle() = %t, model says %t", g.Idle(), want)
		}
		for _, r := range m.running {
			if !g.Holds(r.seq) {
				fail(step, "Holds(%d) = false for a running request", r.seq)
			}
		}
		for _, q := range m.queue {
			if g.Holds(q.seq) {
				fail(step, "Holds(%d) = true for a queued request", q.seq)
			}
		}
		if nextSeq > 0 && !m.isRunning(nextSeq) && g.Holds(nextSeq) {
			fail(step, "Holds(%d) = true for a request that is not running", nextSeq)
		}
		checkExclusion(m, func(format string, args ...any) { fail(step, format, args...) })
		// The owner drained its queue: a queued head waits for a reason.
		if len(m.queue) > 0 && m.fitsAlongside(m.queue[0].kind) {
			fail(step, "head %d could start but is queued", m.queue[0].seq)
		}
	}

	t.Logf("seed %d: %d Start, %d Queue, %d Deadlock, longest queue %d", seed,
		decisions[admission.Start], decisions[admission.Queue], decisions[admission.Deadlock], maxQueue)
	// A run that never queued or never deadlocked proves little.
	if !reentrant {
		for _, d := range []admission.Decision{admission.Start, admission.Queue} {
			if decisions[d] == 0 {
				t.Errorf("seed %d: no %s decisions in %d steps", seed, decisionName(d), steps)
			}
		}
		if decisions[admission.Deadlock] == 0 {
			t.Errorf("seed %d: no Deadlock decisions in %d steps", seed, steps)
		}
		// Each scope was put to the test where it differs from the
		// type's option: an allowed chain re-entered a gate that is not
		// chain-reentrant, a suppressed one was refused by one that is.
		if !chainReentrant && byChain[admission.InChainAllowed][admission.Start] == 0 {
			t.Errorf("seed %d: no allowed chain started in %d steps", seed, steps)
		}
		if chainReentrant && byChain[admission.InChainSuppressed][admission.Deadlock] == 0 {
			t.Errorf("seed %d: no suppressed chain refused in %d steps", seed, steps)
		}
		if maxQueue < 3 {
			t.Errorf("seed %d: queue never grew past %d", seed, maxQueue)
		}
	}
}

// checkExclusion checks that requests that started plainly kept their
// exclusion: an Exclusive ran alone when it started and since then only
// requests with a permission to bypass it joined; a reader started among
// readers only.
func checkExclusion(m *model, fail func(format string, args ...any)) {
	for _, e := range m.running {
		if e.how != plain {
			continue
		}
		for _, o := range m.running {
			if o.seq == e.seq {
				continue
			}
			joinedLater := o.started > e.started
			switch e.kind {
			case admission.Exclusive:
				if !joinedLater || o.how == plain {
					fail("Exclusive %d runs alongside %d (%s, how %d)", e.seq, o.seq, kindName(o.kind), o.how)
				}
			case admission.ReadOnly:
				if !joinedLater && o.kind != admission.ReadOnly {
					fail("ReadOnly %d started alongside %s %d", e.seq, kindName(o.kind), o.seq)
				}
				if joinedLater && o.how == plain && o.kind != admission.ReadOnly {
					fail("%s %d started plainly alongside ReadOnly %d", kindName(o.kind), o.seq, e.seq)
				}
			}
		}
	}
}
