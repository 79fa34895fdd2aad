package lifecycle_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
)

// A sim is a runtime around a Machine, as the silo would be: it keeps the
// activation's queue and a real admission.Gate, sends only events that can
// happen (a turn ends only if it runs, OnDeactivate ends only if it was
// queued), performs every action, and checks the package's invariants
// after each event. Every request it makes must end with exactly one
// outcome: run, refused as a deadlock, retried, or disposed of with the
// queue.
type sim struct {
	m    lifecycle.Machine
	gate admission.Gate
	log  []string

	seq     uint64
	held    []req    // held by the lifecycle, in arrival order
	gateQ   []req    // queued by the gate, in arrival order
	running []uint64 // requests the gate holds
	ticks   int      // interleaving ticks running
	outcome map[uint64]string

	now, age time.Duration
	// The idle collector's reference model: when the activation last
	// became idle, and the delay asked for (0 for none).
	idleSince, keepUntil time.Duration

	registering   bool // the registration has not answered
	activateTurn  bool // queued, not ended
	activated     bool // ActivateDone was sent
	deactTurn     bool // queued, not ended
	begun         int  // BeginDeactivate seen
	removed       int  // Remove seen
	fired         bool // FireDueTimers seen
	wasPendingYet bool
	// registeredEvent: the event being performed is Registered, which
	// starts the activate turn even after Close.
	registeredEvent bool
}

type req struct {
	seq  uint64
	kind admission.Kind
}

// chooser picks among n choices.
type chooser interface{ intn(n int) int }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

// byteChooser picks from fuzz input; exhausted, it always picks 0.
type byteChooser struct {
	b []byte
	i int
}

func (c *byteChooser) intn(n int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % n
}

func (c *byteChooser) done() bool { return c.i >= len(c.b) }

func newSim() *sim {
	s := &sim{outcome: map[uint64]string{}, age: 3 * time.Second, registering: true}
	s.gate.ChainReentrant = true
	return s
}

func (s *sim) fail(format string, args ...any) error {
	return fmt.Errorf("%s\n\tafter: %s\n\tmachine: %s", fmt.Sprintf(format, args...), strings.Join(s.log, "; "), &s.m)
}

func (s *sim) quiet() bool { return s.gate.Running() == 0 && s.ticks == 0 }
func (s *sim) busy() bool  { return !s.gate.Idle() || s.ticks > 0 || len(s.held) > 0 }

func (s *sim) settle(seq uint64, how string) error {
	if old, ok := s.outcome[seq]; ok && old != "" {
		return s.fail("request %d settled twice: %s, then %s", seq, old, how)
	}
	s.outcome[seq] = how
	return nil
}

// step sends one event the runtime could send now, chosen by c.
func (s *sim) step(c chooser) error {
	st := s.m.State()
	_, pendingBefore := s.m.Pending()
	var (
		r        lifecycle.Result
		name     string
		offered  uint64
		kind     admission.Kind
		holds    bool
		idleTick bool
	)
	switch c.intn(14) {
	case 0, 1, 2: // a request arrives
		s.seq++
		offered, kind = s.seq, admission.Kind(c.intn(3))
		inChain := (st == lifecycle.Activating && s.activateTurn || st == lifecycle.Active) && c.intn(4) == 0
		holds = inChain && st == lifecycle.Active && s.gate.Running() > 0 && c.intn(2) == 0
		s.outcome[offered] = ""
		name = fmt.Sprintf("offer(%d,chain=%t,holds=%t)", offered, inChain, holds)
		r = s.m.Offer(inChain, holds)
	case 3: // the registration answers, or a re-registration loses
		switch {
		case s.registering && c.intn(4) == 0:
			s.registering = false
			name, r = "lost", s.m.RegistrationLost(s.quiet())
		case s.registering && c.intn(4) == 0:
			s.registering = false
			name, r = "regfail", s.m.RegistrationFailed()
		case s.registering:
			s.registering = false
			s.registeredEvent = true
			defer func() { s.registeredEvent = false }()
			name, r = "registered", s.m.Registered()
		case c.intn(3) == 0:
			name, r = "lost(running)", s.m.RegistrationLost(s.quiet())
		default:
			return nil
		}
	case 4: // the activate turn ends
		if !s.activateTurn {
			return nil
		}
		s.activateTurn, s.activated = false, true
		failed := c.intn(5) == 0
		name, r = fmt.Sprintf("activated(failed=%t)", failed), s.m.ActivateDone(failed, s.now)
		if !failed && st == lifecycle.Activating {
			s.idleSince = s.now
		}
	case 5, 6: // a running turn ends
		n := len(s.running) + s.ticks
		if n == 0 {
			return nil
		}
		i := c.intn(n)
		activity, panicked := true, c.intn(10) == 0
		if i < len(s.running) {
			seq := s.running[i]
			s.running = append(s.running[:i], s.running[i+1:]...)
			s.gate.Finish(seq)
			if err := s.settle(seq, "ran"); err != nil {
				return err
			}
			name = fmt.Sprintf("done(%d)", seq)
		} else {
			s.ticks--
			activity = c.intn(2) == 0 // a keep-alive timer's tick
			name = "done(tick)"
		}
		// The turn ends now, or reports a slightly earlier time (a
		// coarse clock read that lost a race with another worker's).
		end := max(s.now-time.Duration(c.intn(2))*500*time.Millisecond, 0)
		if activity {
			s.idleSince = max(s.idleSince, end)
		}
		r = s.m.TurnDone(s.quiet(), activity, panicked, end)
		name += fmt.Sprintf("(quiet=%t,activity=%t,panic=%t,now=%v)", s.quiet(), activity, panicked, end)
	case 7: // an interleaving timer tick starts
		if st != lifecycle.Active || !s.m.Usable() {
			return nil
		}
		s.ticks++
		s.log = append(s.log, "tick-starts")
		return nil
	case 8: // a deactivation or migration is asked for
		reason := grain.DeactivationReason(c.intn(5))
		if c.intn(3) == 0 {
			name, r = "migrate", s.m.Migrate(reason, s.quiet())
		} else {
			name, r = "deactivate("+reason.String()+")", s.m.Deactivate(reason, s.quiet())
		}
	case 9: // the collector looks
		s.now += time.Duration(c.intn(3)) * time.Second
		idleTick = true
		name = fmt.Sprintf("idletick(now=%v,busy=%t)", s.now, s.busy())
		r = s.m.IdleTick(s.now, s.age, s.busy())
	case 10: // OnDeactivate ends
		if !s.deactTurn {
			return nil
		}
		s.deactTurn = false
		name, r = "deactivated", s.m.Deactivated()
	case 11:
		if c.intn(8) != 0 {
			return nil
		}
		name, r = "close", s.m.Close()
	case 12: // grain code asks for a delay, or cancels it
		d := time.Duration(c.intn(8)-1) * time.Second
		s.m.DelayDeactivation(s.now, d)
		if d <= 0 {
			s.keepUntil = 0
		} else {
			s.keepUntil = s.now + d
		}
		s.log = append(s.log, fmt.Sprintf("delay(now=%v,d=%v)", s.now, d))
		return nil
	case 13: // the memory collector takes the activation it chose
		s.now += time.Duration(c.intn(2)) * time.Second
		since, collectable := s.m.IdleSince(s.now)
		want := st == lifecycle.Active && !pendingBefore && s.now >= s.keepUntil
		if collectable != want || st == lifecycle.Active && since != s.idleSince {
			return s.fail("IdleSince(%v) = %v, %t; want %v, %t", s.now, since, collectable, s.idleSince, want)
		}
		if c.intn(3) == 0 { // chosen before the last turn ended
			since -= time.Second
		}
		name = fmt.Sprintf("pressure(now=%v,since=%v,busy=%t)", s.now, since, s.busy())
		r = s.m.PressureTick(s.now, since, s.busy())
		take := collectable && !s.busy() && since == s.idleSince
		if r.Has(lifecycle.BeginDeactivate) != take || r.Do != 0 && r.Reason != grain.DeactivateMemoryPressure {
			return s.fail("%s -> %s: collectable=%t busy=%t idle since %v", name, r, collectable, s.busy(), s.idleSince)
		}
	}
	s.log = append(s.log, name+" -> "+r.String())
	return s.perform(st, pendingBefore, r, offered, kind, holds, idleTick)
}

// perform carries out r, from an event sent in state before, checking the
// invariants.
func (s *sim) perform(before lifecycle.State, pendingBefore bool, r lifecycle.Result, offered uint64, kind admission.Kind, holds, idleTick bool) error {
	after := s.m.State()
	if before == lifecycle.Dead {
		want := lifecycle.Result{}
		switch {
		case offered != 0:
			want.Do = lifecycle.Retry
		case s.registeredEvent: // closed before the registration answered
			want.Do = lifecycle.StartActivate
		}
		if r != want || after != lifecycle.Dead {
			return s.fail("dead answered %s, and is %s", r, after)
		}
	}
	if bits := r.Do & (lifecycle.Admit | lifecycle.Hold | lifecycle.Retry | lifecycle.FailDeadlock); offered != 0 && (bits == 0 || bits&(bits-1) != 0) {
		return s.fail("an offer must be answered by exactly one of admit, hold, retry, fail-deadlock: %s", r)
	}
	if s.begun > 0 && r.Do&(lifecycle.Admit|lifecycle.AdmitHeld|lifecycle.StartQueued|lifecycle.FireDueTimers) != 0 {
		return s.fail("%s after the deactivation began", r)
	}
	if s.wasPendingYet && r.Do&(lifecycle.StartQueued|lifecycle.FireDueTimers) != 0 {
		return s.fail("%s with a deactivation pending", r)
	}
	if s.wasPendingYet && r.Has(lifecycle.Admit) && !holds {
		return s.fail("admitted a request whose chain holds nothing here with a deactivation pending")
	}
	if r.Has(lifecycle.Retry) && before != lifecycle.Dead {
		return s.fail("retry from %s", before)
	}
	if r.Has(lifecycle.BeginDeactivate) {
		if s.begun++; s.begun > 1 {
			return s.fail("a second deactivation began")
		}
		// ActivateDone begins only with nothing held: nothing it admits.
		if !s.quiet() || before != lifecycle.Active && before != lifecycle.Activating {
			return s.fail("deactivation began from %s, quiet=%t", before, s.quiet())
		}
		if r.Reason == grain.DeactivateIdle && idleTick {
			if s.busy() || pendingBefore || s.now-s.idleSince < s.age || s.now < s.keepUntil {
				return s.fail("collected: busy=%t pending=%t idle for %v of %v, delayed until %v",
					s.busy(), pendingBefore, s.now-s.idleSince, s.age, s.keepUntil)
			}
		}
		s.deactTurn = true
	}
	if idleTick && r.Do == 0 && before == lifecycle.Active && !pendingBefore && !s.busy() && s.now-s.idleSince >= s.age && s.now >= s.keepUntil {
		return s.fail("an activation idle for %v of %v, delayed until %v, was not collected", s.now-s.idleSince, s.age, s.keepUntil)
	}
	if _, ok := s.m.Pending(); ok {
		s.wasPendingYet = true
	}

	// The request offered.
	switch {
	case r.Has(lifecycle.Admit):
		switch s.gate.Admit(offered, kind, holds) {
		case admission.Start:
			s.running = append(s.running, offered)
		case admission.Queue:
			s.gateQ = append(s.gateQ, req{offered, kind})
		case admission.Deadlock:
			if err := s.settle(offered, "deadlock"); err != nil {
				return err
			}
		}
	case r.Has(lifecycle.Hold):
		s.held = append(s.held, req{offered, kind})
	case r.Has(lifecycle.Retry):
		if err := s.settle(offered, "retried"); err != nil {
			return err
		}
	case r.Has(lifecycle.FailDeadlock):
		if err := s.settle(offered, "deadlock"); err != nil {
			return err
		}
	}
	if r.Has(lifecycle.StartActivate) {
		if s.activated || s.activateTurn {
			return s.fail("the activate turn queued twice")
		}
		s.activateTurn = true
	}
	if r.Has(lifecycle.AdmitHeld) {
		if r.Held != len(s.held) {
			return s.fail("admit-held of %d, holding %d", r.Held, len(s.held))
		}
		for _, h := range s.held {
			switch s.gate.Admit(h.seq, h.kind, false) {
			case admission.Start:
				s.running = append(s.running, h.seq)
			case admission.Queue:
				s.gateQ = append(s.gateQ, h)
			default:
				return s.fail("a held request deadlocked")
			}
		}
		s.held = nil
	}
	if r.Has(lifecycle.FireDueTimers) {
		if s.fired {
			return s.fail("timers fired twice")
		}
		s.fired = true
	}
	if r.Has(lifecycle.StartQueued) {
		for len(s.gateQ) > 0 && s.gate.Next(s.gateQ[0].seq, s.gateQ[0].kind) {
			s.running = append(s.running, s.gateQ[0].seq)
			s.gateQ = s.gateQ[1:]
		}
	}
	queueActs := r.Do & (lifecycle.RerouteQueue | lifecycle.ForwardQueue | lifecycle.MigrateQueue | lifecycle.FailQueue)
	if r.Has(lifecycle.Remove) {
		if s.removed++; s.removed > 1 {
			return s.fail("removed twice")
		}
		if after != lifecycle.Dead || queueActs == 0 || queueActs&(queueActs-1) != 0 {
			return s.fail("remove must come with the move to dead and one queue action: %s", r)
		}
		if s.m.Migrating() && r.Has(lifecycle.RerouteQueue) || !s.m.Migrating() && r.Has(lifecycle.MigrateQueue) {
			return s.fail("%s but migrating=%t", r, s.m.Migrating())
		}
		if r.Has(lifecycle.FailQueue) == (r.Cause == lifecycle.CauseNone) {
			return s.fail("fail-queue with cause %s", r.Cause)
		}
		if r.Held != len(s.held) {
			return s.fail("the queue action covers %d held, holding %d", r.Held, len(s.held))
		}
		how := r.String()
		for _, h := range s.held {
			if err := s.settle(h.seq, how); err != nil {
				return err
			}
		}
		for _, q := range s.gateQ {
			s.gate.Drop()
			if err := s.settle(q.seq, how); err != nil {
				return err
			}
		}
		s.held, s.gateQ = nil, nil
	} else if queueActs != 0 {
		return s.fail("a queue action without remove: %s", r)
	}
	if (after == lifecycle.Dead) != (s.removed == 1) {
		return s.fail("dead=%t, removed %d times", after == lifecycle.Dead, s.removed)
	}
	if s.m.Held() != len(s.held) {
		return s.fail("machine holds %d, runtime %d", s.m.Held(), len(s.held))
	}
	return nil
}

// finish ends every running turn, then closes the activation if it is
// not dead, and checks that every request was settled once.
func (s *sim) finish() error {
	for len(s.running) > 0 {
		seq := s.running[0]
		s.running = s.running[1:]
		s.gate.Finish(seq)
		if err := s.settle(seq, "ran"); err != nil {
			return err
		}
		st := s.m.State()
		_, pending := s.m.Pending()
		r := s.m.TurnDone(s.quiet(), true, false, s.now)
		s.log = append(s.log, fmt.Sprintf("done(%d) -> %s", seq, r))
		if err := s.perform(st, pending, r, 0, 0, false, false); err != nil {
			return err
		}
	}
	if s.m.State() != lifecycle.Dead {
		st := s.m.State()
		_, pending := s.m.Pending()
		r := s.m.Close()
		s.log = append(s.log, "close -> "+r.String())
		if err := s.perform(st, pending, r, 0, 0, false, false); err != nil {
			return err
		}
	}
	for seq, how := range s.outcome {
		if how == "" {
			return s.fail("request %d was never settled", seq)
		}
	}
	return nil
}

func runSim(c chooser, steps int, stop func() bool) error {
	s := newSim()
	for range steps {
		if stop != nil && stop() {
			break
		}
		if err := s.step(c); err != nil {
			return err
		}
	}
	return s.finish()
}

// TestRandomSequences checks the package's invariants over random event
// sequences a runtime could send.
func TestRandomSequences(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for seed := range uint64(n) {
		c := randChooser{rand.New(rand.NewPCG(seed, 0x11fe))}
		if err := runSim(c, 80, nil); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// FuzzLifecycle is TestRandomSequences driven by fuzz input.
func FuzzLifecycle(f *testing.F) {
	f.Add([]byte{0, 3, 4, 0, 5, 8, 5, 10})
	f.Add([]byte{0, 0, 3, 8, 4, 0, 5, 10, 0})
	f.Add([]byte{9, 2, 7, 9, 9, 9, 9, 9, 9})
	f.Add([]byte{0, 3, 4, 0, 5, 12, 4, 9, 9, 9, 12, 0, 9, 9, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &byteChooser{b: b}
		if err := runSim(c, len(b), c.done); err != nil {
			t.Fatal(err)
		}
	})
}
