// Package admission decides when a request may start on a grain
// activation: Orleans' reentrancy rules, as a pure state machine. A Gate
// does no I/O, starts no goroutine and takes no lock; the silo holds the
// activation's lock around every call and performs what the Gate decides.
//
// A request is admitted, queued, or refused as a deadlock:
//
//   - An activation with nothing running admits anything.
//   - A reentrant activation admits anything: its requests interleave,
//     but only at awaits, because the scheduler runs one turn at a time.
//   - An always-interleave request, or an interleaving timer tick, is
//     admitted whatever runs.
//   - A read-only request is admitted while only read-only requests run.
//   - A request whose call chain holds a request running here is
//     admitted when the chain allows re-entry there. The call that
//     request made decides (its Chain: a per-call scope, Orleans'
//     AllowCallChainReentrancy and SuppressCallChainReentrancy), and the
//     activation's ChainReentrant option only when that call set no
//     scope. If it cannot start at once otherwise, it is a deadlock: the
//     request it would wait for is waiting for it. It is refused at once
//     rather than left to time out.
//   - Anything else queues, and queued requests start in arrival order: a
//     request is never admitted past one queued before it.
package admission

import "fmt"

// Kind says how a request relates to others.
type Kind uint8

const (
	// Exclusive requests run alone, the default.
	Exclusive Kind = iota
	// ReadOnly requests run alongside other read-only requests.
	ReadOnly
	// Interleave requests run alongside anything (always-interleave
	// methods and interleaving timer ticks).
	Interleave
)

// Chain is what a request's call chain says about the activation it
// arrives at: whether the chain holds a request running there, and if so
// whether the call that request made lets the chain back in. A scope
// belongs to the call that set it, and covers everything that call
// causes: the owner takes the scope of the innermost running request of
// the chain whose call set one, and InChain when none did.
type Chain uint8

const (
	// NotInChain: the chain holds no request running here.
	NotInChain Chain = iota
	// InChain: the chain holds requests running here whose calls set no
	// scope: the Gate's ChainReentrant decides.
	InChain
	// InChainAllowed: the chain holds a request running here whose call
	// allowed re-entry, whatever ChainReentrant says.
	InChainAllowed
	// InChainSuppressed: the chain holds a request running here whose
	// call suppressed re-entry, whatever ChainReentrant says.
	InChainSuppressed
)

// Decision is what Admit decided.
type Decision uint8

const (
	// Start: the request is running; call Finish when it ends.
	Start Decision = iota
	// Queue: the caller keeps the request and offers it again, through
	// Next, after a running request finished.
	Queue
	// Deadlock: the request's call chain holds a running request here,
	// which it would wait for forever, and does not allow re-entry.
	Deadlock
)

// Gate is the admission state of one activation. The zero Gate admits
// requests of a non-reentrant activation. Not safe for concurrent use: the
// activation's lock is held around every method.
type Gate struct {
	// Reentrant and ChainReentrant are the activation's type options.
	// ChainReentrant is the default for calls that set no call-chain
	// reentrancy scope (see Chain).
	Reentrant      bool
	ChainReentrant bool

	running   []entry  // started and not finished, in start order
	first     [1]entry // running's first backing array: most gates never run two at once
	exclusive int      // running entries of Kind Exclusive
	readOnly  int      // running entries of Kind ReadOnly
	queued    int      // requests the owner holds queued
}

type entry struct {
	seq  uint64
	kind Kind
}

// Running reports how many requests are running (started, not finished;
// a running request may be awaiting).
func (g *Gate) Running() int { return len(g.running) }

// Queued reports how many requests the owner holds queued.
func (g *Gate) Queued() int { return g.queued }

// Idle reports whether nothing runs and nothing is queued.
func (g *Gate) Idle() bool { return len(g.running) == 0 && g.queued == 0 }

// Holds reports whether the request seq is running here.
func (g *Gate) Holds(seq uint64) bool {
	for _, e := range g.running {
		if e.seq == seq {
			return true
		}
	}
	return false
}

// Admit decides on a new request seq of kind k. inChain reports whether
// the request's call chain holds a request running here (see Holds), whose
// call set no scope: it is AdmitChain with InChain, else NotInChain.
func (g *Gate) Admit(seq uint64, k Kind, inChain bool) Decision {
	ch := NotInChain
	if inChain {
		ch = InChain
	}
	return g.AdmitChain(seq, k, ch)
}

// AdmitChain decides on a new request seq of kind k whose call chain says
// ch about this activation. When it returns Queue, the owner queues the
// request after those it holds.
//
// Interleaving requests, requests of a reentrant activation and requests
// whose chain may re-enter start past the queue: they never wait for a
// running request, so holding them behind queued ones would only delay
// them (and, for a re-entering one, deadlock). A read-only request queues
// behind a queued one, so a stream of readers cannot starve a writer. A
// suppressed chain does not make a reentrant activation, or an
// interleaving request, wait: it only withholds call-chain reentrancy.
func (g *Gate) AdmitChain(seq uint64, k Kind, ch Chain) Decision {
	if ch > InChainSuppressed {
		panic(fmt.Sprintf("admission: AdmitChain with unknown Chain %d", ch))
	}
	switch {
	case k == Interleave, g.Reentrant, g.reenters(ch),
		g.queued == 0 && g.admissible(k):
		g.start(seq, k)
		return Start
	case ch != NotInChain:
		return Deadlock
	}
	g.queued++
	return Queue
}

// reenters reports whether a chain that says ch may re-enter: the call's
// scope decides, the activation's option only when the call set none.
func (g *Gate) reenters(ch Chain) bool {
	return ch == InChainAllowed || ch == InChain && g.ChainReentrant
}

// Next offers the oldest queued request, seq of kind k, again. It returns
// true, having started it, when it may run now; the owner then removes it
// from its queue and offers the next one. False leaves it queued.
func (g *Gate) Next(seq uint64, k Kind) bool {
	if g.queued == 0 {
		panic("admission: Next with nothing queued")
	}
	if !g.admissible(k) {
		return false
	}
	g.queued--
	g.start(seq, k)
	return true
}

// Drop removes a queued request that will not start (its caller gave up,
// or the activation ends).
func (g *Gate) Drop() {
	if g.queued == 0 {
		panic("admission: Drop with nothing queued")
	}
	g.queued--
}

// Finish ends the running request seq.
func (g *Gate) Finish(seq uint64) {
	for i, e := range g.running {
		if e.seq != seq {
			continue
		}
		switch e.kind {
		case Exclusive:
			g.exclusive--
		case ReadOnly:
			g.readOnly--
		}
		copy(g.running[i:], g.running[i+1:])
		g.running = g.running[:len(g.running)-1]
		return
	}
	panic("admission: Finish of a request that is not running")
}

// admissible reports whether a request of kind k may start alongside what
// runs. Interleaving and reentrant cases are decided in Admit.
func (g *Gate) admissible(k Kind) bool {
	return len(g.running) == 0 ||
		k == ReadOnly && g.exclusive == 0 && g.readOnly == len(g.running)
}

func (g *Gate) start(seq uint64, k Kind) {
	if g.running == nil {
		g.running = g.first[:0]
	}
	g.running = append(g.running, entry{seq: seq, kind: k})
	switch k {
	case Exclusive:
		g.exclusive++
	case ReadOnly:
		g.readOnly++
	}
}
