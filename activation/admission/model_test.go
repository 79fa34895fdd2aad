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
	bypassLoop            // call-chain reentrancy on a ChainReentrant gate
)

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
func (m *model) admit(k admission.Kind, inChain bool) (admission.Decision, how) {
	if m.reentrant {
		return admission.Start, bypassGate
	}
	if k == admission.Interleave {
		return admission.Start, bypassKind
	}
	if inChain && m.chainReentrant {
		return admission.Start, bypassLoop
	}
	// Anyone else waits for requests queued before it.
	if len(m.queue) == 0 && m.fitsAlongside(k) {
		return admission.Start, plain
	}
	if inChain {
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
			inChain := false
			if len(m.running) > 0 && rng.IntN(3) == 0 {
				holder := m.running[rng.IntN(len(m.running))]
				if !g.Holds(holder.seq) {
					fail(step, "Holds(%d) = false for a running request", holder.seq)
				}
				inChain = true
			}
			want, why := m.admit(k, inChain)
			queuedBefore := len(m.queue)
			got := g.Admit(nextSeq, k, inChain)
			if got != want {
				fail(step, "Admit(%d, %s, inChain=%t) = %s, model says %s",
					nextSeq, kindName(k), inChain, decisionName(got), decisionName(want))
			}
			decisions[got]++
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
		if !chainReentrant && decisions[admission.Deadlock] == 0 {
			t.Errorf("seed %d: no Deadlock decisions in %d steps", seed, steps)
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
