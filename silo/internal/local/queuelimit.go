package local

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/refusal"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Queue limits: Orleans' soft and hard limits on the requests enqueued at
// an activation.
//
// An activation's depth is the length of its queue: the requests the
// lifecycle holds (before activation, while a deactivation is pending)
// and those the gate queued, from when they reach the activation until
// their turn starts. The queue itself is the count, so it cannot drift: a
// request leaves the count when it leaves the queue, whether it starts,
// is routed again, forwarded or failed, and a request routed again is
// counted afresh only where it lands. A stateless worker ID's depth is
// its set's, WorkerSet.queued, which every push onto a member's queue and
// every removal from it moves, under that member's lock.
//
// The limits are checked where a request is offered (submit), and only on
// the path where it waits: a request that starts at once (reentrant,
// interleaving, an idle activation) is never counted, and the check costs
// nothing on that path. They are not checked where a request already
// accepted is queued again (held requests admitted once the activation is
// up), for timer ticks, which are the grain's own and at most one per
// timer, nor for the request that makes an activation, which finds it
// empty; these are counted all the same.

// queueVerdict is what the limits say of a request offered to an
// activation that would queue it.
type queueVerdict uint8

const (
	queueOK       queueVerdict = iota
	queuePastSoft              // queued, past the soft limit
	queueFull                  // refused: the hard limit is reached
)

// queueOfferedLocked queues c, a request offered to the activation, unless
// that would queue it past the type's hard limit. It returns the verdict
// and the depth: with c when queued, the depth that refused it otherwise.
// mu held.
func (a *Activation) queueOfferedLocked(c *Call) (queueVerdict, int) {
	lim := a.typ.Limits
	depth := a.QueuedLocked()
	ws := a.set
	if ws != nil {
		// c's place in its set's count is taken before the check: the
		// members queue under locks of their own, so a load then an add
		// could let two requests through to one last place.
		depth = int(ws.queued.Add(1)) - 1
	}
	if lim.Hard > 0 && depth >= lim.Hard {
		if ws != nil {
			ws.queued.Add(-1)
		}
		return queueFull, depth
	}
	a.appendLocked(c)
	if lim.Soft > 0 && depth >= lim.Soft {
		return queuePastSoft, depth + 1
	}
	return queueOK, depth + 1
}

// overLimit does what a verdict other than queueOK asks, with mu
// released: it counts a request queued past the soft limit and warns, at
// most once per interval per type; it counts a refused request and fails
// it, logging a refused one-way request, whose sender gets no error, at
// most once per interval per type.
func (a *Activation) overLimit(c *Call, v queueVerdict, depth int) {
	s, t := a.s, a.typ
	switch v {
	case queuePastSoft:
		a.warnPastSoft(depth, 1)
	case queueFull:
		s.Overload.QueueRefusals.Add(1)
		err := queueFullError(a, depth)
		if c.OneWay {
			c.quiet = true
			if held, ok := t.overLimit.oneWay.allow(s.CallNow()); ok {
				s.Log.Warn("a one-way request was refused and dropped: its activation's request queue is at its hard limit",
					zap.Stringer("grain", a.ID), zap.Uint64("activation", a.ActID), zap.String("type", t.Desc.Type),
					zap.String("method", c.Method.Name), zap.Int("queued", depth), zap.Int("hard_limit", t.Limits.Hard),
					zap.Uint64("unlogged_since_last", held), zap.Duration("log_interval", limitLogInterval))
			}
		}
		s.Fail(nil, c, err)
	}
}

// warnPastSoft counts n requests queued past the soft limit, the last at
// depth, and warns, at most once per interval per type. mu released.
func (a *Activation) warnPastSoft(depth, n int) {
	s, t := a.s, a.typ
	s.Overload.QueueWarnings.Add(uint64(n))
	if held, ok := t.overLimit.soft.allow(s.CallNow()); ok {
		s.Log.Warn("an activation's request queue is past its soft limit",
			zap.Stringer("grain", a.ID), zap.Uint64("activation", a.ActID), zap.String("type", t.Desc.Type),
			zap.Int("queued", depth), zap.Int("soft_limit", t.Limits.Soft), zap.Bool("worker_set", a.set != nil),
			zap.Uint64("unlogged_since_last", held), zap.Duration("log_interval", limitLogInterval))
	}
}

// queueFullError is what a request refused at the hard limit gets.
func queueFullError(a *Activation, depth int) error {
	where := ""
	if a.set != nil {
		where = " across its stateless workers"
	}
	return status.Errorf(codes.ResourceExhausted, "granary: %s has %d requests queued%s (hard limit %d); retry later",
		a.ID, depth, where, a.typ.Limits.Hard)
}

// limitLogInterval is how often each of a type's queue-limit logs may be
// written.
const limitLogInterval = time.Minute

// limitLogs rate-limit a type's logs of its queue limits.
type limitLogs struct {
	soft   logEvery // requests queued past the soft limit
	oneWay logEvery // one-way requests refused at the hard limit
	wait   logEvery // requests refused past the wait limit
}

// logEvery lets one event a limitLogInterval be logged and counts those
// it holds back. Its clock is the silo's coarse call clock (CallNow), so
// it reads no clock of its own.
type logEvery struct {
	next atomic.Int64  // the silo time from which the next log may go
	held atomic.Uint64 // events not logged since the last log
}

// allow reports whether an event at now, a time since the silo's epoch,
// is logged, and if so how many were held back since the last one. Any
// goroutine.
func (l *logEvery) allow(now time.Duration) (held uint64, ok bool) {
	next := l.next.Load()
	if int64(now) < next || !l.next.CompareAndSwap(next, int64(now+limitLogInterval)) {
		l.held.Add(1)
		return 0, false
	}
	return l.held.Swap(0), true
}

// ResolveQueueLimits is a type's queue limits: each field from the
// silo's per-type configuration when set there, else from the type's
// option when set, else the silo-wide one.
func ResolveQueueLimits(silo, option, typeConfig QueueLimits) QueueLimits {
	return QueueLimits{
		Soft: pickLimit(silo.Soft, option.Soft, typeConfig.Soft),
		Hard: pickLimit(silo.Hard, option.Hard, typeConfig.Hard),
		Wait: pickLimit(silo.Wait, option.Wait, typeConfig.Wait),
	}
}

// pickLimit is the type's configuration t when set, else its option o
// when set, else the silo's s.
func pickLimit[T int | time.Duration](s, o, t T) T {
	switch {
	case t != 0:
		return t
	case o != 0:
		return o
	}
	return s
}

// Queue wait and latency. A request from outside the silo records when it
// arrived (Call.Arrived, from the coarse call clock Incoming reads
// anyway), unless it is work the silo admitted already (see cluster's
// fresh). When its turn comes, Run asks waitRefused, which refuses the
// request past its type's Wait; when the turn ends, Done sums the time
// since its arrival for the latency limit (Latencies) when
// MeasureLatency is set, whether the turn ran, was refused or expired.
// The check is at the turn's start, not on a timer: a request refused
// there has cost a slot in the queue and nothing else, and a timer per
// request would cost every request two clock reads and a heap operation.
// A request stuck behind a turn that never ends is refused when that turn
// ends, or ends at its caller's deadline.

// waitRefused reports whether c, a request from outside the silo whose
// turn starts now, waited past its type's queue wait limit, in which case
// it has set c's error. Run only.
func (c *Call) waitRefused() bool {
	s, t := c.s, c.act.typ
	if t.Limits.Wait == 0 {
		return false
	}
	waited := max(0, s.CallNow()-c.Arrived)
	if waited <= t.Limits.Wait {
		return false
	}
	s.Overload.WaitRefusals.Add(1)
	c.quiet = true // logged below, with two-way refusals
	c.resErr = status.Errorf(codes.ResourceExhausted, "granary: %s.%s waited %v for its turn, past the queue wait limit %v; it did not run: retry later",
		c.ID, c.Method.Name, waited.Round(time.Millisecond), t.Limits.Wait)
	if held, ok := t.overLimit.wait.allow(s.CallNow()); ok {
		s.Log.Warn("requests waited past their type's queue wait limit and were refused",
			zap.Stringer("grain", c.ID), zap.String("type", t.Desc.Type), zap.String("method", c.Method.Name),
			zap.Bool("one_way", c.OneWay), zap.Duration("waited", waited), zap.Duration("wait_limit", t.Limits.Wait),
			zap.Uint64("unlogged_since_last", held), zap.Duration("log_interval", limitLogInterval))
	}
	return true
}

// The limit of new requests in progress. A request from outside the silo
// takes a place in Cfg.Limiter when Route finds that it runs here, before
// any activation is made for it, and holds it until it ends. The end of
// its turn (refused, expired or run) and Fail give the place back before
// the reply, so that a caller that calls again at once finds it free; the
// call record's last Release gives back a place still held, whatever else
// ended the request. One that is sent to another silo (Route's Resolve, a
// lost registration's ForwardQueue) gives its place back first, since its
// latency is that silo's: a client's request, which its gateway's silo
// passes on, takes its place where it runs; one another silo sent here
// and this one passes on again is admitted work there, and holds no
// place anywhere.
// Work the silo admitted already never takes a place, by the rule the
// wait limit follows (Arrived is 0 for it).

// runsHere reports whether Route runs c, a request for t, on this silo
// without asking the directory: a stateless worker, a silo alone, a
// request the directory placed here, or a key active here.
func (s *Runtime) runsHere(t *GrainType, c *Call) bool {
	if t.Opts.StatelessWorker || s.Cl == nil || c.PlacedHere {
		return true
	}
	_, ok := t.Acts.Load(c.ID.Key)
	return ok
}

// limitAdmitted takes a place in the Limiter for c, a request from
// outside the silo that runs here, and reports true; when the limit is
// reached, it refuses c and reports false.
func (s *Runtime) limitAdmitted(e *activation.Exec, c *Call) bool {
	l := s.Cfg.Limiter
	if l.Acquire() {
		c.limited = true
		return true
	}
	s.Overload.LimitRefusals.Add(1)
	c.quiet = true // logged below, with two-way refusals
	limit, _ := l.Limit()
	if held, ok := s.limitLog.allow(s.CallNow()); ok {
		s.Log.Warn("refused new requests: the silo runs as many as keep their latency under its target",
			zap.Stringer("grain", c.ID), zap.String("method", c.Method.Name), zap.Bool("one_way", c.OneWay),
			zap.Int64("limit", limit), zap.Duration("latency_target", l.Target()),
			zap.Uint64("unlogged_since_last", held), zap.Duration("log_interval", limitLogInterval))
	}
	s.Fail(e, c, LimitError(s.Cfg.Name, c.ID, c.Method.Name, limit, l.Target()))
	return false
}

// LimitError is the refusal of a call to method of grain id by silo, at
// its limit of new requests in progress: ResourceExhausted, with a
// RetryInfo of target, the latency the limit keeps, by when a place is
// likely free, and the ErrorInfo refusal.ConcurrencyLimited. That is not
// the gateway's Overloaded: the silo refusing is where the grain runs, so
// another gateway would lead to the same silo.
func LimitError(silo string, id grain.ID, method string, limit int64, target time.Duration) error {
	return refusal.New(fmt.Sprintf("granary: silo %s runs %d new requests at once, as many as keep their latency under %v; %s.%s did not run: retry in %v",
		silo, limit, target, id, method, target), target, refusal.ConcurrencyLimited, silo)
}

// leaveLimit gives back c's place in the Limiter, if it holds one. The
// callee's side only, while it owns c.
func (c *Call) leaveLimit() {
	if c.limited {
		c.limited = false
		c.s.Cfg.Limiter.Release()
	}
}

// noteLatency sums the time since c, a request from outside the silo
// whose turn ends now, arrived. Done only, with MeasureLatency set.
func (c *Call) noteLatency() {
	s := c.s
	s.spent.Add(int64(max(0, s.CallNow()-c.Arrived)))
	s.ended.Add(1)
}

// Latencies returns the summed latency of the requests from outside the
// silo whose turns have ended, from their arrival, and how many they
// are, since the runtime was made; both stay 0 unless MeasureLatency is
// set. Any goroutine.
func (s *Runtime) Latencies() (total time.Duration, ended uint64) {
	return time.Duration(s.spent.Load()), s.ended.Load()
}
