package admission_test

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/granaryio/granary/activation/admission"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A step is one line of a scripted scenario: a call on the Gate and what it
// must answer, or a check of the Gate's state.
type step struct {
	op    string // "admit", "next", "finish", "drop", "state", "holds"
	seq   uint64
	kind  admission.Kind
	chain admission.Chain

	decision admission.Decision // admit
	ok       bool               // next: started; holds: held

	running, queued int // state
}

func admit(seq uint64, k admission.Kind, want admission.Decision) step {
	return step{op: "admit", seq: seq, kind: k, decision: want}
}

func admitInChain(seq uint64, k admission.Kind, want admission.Decision) step {
	return step{op: "admit", seq: seq, kind: k, chain: admission.InChain, decision: want}
}

// admitChain admits through AdmitChain with a chain that set a scope.
func admitChain(seq uint64, k admission.Kind, ch admission.Chain, want admission.Decision) step {
	return step{op: "admit", seq: seq, kind: k, chain: ch, decision: want}
}

func next(seq uint64, k admission.Kind, started bool) step {
	return step{op: "next", seq: seq, kind: k, ok: started}
}

func finish(seq uint64) step { return step{op: "finish", seq: seq} }

func drop() step { return step{op: "drop"} }

// state checks Running, Queued and Idle.
func state(running, queued int) step { return step{op: "state", running: running, queued: queued} }

func holds(seq uint64, want bool) step { return step{op: "holds", seq: seq, ok: want} }

func (s step) String() string {
	switch s.op {
	case "admit":
		if s.chain > admission.InChain {
			return fmt.Sprintf("AdmitChain(%d, %s, %s)", s.seq, kindName(s.kind), chainName(s.chain))
		}
		return fmt.Sprintf("Admit(%d, %s, inChain=%t)", s.seq, kindName(s.kind), s.chain == admission.InChain)
	case "next":
		return fmt.Sprintf("Next(%d, %s)", s.seq, kindName(s.kind))
	case "finish":
		return fmt.Sprintf("Finish(%d)", s.seq)
	case "drop":
		return "Drop()"
	case "state":
		return fmt.Sprintf("state(running=%d, queued=%d)", s.running, s.queued)
	case "holds":
		return fmt.Sprintf("Holds(%d)", s.seq)
	}
	return s.op
}

func kindName(k admission.Kind) string {
	switch k {
	case admission.Exclusive:
		return "Exclusive"
	case admission.ReadOnly:
		return "ReadOnly"
	case admission.Interleave:
		return "Interleave"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

func chainName(c admission.Chain) string {
	switch c {
	case admission.NotInChain:
		return "NotInChain"
	case admission.InChain:
		return "InChain"
	case admission.InChainAllowed:
		return "InChainAllowed"
	case admission.InChainSuppressed:
		return "InChainSuppressed"
	}
	return fmt.Sprintf("Chain(%d)", c)
}

func decisionName(d admission.Decision) string {
	switch d {
	case admission.Start:
		return "Start"
	case admission.Queue:
		return "Queue"
	case admission.Deadlock:
		return "Deadlock"
	}
	return fmt.Sprintf("Decision(%d)", d)
}

// admitStep plays an admit step: through Admit for a chain that set no
// scope, so the scenarios check both entries, else through AdmitChain.
func admitStep(g *admission.Gate, s step) admission.Decision {
	if s.chain > admission.InChain {
		return g.AdmitChain(s.seq, s.kind, s.chain)
	}
	return g.Admit(s.seq, s.kind, s.chain == admission.InChain)
}

// runScript plays steps on g, failing at the first answer that differs.
func runScript(t *testing.T, g *admission.Gate, steps []step) {
	t.Helper()
	for i, s := range steps {
		switch s.op {
		case "admit":
			if got := admitStep(g, s); got != s.decision {
				t.Fatalf("step %d: %v = %s, want %s", i, s, decisionName(got), decisionName(s.decision))
			}
		case "next":
			if got := g.Next(s.seq, s.kind); got != s.ok {
				t.Fatalf("step %d: %v = %t, want %t", i, s, got, s.ok)
			}
		case "finish":
			g.Finish(s.seq)
		case "drop":
			g.Drop()
		case "state":
			if g.Running() != s.running || g.Queued() != s.queued {
				t.Fatalf("step %d: Running, Queued = %d, %d, want %d, %d", i, g.Running(), g.Queued(), s.running, s.queued)
			}
			if want := s.running == 0 && s.queued == 0; g.Idle() != want {
				t.Fatalf("step %d: Idle() = %t, want %t", i, g.Idle(), want)
			}
		case "holds":
			if got := g.Holds(s.seq); got != s.ok {
				t.Fatalf("step %d: %v = %t, want %t", i, s, got, s.ok)
			}
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
	}
}

const (
	ex = admission.Exclusive
	ro = admission.ReadOnly
	il = admission.Interleave
)

func TestGateScenarios(t *testing.T) {
	tests := []struct {
		name           string
		reentrant      bool
		chainReentrant bool
		steps          []step
	}{
		{
			name:  "zero gate is idle",
			steps: []step{state(0, 0), holds(1, false)},
		},
		{
			name:  "empty gate admits Exclusive",
			steps: []step{admit(1, ex, admission.Start), state(1, 0), holds(1, true), holds(2, false)},
		},
		{
			name:  "empty gate admits ReadOnly",
			steps: []step{admit(1, ro, admission.Start), state(1, 0), holds(1, true)},
		},
		{
			name:  "empty gate admits Interleave",
			steps: []step{admit(1, il, admission.Start), state(1, 0), holds(1, true)},
		},
		{
			name: "Exclusive queues behind Exclusive",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue), state(1, 1), holds(2, false),
			},
		},
		{
			name: "Exclusive queues behind ReadOnly",
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, ex, admission.Queue), state(1, 1),
			},
		},
		{
			name: "Exclusive queues behind Interleave",
			steps: []step{
				admit(1, il, admission.Start),
				admit(2, ex, admission.Queue), state(1, 1),
			},
		},
		{
			name: "ReadOnly runs alongside ReadOnly",
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, ro, admission.Start),
				admit(3, ro, admission.Start), state(3, 0),
			},
		},
		{
			name: "ReadOnly queues behind Exclusive",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ro, admission.Queue), state(1, 1),
			},
		},
		{
			name: "ReadOnly queues behind a running Interleave",
			steps: []step{
				admit(1, il, admission.Start),
				admit(2, ro, admission.Queue), state(1, 1),
			},
		},
		{
			name: "ReadOnly queues behind a running Interleave among readers",
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, il, admission.Start),
				admit(3, ro, admission.Queue), state(2, 1),
			},
		},
		{
			// Writer preference: readers arriving after a queued writer
			// wait, so a stream of readers cannot starve it.
			name: "ReadOnly queues behind a queued Exclusive",
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, ex, admission.Queue),
				admit(3, ro, admission.Queue), state(1, 2),
				finish(1), state(0, 2),
				next(2, ex, true), state(1, 1),
				next(3, ro, false),
				finish(2),
				next(3, ro, true), state(1, 0),
			},
		},
		{
			name: "Interleave starts alongside Exclusive and past the queue",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				admit(3, ro, admission.Queue),
				admit(4, il, admission.Start), state(2, 2), holds(4, true),
				admit(5, il, admission.Start), state(3, 2),
			},
		},
		{
			name:      "Reentrant gate starts anything",
			reentrant: true,
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Start),
				admit(3, ro, admission.Start),
				admit(4, il, admission.Start),
				admitInChain(5, ex, admission.Start), state(5, 0),
				finish(3), finish(1), holds(2, true), holds(1, false), state(3, 0),
			},
		},
		{
			name: "inChain Exclusive on a busy gate is a deadlock",
			steps: []step{
				admit(1, ex, admission.Start),
				admitInChain(2, ex, admission.Deadlock), state(1, 0), holds(2, false),
			},
		},
		{
			name: "inChain ReadOnly while an Exclusive runs is a deadlock",
			steps: []step{
				admit(1, ex, admission.Start),
				admitInChain(2, ro, admission.Deadlock), state(1, 0),
			},
		},
		{
			name: "inChain Exclusive while readers run is a deadlock",
			steps: []step{
				admit(1, ro, admission.Start),
				admitInChain(2, ex, admission.Deadlock), state(1, 0),
			},
		},
		{
			// It would queue behind the writer, which waits for the
			// reader that holds the chain.
			name: "inChain ReadOnly behind a queued writer is a deadlock",
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, ex, admission.Queue),
				admitInChain(3, ro, admission.Deadlock), state(1, 1),
			},
		},
		{
			name: "inChain ReadOnly that may start at once starts",
			steps: []step{
				admit(1, ro, admission.Start),
				admitInChain(2, ro, admission.Start), state(2, 0),
			},
		},
		{
			name: "inChain Interleave starts",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				admitInChain(3, il, admission.Start), state(2, 1),
			},
		},
		{
			name:           "ChainReentrant gate starts an inChain request past the queue",
			chainReentrant: true,
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				admitInChain(3, ex, admission.Start), state(2, 1),
				admitInChain(4, ro, admission.Start), state(3, 1),
				finish(3), finish(4), next(2, ex, false),
				finish(1), next(2, ex, true), state(1, 0),
			},
		},
		{
			name:           "ChainReentrant gate queues requests outside the chain",
			chainReentrant: true,
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				admit(3, ro, admission.Queue), state(1, 2),
			},
		},
		{
			// Orleans' AllowCallChainReentrancy: the scope of the call
			// the running request made lets its chain back in.
			name: "InChainAllowed starts past the queue without ChainReentrant",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				admitChain(3, ex, admission.InChainAllowed, admission.Start), state(2, 1), holds(3, true),
				admitChain(4, ro, admission.InChainAllowed, admission.Start), state(3, 1),
				finish(3), next(2, ex, false),
				finish(4), next(2, ex, false),
				finish(1), next(2, ex, true), state(1, 0),
			},
		},
		{
			name: "InChainAllowed starts while readers run and a writer queues",
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, ex, admission.Queue),
				admitChain(3, ex, admission.InChainAllowed, admission.Start), state(2, 1),
				finish(1), next(2, ex, false),
				finish(3), next(2, ex, true),
			},
		},
		{
			name:           "InChainAllowed on a ChainReentrant gate starts",
			chainReentrant: true,
			steps: []step{
				admit(1, ex, admission.Start),
				admitChain(2, ex, admission.InChainAllowed, admission.Start), state(2, 0),
			},
		},
		{
			// Orleans' SuppressCallChainReentrancy: the type's option is
			// only the default for calls that set no scope.
			name:           "InChainSuppressed on a ChainReentrant gate is a deadlock",
			chainReentrant: true,
			steps: []step{
				admit(1, ex, admission.Start),
				admitChain(2, ex, admission.InChainSuppressed, admission.Deadlock), state(1, 0), holds(2, false),
				admitChain(3, ro, admission.InChainSuppressed, admission.Deadlock), state(1, 0),
				admitInChain(4, ex, admission.Start), state(2, 0),
			},
		},
		{
			name:           "InChainSuppressed ReadOnly behind a queued writer is a deadlock",
			chainReentrant: true,
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, ex, admission.Queue),
				admitChain(3, ro, admission.InChainSuppressed, admission.Deadlock), state(1, 1),
			},
		},
		{
			name:           "InChainSuppressed that may start at once starts",
			chainReentrant: true,
			steps: []step{
				admit(1, ro, admission.Start),
				admitChain(2, ro, admission.InChainSuppressed, admission.Start), state(2, 0),
			},
		},
		{
			name:           "InChainSuppressed does not stop an Interleave",
			chainReentrant: true,
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				admitChain(3, il, admission.InChainSuppressed, admission.Start), state(2, 1),
			},
		},
		{
			name:      "InChainSuppressed does not stop a Reentrant gate",
			reentrant: true,
			steps: []step{
				admit(1, ex, admission.Start),
				admitChain(2, ex, admission.InChainSuppressed, admission.Start), state(2, 0),
			},
		},
		{
			name: "Next starts the head only when admissible",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				next(2, ex, false), state(1, 1), holds(2, false),
				finish(1), state(0, 1),
				next(2, ex, true), state(1, 0), holds(2, true),
			},
		},
		{
			name: "Next starts queued readers together",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ro, admission.Queue),
				admit(3, ro, admission.Queue),
				admit(4, ex, admission.Queue),
				finish(1),
				next(2, ro, true),
				next(3, ro, true),
				next(4, ex, false), state(2, 1),
				finish(3), next(4, ex, false),
				finish(2), next(4, ex, true), state(1, 0),
			},
		},
		{
			name: "Next does not start a reader while an Interleave runs",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ro, admission.Queue),
				admit(3, il, admission.Start),
				finish(1),
				next(2, ro, false),
				finish(3),
				next(2, ro, true), state(1, 0),
			},
		},
		{
			// Counters must follow Finish: with the Exclusive gone and an
			// Interleave still running, a reader still waits.
			name: "Finish of an Exclusive leaves a running Interleave counted",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, il, admission.Start),
				finish(1),
				admit(3, ro, admission.Queue),
				admit(4, ex, admission.Queue), state(1, 2),
			},
		},
		{
			name: "Finish removes the named request from the middle",
			steps: []step{
				admit(1, ro, admission.Start),
				admit(2, ro, admission.Start),
				admit(3, ro, admission.Start),
				finish(2), state(2, 0),
				holds(1, true), holds(2, false), holds(3, true),
				admit(4, ro, admission.Start), state(3, 0),
				finish(3), finish(1), finish(4), state(0, 0),
			},
		},
		{
			name: "Drop removes a queued request",
			steps: []step{
				admit(1, ex, admission.Start),
				admit(2, ex, admission.Queue),
				admit(3, ex, admission.Queue),
				drop(), state(1, 1),
				drop(), state(1, 0),
				finish(1), state(0, 0),
				admit(4, ex, admission.Start),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &admission.Gate{Reentrant: tt.reentrant, ChainReentrant: tt.chainReentrant}
			runScript(t, g, tt.steps)
		})
	}
}

func TestGatePanics(t *testing.T) {
	tests := []struct {
		name  string
		steps []step // played first; must not panic
		call  func(g *admission.Gate)
	}{
		{"Finish on an empty gate", nil, func(g *admission.Gate) { g.Finish(1) }},
		{"Finish of an unknown seq", []step{admit(1, ex, admission.Start)}, func(g *admission.Gate) { g.Finish(2) }},
		{"Finish twice", []step{admit(1, ex, admission.Start), finish(1)}, func(g *admission.Gate) { g.Finish(1) }},
		{"Finish of a queued request", []step{admit(1, ex, admission.Start), admit(2, ex, admission.Queue)}, func(g *admission.Gate) { g.Finish(2) }},
		{"Next with nothing queued", nil, func(g *admission.Gate) { g.Next(1, ex) }},
		{"Next after the queue drained", []step{admit(1, ex, admission.Start), admit(2, ex, admission.Queue), finish(1), next(2, ex, true)}, func(g *admission.Gate) { g.Next(3, ex) }},
		{"Drop with nothing queued", nil, func(g *admission.Gate) { g.Drop() }},
		{"AdmitChain with an unknown Chain", []step{admit(1, ex, admission.Start), admit(2, ex, admission.Queue)}, func(g *admission.Gate) { g.AdmitChain(3, il, admission.InChainSuppressed+1) }},
		{"Drop after the queue drained", []step{admit(1, ex, admission.Start), admit(2, ex, admission.Queue), drop()}, func(g *admission.Gate) { g.Drop() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &admission.Gate{}
			runScript(t, g, tt.steps)
			running, queued := g.Running(), g.Queued()
			msg := mustPanic(t, func() { tt.call(g) })
			if !strings.HasPrefix(msg, "admission: ") {
				t.Errorf("panic %q does not begin with the package name", msg)
			}
			if g.Running() != running || g.Queued() != queued {
				t.Errorf("after the panic Running, Queued = %d, %d, want %d, %d", g.Running(), g.Queued(), running, queued)
			}
		})
	}
}

// mustPanic calls fn and returns the panic value as a string, failing the
// test if fn returns normally.
func mustPanic(t *testing.T, fn func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("no panic")
		}
		msg = fmt.Sprint(r)
	}()
	fn()
	return ""
}
