package local

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/activation/admission"
	"github.com/granaryio/granary/activation/lifecycle"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"google.golang.org/protobuf/proto"
)

// The inbox: one-way requests without the activation's lock.
//
// A plain one-way request from outside any grain (postOneWay says which)
// to an activation in the catalog does not take the activation's lock
// when a request of it is running. Its sender pushes a post, a few words
// in one allocation class, onto the activation's inbox, a lock-free stack,
// and returns; the record of its call is made later, by the worker, from
// the worker's own pool, so that the 500-byte record never crosses
// between cores. The end of the running request's turn, which holds mu
// anyway, takes the inbox into posted (oldest first), and offers posted
// requests one at a time whenever no request holds the gate, so a flood
// of them never grows the activation's queue.
//
// Who takes the inbox is said by its bottom. busyInbox: a request holds
// the gate, and the end of its turn takes it (unlockTurnDone). nil: the
// sender that pushes onto nil takes it, under mu, at once. settleInboxLocked
// sets the bottom at the end of every critical section that takes the
// inbox, checking for a push that came meanwhile; a sender pushes, then
// looks at what it pushed onto. Both are sequentially consistent atomics,
// so one of the two always sees the other: a post is never left behind.
//
// Order. A sender's posts are pushed in the order sent and taken in that
// order. A call that submits, one-way or not, first offers everything
// posted, so a sender's call runs after its one-way requests. Posted
// requests were all posted after every request in the queue, so they are
// offered only when the queue is empty of what could start before them.

// A post is a one-way request waiting in an inbox: what its call record
// needs from the sender. 128 bytes, two cache lines.
type post struct {
	next    *post
	method  *grain.MethodDesc
	req     proto.Message
	due     time.Duration
	exact   time.Time
	cancel  context.Context
	headers any
	// raw is the encoded request of a one-way call from another silo
	// (PostIncoming), req's stand-in until its turn decodes it; hops is
	// the record's Hops.
	raw []byte
	// n is its ordinal among the activation's posted, for postedLenLocked.
	n    uint32
	hops uint32
}

// postPool holds free posts, and chains of them linked by next: a sender
// takes a post from the pool of its processor, and the worker that made
// their call records returns the posts of its burst as one chain
// (runPosted). Senders and workers mostly run on different processors,
// so returned one by one, nearly every post a sender takes would be
// stolen from another processor's pool; a chain costs one steal, and the
// sender keeps the rest in its own pool's private slot.
var postPool = sync.Pool{New: func() any { return new(post) }}

// getPost takes a free post, putting back the rest of its chain.
func getPost() *post {
	p := postPool.Get().(*post)
	if rest := p.next; rest != nil {
		p.next = nil
		postPool.Put(rest)
	}
	return p
}

// freePost returns p to the pool.
func freePost(p *post) { postPool.Put(clearPost(p, nil)) }

// clearPost clears p, which links to next, for reuse, and returns it.
func clearPost(p, next *post) *post {
	*p = post{next: next}
	return p
}

// busyInbox is the bottom of an activation's inbox while a request holds
// its gate.
var busyInbox = &post{}

// Flow control for senders outside the pool, which would otherwise outrun
// the workers that run what they send: past yieldBacklog requests queued
// and posted, a sender yields its processor after posting; past
// postBacklog it takes the ordinary path.
const (
	yieldBacklog = 64
	postBacklog  = 4096
)

// postOneWay sends a one-way call from outside any grain through the
// inbox, if it may (see inboxOf). It reports false when the call must
// take the ordinary path, which also gives every error.
func (s *Runtime) postOneWay(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, o grainrt.CallOptions) bool {
	if o.Outside {
		return false
	}
	a := s.inboxOf(id, m)
	if a == nil {
		return false
	}
	p := getPost()
	p.method, p.req = m, req
	p.due = s.CallNow() + s.CallTimeout(o.Timeout)
	if d, ok := ctx.Deadline(); ok {
		if due := d.Sub(s.Epoch); due < p.due {
			p.due, p.exact = due, d
		}
	}
	if ctx.Done() != nil {
		p.cancel = ctx
	}
	p.headers = ctx.Value(headerCtxKey)
	a.post(p)
	return true
}

// inboxOf returns the activation whose inbox a one-way call of m to id
// may be posted to, or nil when the call must take the ordinary path: m
// must be a method of a type this silo hosts without a stateless worker
// set or an interleaving predicate, and id's activation must be in the
// catalog with room in its queue.
func (s *Runtime) inboxOf(id grain.ID, m *grain.MethodDesc) *Activation {
	if m == nil || !s.ready.Load() || s.Stopping.Load() {
		return nil
	}
	t := s.ByMethod[m]
	if t == nil || t.Desc.Type != id.Type || t.Opts.StatelessWorker || t.Opts.MayInterleave != nil {
		return nil
	}
	a, ok := t.Acts.Load(id.Key)
	if !ok {
		return nil
	}
	// A sender that outruns the activation, or nears its queue's hard
	// limit, takes the ordinary path, which decides under mu: its call is
	// refused (and counted) at the limit now, not when a long turn ends,
	// and the lock it shares with the worker slows it to the worker's
	// pace.
	backlog := int(a.backlog.Load() + a.inboxN.Load())
	if backlog >= postBacklog || t.Limits.Hard > 0 && backlog >= t.Limits.Hard-1 {
		return nil
	}
	return a
}

// post pushes p onto the inbox, and takes the inbox if it pushed onto
// nil. The caller must not touch p afterwards. Any goroutine outside the
// pool.
func (a *Activation) post(p *post) {
	for {
		bottom := a.inbox.Load()
		p.next = bottom
		if !a.inbox.CompareAndSwap(bottom, p) {
			continue
		}
		n := a.inboxN.Add(1)
		if bottom != nil {
			if n+a.backlog.Load() >= yieldBacklog {
				runtime.Gosched()
			}
			return
		}
		break
	}
	var d offered
	a.Mu.Lock()
	a.takeInboxLocked(&d)
	a.settleInboxLocked(&d)
	a.Mu.Unlock()
	d.do(nil, a)
}

// takeInboxLocked moves the inbox's posts to posted, oldest first,
// refusing those past the queue's hard limit, and leaves busyInbox at
// the inbox's bottom for settleInboxLocked to end. mu held.
func (a *Activation) takeInboxLocked(d *offered) {
	list := a.inbox.Swap(busyInbox)
	var oldest *post
	var k int32
	for list != nil && list != busyInbox {
		next := list.next
		list.next = oldest
		oldest, list = list, next
		k++
	}
	a.inboxN.Add(-k)
	lim := a.typ.Limits
	for p := oldest; p != nil; {
		next := p.next
		depth := a.QueuedLocked() + a.postedLenLocked()
		switch {
		case lim.Hard > 0 && depth >= lim.Hard:
			a.Calls++
			d.add(a.callOf(p), offerOutcome{do: offerOverLimit, v: queueFull, depth: depth})
		case lim.Soft > 0 && depth >= lim.Soft:
			a.pushPostedLocked(p)
			d.pastSoft++
			d.softDepth = depth + 1
		default:
			a.pushPostedLocked(p)
		}
		p = next
	}
}

// settleInboxLocked offers posted requests while no request holds the
// gate, until one does or none is left, and ends the inbox's bottom:
// busyInbox while a request holds the gate, so that senders leave their
// posts to that request's end; nil otherwise, so that the next sender
// takes them. A post pushed meanwhile is taken first. mu held.
func (a *Activation) settleInboxLocked(d *offered) {
	defer func() {
		if b := int32(a.QueuedLocked() + a.postedLenLocked()); a.backlog.Load() != b {
			a.backlog.Store(b)
		}
	}()
	for {
		for a.posted != nil && a.gate.Running() == 0 {
			a.offerPostedLocked(d)
		}
		switch bottom := a.inbox.Load(); {
		case a.gate.Running() > 0:
			if bottom == nil {
				// A sender that pushes onto nil first takes mu itself.
				a.inbox.CompareAndSwap(nil, busyInbox)
			}
			return
		case bottom == nil:
			return
		case bottom == busyInbox:
			if a.inbox.CompareAndSwap(busyInbox, nil) {
				return
			}
		}
		a.takeInboxLocked(d)
	}
}

// offerPostedLocked offers the oldest posted request. mu held.
func (a *Activation) offerPostedLocked(d *offered) {
	c := a.callOf(a.popPostedLocked())
	d.add(c, a.offerLocked(c))
}

// callOf makes the call record of a post, from the caller's pool, and
// frees the post.
func (a *Activation) callOf(p *post) *Call {
	c := a.s.NewCall(1)
	c.act = a
	c.fill(p)
	freePost(p)
	return c
}

// fill makes c, a record with its activation set, the record of posted
// request p; the caller frees p.
func (c *Call) fill(p *post) {
	c.ID, c.Method, c.Req, c.Raw, c.OneWay = c.act.ID, p.method, p.req, p.raw, true
	c.Hops = p.hops
	c.Due, c.exact, c.Cancel, c.Headers = p.due, p.exact, p.cancel, p.headers
	c.kind = kindOf(p.method)
	c.posted = true
}

// postedRun bounds the posted requests one turn runs, so that a flood to
// one grain does not keep others from its processor: a quantum's worth.
const postedRun = 64

// runPosted runs, in the turn of c, a posted one-way request whose handler
// returned, the posted requests after it while nothing else could start
// before them: the activation is active with no deactivation asked for, c
// alone holds the gate, nothing waits in the queue, and no context was
// derived from c's (which would keep its record from reuse). Each ends in
// the gate and the lifecycle, as its turn's end would, and the next is
// admitted and run in the same record; the last is left to Done. A burst
// of one-way requests to one grain thus costs one turn, not one each. A
// handler that panics leaves its request to the turn's panic handling.
func (c *Call) runPosted(e *activation.Exec) {
	a := c.act
	var freed *post // the posts run, returned as one chain
	defer func() {
		if freed != nil {
			postPool.Put(freed)
		}
	}()
	for range postedRun {
		a.Mu.Lock()
		if p := a.inbox.Load(); p != nil && p != busyInbox {
			var d offered
			a.takeInboxLocked(&d)
			if d.refused() {
				// A refusal has work to do outside the lock: leave it all
				// to the turn's end.
				a.Mu.Unlock()
				d.do(e, a)
				return
			}
		}
		if a.posted == nil || a.life.State() != lifecycle.Active || a.DeactivationPending() ||
			a.gate.Running() != 1 || a.QueuedLocked() != 0 || c.Ctx.derived != nil || c.s.aborted.Load() {
			a.Mu.Unlock()
			return
		}
		a.gate.Finish(c.seq)
		a.life.TurnDone(a.quietLocked(), true, false, a.s.IdleNow()) // StartQueued, with nothing queued
		// The next is offered as any request: an active activation with
		// no deactivation asked for admits it, and an idle gate with
		// nothing queued starts it.
		if c.resErr != nil {
			c.oneWayFailed(c.resErr) // its record is about to be reused
		}
		p := a.popPostedLocked()
		c.reload(p)
		freed = clearPost(p, freed)
		a.Calls++
		a.seq++
		c.seq = a.seq
		a.gate.AdmitChain(c.seq, c.kind, admission.NotInChain)
		a.Mu.Unlock()
		if c.expired() {
			c.resErr = DeadlineError(c)
			continue
		}
		if c.Req == nil && !c.decode() {
			continue
		}
		c.result, c.resErr = c.s.dispatch(&c.Ctx, c)
	}
}

// reload makes c, the record of a posted request whose turn ended, the
// record of posted request p, as Release and callOf would, but for
// freeing p. c keeps its activation and its turn's worker. mu held.
func (c *Call) reload(p *post) {
	s, a, e := c.s, c.act, c.exec
	c.Ctx.stopDerived()
	c.reset(c.Donec, c.gen.Load())
	c.s, c.act, c.exec = s, a, e
	c.refs.Store(1)
	c.fill(p)
}

// pushPostedLocked appends p to posted: a ring linked by next, posted
// its newest. mu held.
func (a *Activation) pushPostedLocked(p *post) {
	if a.posted == nil {
		p.next, p.n = p, 0
	} else {
		p.next, p.n = a.posted.next, a.posted.n+1
		a.posted.next = p
	}
	a.posted = p
}

// popPostedLocked removes posted's oldest. mu held.
func (a *Activation) popPostedLocked() *post {
	p := a.posted.next
	if p == a.posted {
		a.posted = nil
	} else {
		a.posted.next = p.next
	}
	p.next = nil
	return p
}

// postedLenLocked is how many requests posted holds. mu held.
func (a *Activation) postedLenLocked() int {
	if a.posted == nil {
		return 0
	}
	return int(a.posted.n-a.posted.next.n) + 1
}
