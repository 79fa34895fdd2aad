package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/jonboulle/clockwork"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

var _ grain.Caller = (*Client)(nil)

// Invoke calls method m of grain id with req through a gateway and waits
// for the reply. It implements grain.Caller. The call's deadline is the
// earliest of ctx's, the call options' timeout, the method's timeout
// option and the client's call timeout; the grain's context carries it.
// When ctx ends first, Invoke returns its error at once and the grain's
// context is cancelled. The outgoing filters (WithOutgoingFilters) run
// around the call, and Invoke awaits the Pending they return.
func (c *Client) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	if len(c.o.outgoing) > 0 {
		return c.filtered(ctx, id, m, req, opts).Await(ctx)
	}
	p, err := c.start(ctx, id, m, req, opts, false)
	if p == nil {
		return nil, err
	}
	var timeout <-chan time.Time
	if p.needsTimer {
		// The waiting goroutine keeps the deadline itself, on a pooled
		// timer: no timer and callback made per call.
		t := c.timers.Get().(clockwork.Timer)
		t.Reset(c.o.clock.Until(p.deadline))
		defer func() {
			t.Stop()
			c.timers.Put(t)
		}()
		timeout = t.Chan()
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cancelled(ctx)
		<-p.done // whoever settled it has set the outcome by then
	case <-timeout:
		p.timedOut()
		<-p.done
	}
	return p.resp, p.err
}

// InvokeAsync is Invoke without the wait: the reply arrives through the
// Pending. When ctx ends before the reply, the call fails with ctx's
// error and the grain's context is cancelled.
func (c *Client) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	if len(c.o.outgoing) > 0 {
		return c.filtered(ctx, id, m, req, opts)
	}
	return c.startAsync(ctx, id, m, req, opts)
}

// startAsync sends a call whose context and deadline settle it even if
// nobody awaits it.
func (c *Client) startAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts []grain.CallOption) grain.Pending {
	p, err := c.start(ctx, id, m, req, opts, true)
	if p == nil {
		return grain.Failed(err)
	}
	return p
}

// pcall is a call in flight.
type pcall struct {
	c   *Client
	id  grain.ID
	m   *grain.MethodDesc
	env *granaryv1.Envelope // kept to send again to another gateway
	// deadline is when the call fails with DeadlineExceeded.
	deadline time.Time
	// tried lists the gateways the call was offered to, the last first
	// sent to; lastErr is why the last one did not take it. Written by
	// send, which runs again only after the previous offer failed.
	tried   []*gatewayRef
	lastErr error
	// refused is the refusal of the latest gateway whose own silo shed
	// the call, which never ran there; once set, the call is offered to
	// gateways not marked down or overloaded only, and fails with it when
	// none is left. Written by onReply before it calls send.
	refused error
	// sent says where the call went last, for its cancellation: an
	// offer that failed at once may be followed by the next one before
	// the first Call returns, so each records its attempt number. An
	// offer's request can reach the gateway, and its grain start, before
	// send records it; cancelWanted, set by cancelled under sentMu, has
	// send cancel that offer itself, so exactly one of them sends the
	// CANCEL for the latest offer, whichever comes second.
	sentMu       sync.Mutex
	sent         sentTo
	cancelWanted bool

	settled atomic.Bool
	done    chan struct{} // closed once resp and err are set
	resp    proto.Message
	err     error

	// needsTimer: the call's deadline is earlier than its context's, so
	// something must fail it then: an asynchronous call's timer, or the
	// goroutine a synchronous call waits on.
	needsTimer bool
	// The deadline timer and the watch on the call's context, stopped
	// by whoever settles the call. Either may fire before start has
	// recorded both: stopMu orders them.
	stopMu  sync.Mutex
	timer   clockwork.Timer
	stopCtx func() bool
}

// offerHook, set by tests only, runs after an offer's request has gone to
// the transport and before send records the offer.
var offerHook func(attempt int)

// cancelHook, set by tests only, runs once cancelled has read where the
// call went.
var cancelHook func()

// sentTo is one offer of a call to a gateway.
type sentTo struct {
	attempt int
	g       *gatewayRef
	id      uint64
}

// start sends a call. It returns nil and the outcome for a one-way call,
// or a call that failed before it was sent. watch: the call's context
// ending, or its deadline, settles the call even if nobody awaits it (an
// asynchronous call); otherwise the caller waits for both.
func (c *Client) start(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts []grain.CallOption, watch bool) (*pcall, error) {
	if err := checkCall(id, m); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, contextError(ctx)
	}
	o := grainrt.ResolveCallOptions(m.Timeout, m.OneWay, opts)
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = c.o.callTimeout
	}
	deadline := c.o.clock.Now().Add(timeout)
	ctxDeadline, hasCtxDeadline := ctx.Deadline()
	if hasCtxDeadline && ctxDeadline.Before(deadline) {
		deadline = ctxDeadline
	}
	if o.OneWay {
		return nil, c.startOneWay(ctx, id, m, req, deadline)
	}
	payload, err := proto.MarshalOptions{}.Marshal(req)
	if err != nil {
		return nil, encodingError(id, m, err)
	}
	env := new(granaryv1.Envelope)
	fillRequest(ctx, env, id, m, payload)
	env.Cancellable = ctx.Done() != nil
	p := &pcall{c: c, id: id, m: m, env: env, deadline: deadline, done: make(chan struct{})}
	p.needsTimer = !hasCtxDeadline || deadline.Before(ctxDeadline)
	p.stopMu.Lock()
	if p.needsTimer && watch {
		p.timer = c.o.clock.AfterFunc(c.o.clock.Until(deadline), p.timedOut)
	}
	if watch && ctx.Done() != nil {
		p.stopCtx = context.AfterFunc(ctx, func() { p.cancelled(ctx) })
	}
	p.stopMu.Unlock()
	p.send()
	return p, nil
}

// fillRequest makes env the request envelope of a call of m to id
// carrying payload and ctx's call headers.
func fillRequest(ctx context.Context, env *granaryv1.Envelope, id grain.ID, m *grain.MethodDesc, payload []byte) {
	env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST
	env.GrainType, env.GrainKey = id.Type, id.Key
	env.Method, env.MethodIndex = m.Name, uint32(m.Index)
	env.Payload = payload
	env.Observer = m.Observe != nil
	if h := ctx.Value(grainrt.HeaderKey()); h != nil {
		kv := grainrt.AppendHeaders(nil, h)
		env.Headers = make([]*granaryv1.Header, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			env.Headers = append(env.Headers, &granaryv1.Header{Key: kv[i], Value: kv[i+1]})
		}
	}
}

// encodingError is the error of a request that does not encode.
func encodingError(id grain.ID, m *grain.MethodDesc, err error) error {
	return status.Errorf(codes.InvalidArgument, "granary: encoding the request to %s.%s: %v", id, m.Name, err)
}

// A one-way call's envelope and encoded request are needed only until
// the transport has encoded the envelope, before Send returns, so they
// are pooled rather than made for every call.
type oneWay struct {
	env     granaryv1.Envelope
	payload []byte
}

var oneWayPool = sync.Pool{New: func() any { return new(oneWay) }}

// startOneWay sends a one-way call.
func (c *Client) startOneWay(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, deadline time.Time) error {
	w := oneWayPool.Get().(*oneWay)
	defer func() {
		proto.Reset(&w.env)
		if cap(w.payload) <= 64<<10 {
			w.payload = w.payload[:0]
			oneWayPool.Put(w)
		}
	}()
	payload, err := proto.MarshalOptions{}.MarshalAppend(w.payload[:0], req)
	w.payload = payload
	if err != nil {
		return encodingError(id, m, err)
	}
	fillRequest(ctx, &w.env, id, m, payload)
	w.env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY
	return c.sendOneWay(id, &w.env, deadline)
}

// sendOneWay sends a one-way call to a gateway that takes it.
func (c *Client) sendOneWay(id grain.ID, env *granaryv1.Envelope, deadline time.Time) error {
	var tried []*gatewayRef
	var last error
	for {
		g := c.pick(id, tried)
		if g == nil {
			return noGateway(id, env, last)
		}
		if err := c.sheddingEverywhere(g, tried, id, env.Method); err != nil {
			return err
		}
		tried = append(tried, g)
		env.TimeoutNanos = int64(c.o.clock.Until(deadline))
		if env.TimeoutNanos <= 0 {
			return status.Errorf(codes.DeadlineExceeded, "granary: call %s to %s timed out", env.Method, id)
		}
		err := c.tport.Send(g.silo, env, deadline)
		if err == nil {
			return nil
		}
		if !transport.NotSent(err) {
			return err
		}
		c.notTaken(g, err)
		last = err
	}
}

// notTaken handles a gateway that did not take a call: one going away
// leaves the list, one that failed is avoided for a while.
func (c *Client) notTaken(g *gatewayRef, err error) {
	if transport.Leaving(err) {
		c.departing(g)
		return
	}
	c.markDown(g)
}

func noGateway(id grain.ID, env *granaryv1.Envelope, last error) error {
	if last == nil {
		return status.Errorf(codes.Unavailable, "granary: no live gateway to send %s.%s to", id, env.Method)
	}
	return status.Errorf(codes.Unavailable, "granary: no gateway could take the call %s.%s; the last said: %s", id, env.Method, status.Convert(last).Message())
}

// send offers the call to the next gateway. The transport's answer, or
// its refusal, comes to onReply.
func (p *pcall) send() {
	c := p.c
	var g *gatewayRef
	if p.refused == nil {
		g = c.pick(p.id, p.tried)
	} else {
		g = c.pickUnmarked(p.id, p.tried)
	}
	if g == nil {
		if p.refused != nil {
			p.settle(nil, p.refused) // every gateway left is shedding, or down
			return
		}
		c.askRefresh()
		p.settle(nil, noGateway(p.id, p.env, p.lastErr))
		return
	}
	if p.settled.Load() {
		return // cancelled or timed out while another gateway was sought
	}
	if p.refused == nil {
		// pick falls back to a gateway that asked to be left alone only
		// when every one left did: the call is refused here, unsent.
		if err := c.sheddingEverywhere(g, p.tried, p.id, p.m.Name); err != nil {
			p.settle(nil, err)
			return
		}
	}
	p.tried = append(p.tried, g)
	attempt := len(p.tried)
	left := c.o.clock.Until(p.deadline)
	if left <= 0 {
		p.settle(nil, status.Errorf(codes.DeadlineExceeded, "granary: call %s to %s timed out", p.m.Name, p.id))
		return
	}
	p.env.TimeoutNanos = int64(left)
	id := c.tport.Call(g.silo, p.env, p.deadline, p.onReply)
	if offerHook != nil {
		offerHook(attempt)
	}
	// A reply that came first settled the call, so a cancellation no
	// longer needs the number; a later offer's record wins.
	p.sentMu.Lock()
	latest := attempt > p.sent.attempt
	if latest {
		p.sent = sentTo{attempt, g, id}
	}
	cancel := latest && p.cancelWanted && id != 0
	p.sentMu.Unlock()
	if cancel {
		p.sendCancel(g, id)
	}
}

// onReply takes the transport's outcome of an offer to a gateway.
func (p *pcall) onReply(resp *granaryv1.Envelope, err error) {
	if err != nil {
		if transport.NotSent(err) && !p.settled.Load() {
			// The gateway never got the call: another may take it.
			p.c.notTaken(p.tried[len(p.tried)-1], err)
			p.lastErr = err
			p.send()
			return
		}
		p.settle(nil, err)
		return
	}
	if err := transport.StatusOf(resp); err != nil {
		if resp.NotRun && codes.Code(resp.Code) == codes.ResourceExhausted && p.shedByGateway(err) {
			return
		}
		p.settle(nil, err)
		return
	}
	out := p.m.NewResponse()
	if err := proto.Unmarshal(resp.Payload, out); err != nil {
		p.settle(nil, status.Errorf(codes.Internal, "granary: the reply of %s.%s does not decode: %v", p.id, p.m.Name, err))
		return
	}
	p.settle(out, nil)
}

// shedByGateway takes err, a refusal of the latest offer that the
// gateway marked not run (Envelope.not_run, which only the gateway's own
// refusal sets: an error a grain returns may carry any details, and a
// call that ran must never be sent again). When the gateway's own silo
// refused the call because it sheds load, the gateway is marked
// overloaded and the call offered to another; it reports whether it did
// so. The offer runs on a goroutine of its own: this one reads the
// refusing gateway's stream, whose other replies must not wait behind a
// send to another gateway.
func (p *pcall) shedByGateway(err error) bool {
	silo, retry, ok := overloadRefusal(err)
	g := p.tried[len(p.tried)-1]
	if !ok || silo != g.silo || p.settled.Load() {
		return false
	}
	p.c.markOverloaded(g, retry)
	p.refused = err
	go p.send()
	return true
}

// settle records the outcome, unless there is one already, and stops the
// timer and the context watch.
func (p *pcall) settle(resp proto.Message, err error) bool {
	if !p.settled.CompareAndSwap(false, true) {
		return false
	}
	p.resp, p.err = resp, err
	p.stopMu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.stopCtx != nil {
		p.stopCtx()
	}
	p.stopMu.Unlock()
	close(p.done)
	return true
}

// timedOut fails the call at its deadline. The gateway ends it there too.
func (p *pcall) timedOut() {
	p.settle(nil, status.Errorf(codes.DeadlineExceeded, "granary: call %s to %s timed out", p.m.Name, p.id))
}

// cancelled fails the call with the error of ctx, the call's, which
// ended, and tells the gateway, which cancels the grain's context.
func (p *pcall) cancelled(ctx context.Context) {
	if !p.settle(nil, contextError(ctx)) {
		return
	}
	p.sentMu.Lock()
	p.cancelWanted = true
	g, id := p.sent.g, p.sent.id
	p.sentMu.Unlock()
	if cancelHook != nil {
		cancelHook()
	}
	if g == nil || id == 0 {
		return // send, still recording its offer, cancels it
	}
	p.sendCancel(g, id)
}

// sendCancel tells gateway g to cancel request id.
func (p *pcall) sendCancel(g *gatewayRef, id uint64) {
	cancel := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_CANCEL, CallId: id}
	if err := p.c.tport.Send(g.silo, cancel, time.Time{}); err != nil {
		p.c.log.Debug("the cancellation of a call was not sent") // the gateway's deadline ends the call anyway
	}
}

// Await waits for the reply. An Await whose ctx ends returns ctx's
// error and leaves the call running; only the context the call was made
// with cancels it.
func (p *pcall) Await(ctx context.Context) (proto.Message, error) {
	select {
	case <-p.done:
		return p.resp, p.err
	case <-ctx.Done():
		return nil, contextError(ctx)
	}
}

func contextError(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return status.Error(codes.DeadlineExceeded, "granary: caller's deadline passed")
	}
	return status.Error(codes.Canceled, "granary: caller canceled the call")
}
