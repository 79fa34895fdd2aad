// Package lifecycle is the life of one grain activation, from its making
// to its removal from the catalog, as a pure state machine: the rules the
// local runtime (silo/internal/local) carries out, written in one place. A Machine does no I/O, takes no lock, starts no goroutine and
// reads no clock: the runtime holds the activation's lock around every
// call, passes each event in (with the time, when a rule needs it) and
// performs the actions that come out. It sits beside admission.Gate,
// which decides, once the lifecycle admitted a request, when it starts.
//
// The package imports the standard library and grain (for
// grain.DeactivationReason) only, never the runtime.
//
// # States
//
//	Registering   made, holding the request that made it; in a cluster,
//	              waiting for its directory registration (a silo alone
//	              sends Registered at once). The zero Machine.
//	Activating    the activate turn (OnActivate) is queued or running.
//	Active        OnActivate succeeded: requests are admitted.
//	Deactivating  the deactivate turn (OnDeactivate) is queued or running.
//	Dead          out of the catalog. Final.
//
// Transitions:
//
//	Registering  -> Activating    Registered
//	Registering  -> Dead          RegistrationLost (forward to the winner), RegistrationFailed
//	Activating   -> Active        ActivateDone, succeeded
//	Activating   -> Dead          ActivateDone, failed
//	Active       -> Deactivating  a deactivation was asked for and the activation is quiet
//	Deactivating -> Dead          Deactivated
//	any          -> Dead          Close
//
// Besides its state a Machine records whether a deactivation is pending
// (asked for, not yet begun: Deactivate, Migrate, a panic, a lost
// registration or idle collection, with the first reason winning), how
// many requests it told the runtime to hold, for idle collection when
// the activation last became idle and until when DelayDeactivation keeps
// it, and whether Close came before the registration answered.
//
// # Events and their rules
//
// Offer(inChain, holdsChain): a request arrives. inChain says its call
// chain passes through this activation at all; holdsChain that a request
// up its chain runs here now (admission.Gate.Holds). Only inChain matters
// while registering or activating and only holdsChain while a deactivation
// is pending, so a runtime may skip either chain walk outside those cases:
// OfferNeeds says which it needs.
//
//	Registering, Activating  Hold; but FailDeadlock when inChain (a call
//	                         from OnActivate came back: it would wait for
//	                         the activation that waits for it)
//	Active                   Admit (to the gate)
//	Active, pending          Hold; but Admit when holdsChain (the running
//	                         request it serves cannot end, nor the
//	                         deactivation begin, without it)
//	Deactivating             Hold (rerouted once the activation is dead)
//	Dead                     Retry: route the request again
//
// Registered: the registration won (or there is no directory):
// StartActivate, and the state becomes Activating. If the silo closed
// before the registration answered (Close while Registering), Registered
// still answers StartActivate, once, and the activation stays Dead: the
// runtime queues the activate turn as it always did (a closed pool
// refuses it; one not closed yet runs the turn, which skips OnActivate
// once the silo closes, and whose end, like every late event, changes
// nothing). A registration that lost or failed after
// that Close was its answer: no Registered follows.
//
// RegistrationLost(quiet): the directory holds another activation of the
// grain. Before the activation started (Registering) it never runs: it is
// removed and its queue goes to the winner (Remove, ForwardQueue). Once
// started, the entry is the winner's (DropRegistration) and the
// activation deactivates with grain.DeactivateOperator, like Deactivate;
// its queue is then rerouted, which finds the winner through the
// directory.
//
// RegistrationFailed: the registration failed for good (the runtime
// retried first). Before the activation started: Remove, FailQueue with
// CauseRegistration. Ignored later.
//
// ActivateDone(failed, now): the activate turn ended. Failed: StopTimers,
// Remove, FailQueue with CauseActivate. Succeeded: Active, the idle clock
// starts at now, and the held requests are admitted in arrival order
// (AdmitHeld) even when a deactivation is pending; the pending
// deactivation then begins once they have run. With nothing held, a
// pending deactivation begins at once (nothing can be running). With none
// pending, the timers that came due while activating fire
// (FireDueTimers).
//
// TurnDone(quiet, activity, panicked, now): a request's or a timer tick's
// turn ended at now and the gate was told (quiet: the gate runs nothing
// and no interleaving tick runs). activity (requests, and ticks of
// keep-alive timers) restarts the idle clock at now; it never moves back,
// so a turn reporting an earlier time than one recorded changes nothing.
// Nothing restarts it when a request starts: the activation is busy, so
// the collector passes it by, until its TurnDone. panicked asks for
// a deactivation with grain.DeactivatePanic first. Then, in Active: with
// a deactivation pending, BeginDeactivate if quiet and nothing otherwise:
// the gate's queue is not started, it is rerouted with the rest; with none
// pending, StartQueued.
//
// Deactivate(reason, quiet): DeactivateOnIdle, an operator, a panic, or
// the silo stopping asks for a deactivation. Accepted while Registering,
// Activating or Active with none pending; otherwise ignored (the first
// reason wins). It begins at once if Active and quiet, else when a later
// TurnDone or ActivateDone finds it quiet.
//
// Migrate(reason, quiet): like Deactivate, accepted and begun by the same
// rules, except that when the activation is dead its queue is kept for
// the migration's target (MigrateQueue) rather than rerouted. No transfer
// protocol exists yet: nothing in the runtime sends Migrate, and until
// something does, it performs MigrateQueue as RerouteQueue.
//
// IdleTick(now, age, busy): the collector looks at the activation (busy:
// the gate runs or queues anything, or an interleaving tick runs). Only an
// Active activation with no deactivation pending and not busy is
// considered. Once now is at least age past the idle clock (the end of
// its activation or of its last active turn) and not before the time
// DelayDeactivation set, it is collected: BeginDeactivate with
// grain.DeactivateIdle. The collector looks at a type once per collection
// interval, so an idle activation lives between its age and its age plus
// one interval (past any delay), and a busy one is never collected.
//
// PressureTick(now, since, busy): the memory collector takes the
// activation, having chosen it among the least recently used by
// IdleSince(now), which reads the idle clock and says whether the
// activation is Active, with no deactivation pending and no
// DelayDeactivation in force. Under the same lock as busy is read,
// PressureTick collects it whatever its idle age, unless it is busy,
// IdleSince would no longer allow it, or its idle clock is no longer
// since (a turn ended in between, so it is no longer among the least
// recently used): BeginDeactivate with grain.DeactivateMemoryPressure.
// IdleSince answers no action.
//
// DelayDeactivation(now, d): grain code asks not to be collected for
// idleness before now+d, replacing any earlier delay, longer or shorter
// (as Orleans' IGrainContext.DelayDeactivation); d <= 0 cancels it, and a
// d too long to add saturates. Accepted in any state, answering nothing;
// it delays only collection (IdleTick, PressureTick), never a
// deactivation asked for or Close.
//
// Deactivated: the deactivate turn ended (or could not be queued): Dead,
// Remove, and the queue is rerouted (RerouteQueue, or MigrateQueue after
// Migrate).
//
// Close: the silo closes at once: StopTimers, Remove, FailQueue with
// CauseClosed, from any state but Dead.
//
// Any other event in a state is ignored and returns no action, as are all
// events but Offer (and a Registered after Close, above) once Dead: a turn
// that ends after Close is late, not wrong.
//
// # Actions
//
// A Result carries a set of Actions (a bitmask: no allocation per event)
// with the deactivation Reason, the failure Cause and the Held count they
// refer to. The runtime performs them in the order of their bits:
//
//	Admit            offer the request to the admission gate: Start queues
//	                 its turn, Queue keeps it in the activation's queue,
//	                 Deadlock fails it
//	Hold             keep the request in the activation's queue, not offered
//	                 to the gate
//	Retry            the activation is dead: route the request again
//	FailDeadlock     fail the request as a deadlock
//	StartActivate    queue the activate turn (OnActivate)
//	AdmitHeld        offer the held requests to the gate, in arrival order
//	FireDueTimers    fire the timers that came due while activating
//	StartQueued      start the gate's queue (admission.Gate.Next on its head
//	                 until it answers false)
//	StopTimers       stop the activation's timers
//	BeginDeactivate  queue the deactivate turn (OnDeactivate with Reason)
//	DropRegistration the directory entry is the winner's: do not unregister
//	                 it when the activation is removed
//	Remove           take the activation out of the catalog, unregistering it
//	                 from the directory if it registered
//	RerouteQueue     route every queued request again (timer ticks in the
//	                 queue are dropped: they die with the activation)
//	ForwardQueue     send every queued request to the registration's winner
//	MigrateQueue     send every queued request to the migration's target
//	FailQueue        fail every queued request, for Cause
//
// The activation's queue in the runtime holds both the requests the
// lifecycle held and those the gate queued; the queue actions cover both,
// and Held counts the former.
//
// # Invariants
//
//   - BeginDeactivate comes at most once, only to an activation that
//     OnActivate made Active, and only when it is quiet (the event said
//     so, or ActivateDone admitted nothing).
//   - After a deactivation is pending, no request is admitted but one
//     whose chain holds a running request here, or one held while
//     activating (AdmitHeld); StartQueued and FireDueTimers never come.
//   - After BeginDeactivate nothing is admitted.
//   - Every held request is admitted (AdmitHeld) or disposed of with the
//     queue (RerouteQueue, ForwardQueue, MigrateQueue or FailQueue):
//     Held adds up to every Hold. None is dropped.
//   - Remove comes exactly once, with the move to Dead, with exactly one
//     queue action; Dead is final and answers only Offer, with Retry, and
//     the first Registered after a Close that came before the
//     registration answered, with StartActivate.
//
// # Wiring into the silo
//
// silo/internal/local.Activation keeps an activation's lock (Mu), its
// queue of *Call, its timers, its admission.Gate, and a Machine, which
// holds its whole lifecycle state: the runtime keeps none of its own. It
// feeds each event with Mu held; submit performs Offer's answer,
// unlockTurnDone TurnDone's StartQueued (the hot path), and unlockDo every
// other answer, releasing Mu:
//
//	activationFor, workerFor          Offer, before the activation is
//	  (the request that makes it)       published (holdFirst)
//	StartActivation (a silo alone, a  Registered; the runtime performs
//	  worker, or the cluster's          StartActivate with start(), and
//	  registration won)                 ActivateDone(failed) if start fails
//	StartActivation, silo draining    Deactivate(DeactivateShutdown, quiet)
//	  (Stop's DeactivateAll began)
//	Abandon(winner, nil)              RegistrationLost(quiet)
//	  (the registration lost)
//	Abandon(_, err)                   RegistrationFailed
//	  (the registration failed)
//	submit                            Offer, walking the chain only as
//	                                    OfferNeeds says
//	activated (the activate turn's    ActivateDone(failed, Since())
//	  Done)
//	finish (a request's Done),        TurnDone(quiet, activity, panicked,
//	  grainTimer.done (a tick's)        IdleNow()) after gate.Finish
//	                                    (ticksRunning-- for an interleaving
//	                                    tick); activity for a request or a
//	                                    keep-alive tick
//	turnCtx.DelayDeactivation         DelayDeactivation(Since(), d)
//	RequestDeactivation: turnCtx.     Deactivate(reason, quiet)
//	  DeactivateOnIdle, Silo.
//	  Deactivate, DeactivateAll
//	  (Silo.Stop), cluster.lost
//	collectIdle (once per type's      IdleTick(now, typ.Age, busy); never
//	  interval, on its schedule)        for a keep-alive type
//	collectMemory (a memory round,    IdleSince(now) to choose, then
//	  while the heap is over target)    PressureTick(now, since, busy);
//	                                    never for a keep-alive type
//	deactivated (the deactivate       Deactivated
//	  turn's Done, or its push
//	  failing)
//	close (Runtime.Abort)             Close
//	registerTimer, workerFor          Usable
//	grainTimer.fireLocked             State() < Active: defer the tick
//	                                    (FireDueTimers fires it); else fire
//	                                    only if Usable
//
// where quiet is gate.Running() == 0 && ticksRunning == 0, busy is
// !gate.Idle() || ticksRunning > 0 || queued > 0, and times are durations
// since the runtime's epoch. IdleNow is the timeout wheel's coarse clock
// plus its resolution with the real clock (no clock read per turn, and
// not earlier than the turn's end while the sweeper keeps up), the exact
// time with a fake one. cluster.lost (a running duplicate) stores
// Registered false itself, then sends Deactivate(DeactivateOperator): the
// same as RegistrationLost(quiet) and its DropRegistration. The runtime
// performs FailQueue with the activate or registration error it holds, or
// Unavailable for CauseClosed. Code outside the runtime asks the
// activation (Lifecycle, DeactivationPending), which reads the Machine.
package lifecycle
