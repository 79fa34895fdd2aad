package lifecycle

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/granaryio/granary/grain"
)

// State is where an activation is in its life.
type State uint8

const (
	// Registering: made, waiting for its directory registration. The
	// zero State.
	Registering State = iota
	// Activating: the activate turn is queued or running.
	Activating
	// Active: OnActivate succeeded; requests are admitted.
	Active
	// Deactivating: the deactivate turn is queued or running.
	Deactivating
	// Dead: out of the catalog. Final.
	Dead
)

var stateNames = [...]string{"registering", "activating", "active", "deactivating", "dead"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Action is a set of things the runtime must do, in the order of their
// bits. See the package comment.
type Action uint16

const (
	// Admit: offer the request to the admission gate.
	Admit Action = 1 << iota
	// Hold: keep the request in the activation's queue, past the gate.
	Hold
	// Retry: the activation is dead; route the request again.
	Retry
	// FailDeadlock: fail the request as a deadlock.
	FailDeadlock
	// StartActivate: queue the activate turn (OnActivate).
	StartActivate
	// AdmitHeld: offer the held requests to the gate, in arrival order.
	AdmitHeld
	// FireDueTimers: fire the timers that came due while activating.
	FireDueTimers
	// StartQueued: start what the gate's queue may start now.
	StartQueued
	// StopTimers: stop the activation's timers.
	StopTimers
	// BeginDeactivate: queue the deactivate turn (OnDeactivate with
	// Result.Reason).
	BeginDeactivate
	// DropRegistration: the directory entry is another activation's; do
	// not unregister it on Remove.
	DropRegistration
	// Remove: take the activation out of the catalog (and unregister it).
	Remove
	// RerouteQueue: route every queued request again.
	RerouteQueue
	// ForwardQueue: send every queued request to the registration's
	// winner.
	ForwardQueue
	// MigrateQueue: send every queued request to the migration's target.
	MigrateQueue
	// FailQueue: fail every queued request, for Result.Cause.
	FailQueue
)

var actionNames = [...]string{
	"admit", "hold", "retry", "fail-deadlock", "start-activate", "admit-held",
	"fire-due-timers", "start-queued", "stop-timers", "begin-deactivate",
	"drop-registration", "remove", "reroute-queue", "forward-queue",
	"migrate-queue", "fail-queue",
}

// Cause says why FailQueue fails the queue.
type Cause uint8

const (
	// CauseNone: no failure.
	CauseNone Cause = iota
	// CauseActivate: OnActivate (or reading the grain's state) failed
	// or panicked; the requests get its error.
	CauseActivate
	// CauseRegistration: the directory registration failed.
	CauseRegistration
	// CauseClosed: the silo closed (Unavailable).
	CauseClosed
)

var causeNames = [...]string{"none", "activate", "registration", "closed"}

func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "Cause(" + strconv.Itoa(int(c)) + ")"
}

// Result is what an event asks of the runtime. It is returned by value:
// stepping a Machine allocates nothing.
type Result struct {
	Do Action
	// Reason is the deactivation's reason, with BeginDeactivate.
	Reason grain.DeactivationReason
	// Cause is why, with FailQueue.
	Cause Cause
	// Held is how many requests the lifecycle held that AdmitHeld or the
	// queue action covers.
	Held int
}

// Has reports whether r asks for every action in a.
func (r Result) Has(a Action) bool { return r.Do&a == a }

// String lists the actions, as the scenarios write them: "none", or names
// in bit order, with the reason, the cause and the held count.
func (r Result) String() string {
	if r.Do == 0 {
		return "none"
	}
	var b strings.Builder
	for i := range actionNames {
		a := Action(1) << i
		if r.Do&a == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(actionNames[i])
		switch a {
		case BeginDeactivate:
			b.WriteString("(" + r.Reason.String() + ")")
		case FailQueue:
			b.WriteString("(" + r.Cause.String() + ")")
		}
	}
	if r.Held > 0 {
		b.WriteString(" held=" + strconv.Itoa(r.Held))
	}
	return b.String()
}

// Machine is the lifecycle of one activation. The zero Machine is
// Registering, holding nothing. Not safe for concurrent use: the
// activation's lock is held around every method.
type Machine struct {
	idleSince time.Duration // when the activation last became idle: its activation or its last active turn ended
	keepUntil time.Duration // DelayDeactivation: not collected for idleness before this; 0 for none
	held      int32         // requests held (Hold) not yet admitted or disposed of
	state     State
	flags     flag
	reason    uint8 // the pending deactivation's grain.DeactivationReason
}

type flag uint8

const (
	pending    flag = 1 << iota // a deactivation was asked for
	migrate                     // ... by Migrate
	unanswered                  // Close came before the registration answered
)

func (m *Machine) is(f flag) bool { return m.flags&f != 0 }

// State returns the activation's state.
func (m *Machine) State() State { return m.state }

// Pending reports whether a deactivation was asked for (it may have begun)
// and its reason.
func (m *Machine) Pending() (grain.DeactivationReason, bool) {
	return grain.DeactivationReason(m.reason), m.is(pending)
}

// Migrating reports whether the deactivation asked for is a migration.
func (m *Machine) Migrating() bool { return m.is(migrate) }

// Held returns how many requests the activation holds for the lifecycle.
func (m *Machine) Held() int { return int(m.held) }

// Usable reports whether the activation may still take on work of its
// own: a timer registered, a stateless-worker request, a timer tick (once
// Active). False once a deactivation is pending.
func (m *Machine) Usable() bool { return m.state <= Active && !m.is(pending) }

// OfferNeeds reports which of Offer's arguments the machine reads in its
// present state: inChain while registering or activating, holdsChain while
// active with a deactivation pending. The runtime may pass false for the
// other without walking the request's call chain.
func (m *Machine) OfferNeeds() (inChain, holdsChain bool) {
	return m.state < Active, m.state == Active && m.is(pending)
}

// Unhold takes back the last Offer that answered Hold: the runtime refused
// that request instead of holding it (its queue was full).
func (m *Machine) Unhold() {
	if m.held > 0 {
		m.held--
	}
}

// Offer is a request arriving. inChain: its call chain passes through this
// activation; holdsChain: a request up its chain runs here now.
func (m *Machine) Offer(inChain, holdsChain bool) Result {
	switch m.state {
	case Active:
		if !m.is(pending) || holdsChain {
			return Result{Do: Admit}
		}
	case Registering, Activating:
		if inChain {
			return Result{Do: FailDeadlock}
		}
	case Dead:
		return Result{Do: Retry}
	}
	m.held++
	return Result{Do: Hold}
}

// Registered is the directory registration won, or there is none. When
// it comes after a Close that came before any answer, the activate turn is
// still queued and the activation stays Dead: see the package comment.
func (m *Machine) Registered() Result {
	switch {
	case m.state == Registering:
		m.state = Activating
	case m.state == Dead && m.is(unanswered):
		m.flags &^= unanswered
	default:
		return Result{}
	}
	return Result{Do: StartActivate}
}

// RegistrationLost is the directory naming another activation of the
// grain. quiet: nothing runs (see Deactivate).
func (m *Machine) RegistrationLost(quiet bool) Result {
	switch m.state {
	case Registering:
		return m.die(ForwardQueue, CauseNone)
	case Dead:
		m.flags &^= unanswered // answered: no Registered follows
		return Result{}
	}
	r := m.request(grain.DeactivateOperator, false, quiet)
	r.Do |= DropRegistration
	return r
}

// RegistrationFailed is the directory registration failing for good.
func (m *Machine) RegistrationFailed() Result {
	if m.state != Registering {
		m.flags &^= unanswered // answered: no Registered follows
		return Result{}
	}
	return m.die(FailQueue, CauseRegistration)
}

// ActivateDone is the activate turn ending at now, failed or not.
func (m *Machine) ActivateDone(failed bool, now time.Duration) Result {
	if m.state != Activating {
		return Result{}
	}
	if failed {
		r := m.die(FailQueue, CauseActivate)
		r.Do |= StopTimers
		return r
	}
	m.state = Active
	m.idleSince = now
	switch {
	case m.held > 0:
		r := Result{Do: AdmitHeld, Held: int(m.held)}
		m.held = 0
		if !m.is(pending) {
			r.Do |= FireDueTimers
		}
		return r
	case m.is(pending):
		return m.begin()
	}
	return Result{Do: FireDueTimers}
}

// TurnDone is a request's or timer tick's turn ending at now, after the
// gate was told. quiet: nothing runs any more; activity: the turn counts
// against idle collection (the idle clock restarts at now); panicked:
// grain code panicked.
func (m *Machine) TurnDone(quiet, activity, panicked bool, now time.Duration) Result {
	if activity {
		m.idleSince = max(m.idleSince, now)
	}
	if m.state != Active {
		return Result{}
	}
	if panicked && !m.is(pending) {
		m.flags |= pending
		m.reason = uint8(grain.DeactivatePanic)
	}
	switch {
	case !m.is(pending):
		return Result{Do: StartQueued}
	case quiet:
		return m.begin()
	}
	return Result{}
}

// Deactivate asks for the activation to end once quiet (nothing runs).
func (m *Machine) Deactivate(reason grain.DeactivationReason, quiet bool) Result {
	return m.request(reason, false, quiet)
}

// Migrate asks for the activation to end once quiet, keeping its queue
// for the migration's target.
func (m *Machine) Migrate(reason grain.DeactivationReason, quiet bool) Result {
	return m.request(reason, true, quiet)
}

// IdleTick is the idle collector looking at the activation at now; age is
// its type's collection age; busy: anything runs or waits in the gate.
// It collects the activation once it has been idle for age and any
// DelayDeactivation has run out.
func (m *Machine) IdleTick(now, age time.Duration, busy bool) Result {
	switch {
	case m.state != Active || m.is(pending) || busy:
		return Result{}
	case now-m.idleSince < age || now < m.keepUntil:
		return Result{}
	}
	m.flags |= pending
	m.reason = uint8(grain.DeactivateIdle)
	return m.begin()
}

// IdleSince returns when the activation last became idle (the end of its
// activation or of its last active turn), for the memory collector's
// choice of the least recently used, and whether that collector may take
// it at now: it is Active, no deactivation is pending and no
// DelayDeactivation keeps it. Whether it is busy is the runtime's to say.
func (m *Machine) IdleSince(now time.Duration) (since time.Duration, collectable bool) {
	return m.idleSince, m.state == Active && !m.is(pending) && now >= m.keepUntil
}

// PressureTick is the memory collector taking the activation at now;
// since is the idle time IdleSince gave when the collector chose it, and
// busy is as for IdleTick. It collects the activation whatever its idle
// age, unless it is busy, is no longer collectable, or its idle time is no
// longer since: a turn that ended between the choice and this event made
// it recently used.
func (m *Machine) PressureTick(now, since time.Duration, busy bool) Result {
	switch {
	case m.state != Active || m.is(pending) || busy:
		return Result{}
	case m.idleSince != since || now < m.keepUntil:
		return Result{}
	}
	m.flags |= pending
	m.reason = uint8(grain.DeactivateMemoryPressure)
	return m.begin()
}

// DelayDeactivation keeps the activation from being collected for
// idleness before now+d, replacing any earlier delay, longer or shorter;
// d <= 0 cancels the delay. It changes nothing else: a deactivation asked
// for (Deactivate, Migrate) or Close is not delayed. It answers no
// action, in any state.
func (m *Machine) DelayDeactivation(now, d time.Duration) {
	switch {
	case d <= 0:
		m.keepUntil = 0
	case now > math.MaxInt64-d:
		m.keepUntil = math.MaxInt64
	default:
		m.keepUntil = now + d
	}
}

// Deactivated is the deactivate turn ending.
func (m *Machine) Deactivated() Result {
	if m.state != Deactivating {
		return Result{}
	}
	if m.is(migrate) {
		return m.die(MigrateQueue, CauseNone)
	}
	return m.die(RerouteQueue, CauseNone)
}

// Close is the silo closing at once.
func (m *Machine) Close() Result {
	if m.state == Dead {
		return Result{}
	}
	if m.state == Registering {
		m.flags |= unanswered
	}
	r := m.die(FailQueue, CauseClosed)
	r.Do |= StopTimers
	return r
}

// request records a deactivation asked for, first come first served, and
// begins it if the activation is active and quiet.
func (m *Machine) request(reason grain.DeactivationReason, migrating, quiet bool) Result {
	if m.state > Active || m.is(pending) {
		return Result{}
	}
	m.flags |= pending
	if migrating {
		m.flags |= migrate
	}
	m.reason = uint8(reason)
	if m.state == Active && quiet {
		return m.begin()
	}
	return Result{}
}

// begin moves an active, quiet activation with a deactivation pending to
// Deactivating.
func (m *Machine) begin() Result {
	m.state = Deactivating
	return Result{Do: StopTimers | BeginDeactivate, Reason: grain.DeactivationReason(m.reason)}
}

// die moves to Dead, disposing of the queue with the action queue.
func (m *Machine) die(queue Action, c Cause) Result {
	r := Result{Do: Remove | queue, Cause: c, Held: int(m.held)}
	m.state, m.held = Dead, 0
	return r
}

// String describes the machine as the scenarios check it: the state, then
// pending=<reason>, migrating, held=<n>, unanswered, and, while Active,
// idle-since=<time> and keep-until=<time> if a delay is set.
func (m *Machine) String() string {
	var b strings.Builder
	b.WriteString(m.state.String())
	if m.is(pending) {
		b.WriteString(" pending=" + grain.DeactivationReason(m.reason).String())
	}
	if m.is(migrate) {
		b.WriteString(" migrating")
	}
	if m.held > 0 {
		b.WriteString(" held=" + strconv.Itoa(int(m.held)))
	}
	if m.is(unanswered) {
		b.WriteString(" unanswered")
	}
	if m.state == Active {
		b.WriteString(" idle-since=" + m.idleSince.String())
		if m.keepUntil > 0 {
			b.WriteString(" keep-until=" + m.keepUntil.String())
		}
	}
	return b.String()
}
