package local

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A call is one request in flight, from the caller's Invoke to the
// callee's reply. It is also the callee's turn (its Task) and the home of
// the callee's Context, so that a local call allocates nothing of its own:
// records are pooled.
//
// Ownership. A record has up to three owners, counted in refs: the caller
// (until it has read the reply; none for a one-way call), the callee
// (until its turn ended or it was dropped), and an armed timeout timer
// (until it fired or was stopped). The last one out returns the record to
// the pool.
//
// Outcome. Exactly one party settles the call, by moving state from
// pending to settled: the callee with its reply, the timeout with
// DeadlineExceeded, the caller's cancellation with Canceled, or the
// runtime with a failure. Only the settler writes resp and err, and only
// before it notifies the waiter, who reads them after.
type Call struct {
	// Set by the caller before the call is routed; read-only afterwards.
	s      *Runtime
	ID     grain.ID
	Method *grain.MethodDesc
	Req    proto.Message
	// Due is the call's deadline as an offset from the silo's epoch (see
	// Silo.since).
	Due time.Duration
	// exact is the caller's context deadline when it is the call's, kept
	// as given: an offset from the epoch converts back to a wall time a
	// few nanoseconds off, since wall and monotonic clocks drift apart.
	exact  time.Time
	OneWay bool
	// limited: the call holds a place in the runtime's Limiter (see
	// limitAdmitted), which leaveLimit gives back.
	limited bool
	// Arrived is when a call from outside the silo (Incoming) reached
	// it, an offset from the epoch of the coarse call clock, at least 1;
	// 0 for a call made inside the silo. Its turn's wait is timed from it.
	Arrived time.Duration
	// Cancel is the nearest caller context that can be cancelled (an
	// outside caller's, or one a grain derived), or nil.
	Cancel  context.Context
	Headers any        // the caller's call headers, grainrt.HeaderKey's value
	Chain   *ChainLink // the requests waiting on this one, innermost first
	Depth   int        // len(chain)
	caller  *Call      // the calling turn's own record, for a call from a grain
	// link is the last ChainLink this record's turn made for the calls it
	// makes: links are immutable, so its calls with the same scope share
	// one. Atomic: goroutines the grain starts may call as its turn.
	link atomic.Pointer[ChainLink]

	// Cluster routing. raw is the encoded request of a call that came from
	// another silo, decoded by its turn (so decoding runs on the pool, not
	// on the stream's reader); req is nil until then. responder answers
	// that silo. hops counts the times the call was passed on by a silo
	// it was sent to, counting this one for a call from another silo;
	// placedHere says the call may activate its grain on this silo without
	// asking the directory (placement chose this silo); servedBy is the
	// silo whose activation answered a call forwarded from here.
	Raw        []byte
	Responder  transport.Responder
	Hops       uint32
	PlacedHere bool
	ServedBy   string
	Retries    uint8 // directory requests retried

	// A call from another process that its sender may cancel: cancelKey
	// is its name in the table cancels, which cancels the context cancel
	// holds.
	cancels   *CancelTable
	cancelKey RemoteCall

	// Set by the activation that runs the call.
	act    *Activation
	seq    uint64
	kind   admission.Kind
	tick   *grainTimer // set for a timer tick instead of a request
	hook   hookKind    // set for a lifecycle turn
	reason grain.DeactivationReason
	exec   *activation.Exec // while the turn runs, for its waits
	Ctx    turnCtx
	result proto.Message // the handler's reply, kept until Done
	resErr error

	// The outcome.
	state atomic.Uint32
	refs  atomic.Int32
	// gen counts the record's uses: a Caller a turn handed out is valid
	// while it is unchanged.
	gen    atomic.Uint64
	Resp   proto.Message
	Err    error
	Waiter WaiterKind // who waits for the outcome, and how to wake it
	inPool bool       // the caller is a turn (waiter is turnWaiter unless one-way)
	// posted: a one-way request from an activation's inbox (callOf),
	// whose turn may run the next posted requests too (runPosted).
	posted bool
	inline bool // the callee may run on the caller's goroutine (TryRun)
	// quiet: Settle does not log this one-way request's failure: it was
	// logged where it happened.
	quiet bool
	// blocking: this record's turn is inside Context.Blocking, holding no
	// processor; calls it makes wait as outside callers do.
	blocking bool
	ev       activation.Event // for a waiter that is a turn
	Donec    chan struct{}    // for a waiter outside the pool; capacity 1

	// Links in the timeout wheel, guarded by the slot's lock; wslot is
	// the slot while linked.
	wslot        *wheelSlot
	wnext, wprev *Call
}

// WaiterKind says how settle wakes the caller. A record nobody waits on
// (a one-way call, a timer tick, a lifecycle hook) gets no wake-up: a
// token sent to its channel would stay there and wake the record's next
// user at once.
type WaiterKind uint8

const (
	noWaiter      WaiterKind = iota
	OutsideWaiter            // a goroutine outside the pool, on donec
	turnWaiter               // a turn, on ev
	RemoteWaiter             // another silo, answered through responder
	ClientWaiter             // an external client, answered through responder
)

const (
	pending uint32 = iota
	settled
)

type hookKind uint8

const (
	hookNone hookKind = iota
	hookActivate
	hookDeactivate
)

// A chainLink is one request up a call chain: the request seq running on
// activation act, which waits for the calls it made. Links are immutable
// and shared by every call below them. A link to a request on another
// silo has no act; remote says which it is, so the chain can travel on.
// Reentry is the call-chain reentrancy scope of the call the request made
// (grain.AllowCallChainReentrancy): it decides, for act only, whether the
// chain may come back in.
type ChainLink struct {
	Act    *Activation
	Next   *ChainLink
	Remote *granaryv1.ChainLink
	// seqReentry is the request's seq shifted left by reentryBits, with
	// the scope in the low bits: one word for both keeps a link, which
	// every grain-to-grain call allocates, in the 32-byte size class.
	seqReentry uint64
}

// reentryBits hold a ChainLink's scope; seqs stay far below 2^62.
const reentryBits = 2

// NewChainLink returns the link of request seq on act, whose call set the
// scope r, above next.
func NewChainLink(act *Activation, seq uint64, next *ChainLink, r grainrt.ChainReentry) *ChainLink {
	return &ChainLink{Act: act, Next: next, seqReentry: seq<<reentryBits | uint64(r)}
}

// chainLink is the link of c's request for a call it makes with scope r:
// the one made for its last call, if that had the same scope. c is a
// running turn's record.
func (c *Call) chainLink(r grainrt.ChainReentry) *ChainLink {
	if l := c.link.Load(); l != nil && l.Reentry() == r {
		return l
	}
	l := NewChainLink(c.act, c.seq, c.Chain, r)
	c.link.Store(l)
	return l
}

// Seq is the request's seq on its activation.
func (l *ChainLink) Seq() uint64 { return l.seqReentry >> reentryBits }

// Reentry is the scope the request's call set.
func (l *ChainLink) Reentry() grainrt.ChainReentry {
	return grainrt.ChainReentry(l.seqReentry & (1<<reentryBits - 1))
}

// WireReentry is the link's scope for the wire (ChainLink.reentry).
func (l *ChainLink) WireReentry() granaryv1.ChainLink_Reentry {
	switch l.Reentry() {
	case grainrt.ChainReentryAllow:
		return granaryv1.ChainLink_REENTRY_ALLOW
	case grainrt.ChainReentrySuppress:
		return granaryv1.ChainLink_REENTRY_SUPPRESS
	}
	return granaryv1.ChainLink_REENTRY_UNSPECIFIED
}

// ReentryFromWire is the scope of a link of this silo that came back from
// another; a value it does not know sets no scope.
func ReentryFromWire(pl *granaryv1.ChainLink) grainrt.ChainReentry {
	switch pl.GetReentry() {
	case granaryv1.ChainLink_REENTRY_ALLOW:
		return grainrt.ChainReentryAllow
	case granaryv1.ChainLink_REENTRY_SUPPRESS:
		return grainrt.ChainReentrySuppress
	}
	return grainrt.ChainReentryDefault
}

// grainID is the link's grain.
func (l *ChainLink) grainID() grain.ID {
	if l.Act != nil {
		return l.Act.ID
	}
	id, _ := grain.ParseID(l.Remote.GetGrain())
	return id
}

// grain names the link's grain, for errors.
func (l *ChainLink) grain() string {
	if l.Act != nil {
		return l.Act.ID.String()
	}
	return l.Remote.GetGrain()
}

var callPool = sync.Pool{New: func() any {
	c := &Call{Donec: make(chan struct{}, 1)}
	c.Ctx.C = c
	return c
}}

// liveCalls counts call records in use while trackCalls is set, so tests
// can check that a call leaves nothing behind. A global counter would be a
// shared cache line on every call, so it is off otherwise.
var (
	TrackCalls bool
	LiveCalls  atomic.Int64
)

// NewCall returns a record with refs owners, settled by nobody yet.
func (s *Runtime) NewCall(refs int32) *Call {
	if TrackCalls {
		LiveCalls.Add(1)
	}
	c := callPool.Get().(*Call)
	c.s = s
	c.refs.Store(refs)
	return c
}

// Release drops one owner; the last returns the record to the pool.
func (c *Call) Release() {
	switch n := c.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("silo: call released more often than owned")
	}
	if TrackCalls {
		LiveCalls.Add(-1)
	}
	c.leaveLimit()
	c.Ctx.stopDerived()
	donec, gen := c.Donec, c.gen.Load()
	if c.Ctx.derived != nil {
		// Contexts derived from the turn's are cancelled now, by callbacks
		// the context package runs on goroutines of their own, which ask
		// the turn's context for Err. The record stays as it is, out of
		// the pool, so they read the ended turn, never a reset or reused
		// record; the garbage collector takes it when they are done. Only
		// turns that asked for Done, Err or a derived context pay this.
		c.gen.Store(gen + 1)
		return
	}
	c.reset(donec, gen)
	callPool.Put(c)
}

// reset zeroes c for its next use, keeping its channel and counting the
// use: gen is the use count it had.
func (c *Call) reset(donec chan struct{}, gen uint64) {
	*c = Call{}
	c.Donec = donec
	c.gen.Store(gen + 1)
	c.Ctx.C = c
}

// Settle records the outcome if nobody has yet, and wakes the waiter. It
// returns false when the call was settled already. e is the worker
// running the settling turn, or nil. Any goroutine.
func (c *Call) Settle(e *activation.Exec, resp proto.Message, err error) bool {
	if !c.state.CompareAndSwap(pending, settled) {
		return false
	}
	c.Resp, c.Err = resp, err
	switch {
	case c.Waiter == OutsideWaiter:
		c.Donec <- struct{}{}
	case c.Waiter == turnWaiter && e != nil:
		e.Signal(&c.ev)
	case c.Waiter == turnWaiter:
		c.ev.Signal()
	case c.Waiter == RemoteWaiter:
		// The other silo's reply is the waiter's read: sent, the waiter's
		// ownership ends. The settler still holds its own.
		c.s.Cl.Reply(c)
		c.Release()
	case c.Waiter == ClientWaiter:
		c.s.Gw.Reply(c)
		c.Release()
	}
	if err != nil && c.OneWay {
		c.oneWayFailed(err)
	}
	return true
}

// oneWayFailed counts a one-way request that failed or was refused: its
// sender was told it was sent, so the count and a log are all that tell
// of it. It is not logged when it was logged where it failed (quiet),
// when its sender cancelled it, or when it was a call to a client's
// observer, which fails whenever a client leaves. At most one is logged a
// limitLogInterval, counting those held back.
func (c *Call) oneWayFailed(err error) {
	s := c.s
	// Counted after the log: whoever sees the count sees the log.
	defer s.OneWayFailures.Add(1)
	if c.quiet || c.Cancel != nil && c.Cancel.Err() != nil || c.Method != nil && c.Method.Observe != nil {
		return
	}
	held, ok := s.oneWayLog.allow(s.CallNow())
	if !ok {
		return
	}
	method := ""
	if c.Method != nil {
		method = c.Method.Name
	}
	s.Log.Warn("a one-way request failed; its sender was not told",
		zap.Stringer("grain", c.ID), zap.String("method", method), zap.Stringer("code", status.Code(err)), zap.Error(err),
		zap.Uint64("unlogged_since_last", held), zap.Duration("log_interval", limitLogInterval))
}

// settled reports whether the caller has its outcome already.
func (c *Call) isSettled() bool { return c.state.Load() != pending }

// armTimeout links the call into the timeout wheel, which settles it
// with DeadlineExceeded once it is due. The caller must disarmTimeout
// before it releases the call.
func (c *Call) armTimeout() { c.s.wheel.add(c) }

// disarmTimeout unlinks the call from the wheel if it is still there.
func (c *Call) disarmTimeout() { c.s.wheel.remove(c) }

// awaitOutside waits for the outcome on a goroutine that is not a turn.
// The call's own context ending cancels the call. The awaiting context
// ending does too when it is the call's (a synchronous call: cancelOnCtx);
// for an Await of a future it only ends the wait (ok false), leaving the
// call for a later Await.
func (c *Call) awaitOutside(ctx context.Context, cancelOnCtx bool) (resp proto.Message, err error, ok bool) {
	var callDone <-chan struct{}
	if c.Cancel != nil {
		callDone = c.Cancel.Done()
	}
	waitDone := ctx.Done()
	if waitDone == nil && callDone == nil {
		<-c.Donec // only the reply or the timeout can end the wait
		return c.Resp, c.Err, true
	}
	select {
	case <-c.Donec:
	case <-callDone:
		c.giveUp(c.Cancel)
	case <-waitDone:
		if !cancelOnCtx {
			return nil, nil, false
		}
		c.giveUp(ctx)
	}
	return c.Resp, c.Err, true
}

// giveUp settles the call with ctx's error, or, if another party settled
// it at the same moment, takes that outcome. Either way the settler sent
// the wake-up token, which must be taken: the channel is reused with the
// record.
func (c *Call) giveUp(ctx context.Context) {
	c.Settle(nil, nil, contextError(ctx))
	<-c.Donec
}

// awaitInTurn waits for the outcome inside turn e without holding its
// processor or the group token: interleaving happens here.
func (c *Call) awaitInTurn(e *activation.Exec) (proto.Message, error) {
	if c.Cancel != nil {
		// If stop finds the callback started, wait for it to finish:
		// the caller releases c right after this returns.
		fired := make(chan struct{})
		stop := context.AfterFunc(c.Cancel, func() {
			defer close(fired)
			c.Settle(nil, nil, contextError(c.Cancel))
		})
		defer func() {
			if !stop() {
				<-fired
			}
		}()
	}
	e.Wait(&c.ev)
	return c.Resp, c.Err
}

// expired reports whether the call should be dropped instead of run: its
// caller has its outcome already (the timeout timer settles a two-way
// call at its deadline, so no clock read is needed), or, for a one-way
// call or one from another silo or a client, which have no timer here,
// its deadline passed.
func (c *Call) expired() bool {
	return c.isSettled() || (c.OneWay || c.Waiter == RemoteWaiter || c.Waiter == ClientWaiter) && c.s.CallNow() >= c.Due
}

// MaxCallTimeout is the longest a call may be given: longer timeouts,
// which would overflow the silo's clock arithmetic, are cut to it.
const MaxCallTimeout = 100 * 365 * 24 * time.Hour

// CallTimeout is the time a call is given: d, at most MaxCallTimeout, or
// the silo's ResponseTimeout when d is not positive.
func (s *Runtime) CallTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return s.Cfg.ResponseTimeout
	}
	return min(d, MaxCallTimeout)
}

// Deadline is the call's deadline as a time.
func (c *Call) Deadline() time.Time {
	if !c.exact.IsZero() {
		return c.exact
	}
	return c.s.Epoch.Add(c.Due)
}

func DeadlineError(c *Call) error {
	return status.Errorf(codes.DeadlineExceeded, "granary: call %s to %s timed out", c.Method.Name, c.ID)
}

func contextError(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return status.Error(codes.DeadlineExceeded, "granary: caller's deadline passed")
	}
	return status.Error(codes.Canceled, "granary: caller canceled the call")
}

// errorFromPanic is what a caller gets when the grain panicked.
func errorFromPanic(c *Call, pe *activation.PanicError) error {
	return status.Errorf(codes.Internal, "granary: %s.%s panicked: %v", c.ID, c.Method.Name, pe.Value)
}
