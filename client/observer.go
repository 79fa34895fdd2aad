package client

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

var _ grain.ObserverHost = (*Client)(nil)

// An observer is an object of this client that grains call. Its calls
// run one at a time, in arrival order, on a goroutine that exists while
// it has calls queued.
type observer struct {
	id   grain.ID
	desc *grain.ServiceDesc
	impl any

	mu      sync.Mutex
	queue   []observerCall
	running bool
}

// observerCall is one call to an observer, waiting for its turn.
type observerCall struct {
	m        *grain.MethodDesc
	req      proto.Message
	r        transport.Responder
	deadline time.Time
}

// homeTimeout bounds a gateway's answer to a request to be home.
const homeTimeout = 10 * time.Second

// CreateObserver makes impl, which implements the observer service desc,
// callable by grains, and returns its ID. The first observer makes one
// gateway the client's home, through which grains reach every observer
// of the client; when that gateway goes, the client moves home to
// another. Generated CreateXObserver functions call it.
func (c *Client) CreateObserver(desc *grain.ServiceDesc, impl any) (grain.ID, error) {
	switch {
	case desc == nil || !desc.Observer:
		return grain.ID{}, status.Error(codes.InvalidArgument, "granary: CreateObserver needs the descriptor of an observer service (grain option observer)")
	case impl == nil:
		return grain.ID{}, status.Errorf(codes.InvalidArgument, "granary: CreateObserver %s: nil implementation", desc.Type)
	}
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return grain.ID{}, status.Error(codes.Unavailable, "granary: the client is closed")
	}
	c.nextObserver++
	id := grain.ID{Type: desc.Type, Key: c.id + "/" + strconv.FormatUint(c.nextObserver, 10)}
	o := &observer{id: id, desc: desc, impl: impl}
	c.observers[id.Key] = o
	c.mu.Unlock()
	if err := c.ensureHome(c.ctx); err != nil {
		c.DeleteObserver(id)
		return grain.ID{}, err
	}
	return id, nil
}

// DeleteObserver ends the observer id: calls to it fail with NotFound.
// Calls it is running or has queued still run.
func (c *Client) DeleteObserver(id grain.ID) {
	c.mu.Lock()
	if o := c.observers[id.Key]; o != nil && o.id == id {
		delete(c.observers, id.Key)
	}
	c.mu.Unlock()
}

// HomeGateway returns the member ID of the silo whose gateway is the
// client's home, or "" while it has none (it has no observers yet, or it
// is moving home).
func (c *Client) HomeGateway() string {
	c.homeMu.Lock()
	defer c.homeMu.Unlock()
	if c.home == nil {
		return ""
	}
	return c.home.silo
}

// ensureHome makes a gateway the client's home, unless one is: the
// gateway the client's ID hashes to among those that take it. One at a
// time (homingMu); homeMu is held only briefly, as StreamsEnded, which
// must not block, takes it.
func (c *Client) ensureHome(ctx context.Context) error {
	c.homingMu.Lock()
	defer c.homingMu.Unlock()
	if c.HomeGateway() != "" {
		return nil
	}
	self := grain.ID{Type: "granary.v1.Client", Key: c.id}
	var tried []*gatewayRef
	var last error
	for {
		g := c.pick(self, tried)
		if g == nil {
			return noHome(last)
		}
		tried = append(tried, g)
		c.homeMu.Lock()
		c.homing, c.homingLost = g, false
		c.homeMu.Unlock()
		last = c.askHome(ctx, g)
		c.homeMu.Lock()
		if last == nil && c.homingLost {
			// Its stream ended while it said yes.
			last = status.Errorf(codes.Unavailable, "granary: the stream to gateway %s ended", g.silo)
		}
		if last == nil {
			c.home = g
		}
		c.homing = nil
		c.homeMu.Unlock()
		if last == nil {
			c.log.Debug("client has a home gateway", zap.String("gateway", g.silo))
			return nil
		}
		if ctx.Err() != nil {
			return noHome(last)
		}
		if transport.NotSent(last) {
			c.notTaken(g, last)
		}
	}
}

func noHome(last error) error {
	if last == nil {
		return status.Error(codes.Unavailable, "granary: no live gateway to be the client's home")
	}
	return status.Errorf(codes.Unavailable, "granary: no gateway would be the client's home; the last said: %s", status.Convert(last).Message())
}

// askHome asks gateway g to be the client's home and waits for its
// answer.
func (c *Client) askHome(ctx context.Context, g *gatewayRef) error {
	done := make(chan error, 1)
	env := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_HOME}
	c.tport.Call(g.silo, env, c.o.clock.Now().Add(homeTimeout), func(resp *granaryv1.Envelope, err error) {
		if err == nil {
			err = transport.StatusOf(resp)
		}
		done <- err
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// StreamsEnded is the transport telling the client that a gateway's
// stream ended or the gateway is going away: when it was the client's
// home, the client moves home, so grains reach its observers again. It
// takes homeMu and mu, which nobody holds across a wait or a call into
// the transport.
func (c *Client) StreamsEnded(gateway string) {
	c.homeMu.Lock()
	lost := c.home != nil && c.home.silo == gateway
	if lost {
		c.home = nil
	}
	if c.homing != nil && c.homing.silo == gateway {
		c.homingLost = true
	}
	c.homeMu.Unlock()
	if !lost || c.closed.Load() {
		return
	}
	c.mu.Lock()
	none := len(c.observers) == 0
	c.mu.Unlock()
	if none {
		return
	}
	// Close sets closed before it closes the transport, whose goroutines
	// (this one, or one the client's own wg counts) it waits for before
	// it waits for wg.
	c.wg.Add(1)
	go c.rehome()
}

// rehome makes another gateway the client's home, retrying with a
// growing pause until one takes it or the client closes.
func (c *Client) rehome() {
	defer c.wg.Done()
	pause := 10 * time.Millisecond
	for {
		err := c.ensureHome(c.ctx)
		if err == nil || c.ctx.Err() != nil {
			return
		}
		c.log.Warn("the client could not move home; retrying", zap.Duration("in", pause), zap.Error(err))
		c.askRefresh()
		t := c.o.clock.NewTimer(pause)
		select {
		case <-t.Chan():
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// Deliver takes a call from a gateway to one of the client's observers.
// The stream's reader goroutine; it does not block.
func (c *Client) Deliver(from string, env *granaryv1.Envelope, r transport.Responder) {
	refuse := transport.Refuser(r, c.log, "dropped a one-way call to an observer", from)
	if !env.Observer || (env.Kind != granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST && env.Kind != granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY) {
		refuse(codes.Unimplemented, "granary: a client takes only calls to its observers")
		return
	}
	c.mu.Lock()
	o := c.observers[env.GrainKey]
	c.mu.Unlock()
	if o == nil || o.desc.Type != env.GrainType {
		refuse(codes.NotFound, "granary: observer %s/%s is gone", env.GrainType, env.GrainKey)
		return
	}
	idx := int(env.MethodIndex)
	if idx >= len(o.desc.Methods) || o.desc.Methods[idx].Name != env.Method {
		refuse(codes.Unimplemented, "granary: observer type %s has no method %q at index %d", env.GrainType, env.Method, env.MethodIndex)
		return
	}
	m := &o.desc.Methods[idx]
	req := m.NewRequest()
	if err := proto.Unmarshal(env.Payload, req); err != nil {
		refuse(codes.InvalidArgument, "granary: the request to observer %s.%s does not decode: %v", o.id, m.Name, err)
		return
	}
	timeout := time.Duration(env.TimeoutNanos)
	if timeout <= 0 {
		timeout = c.o.callTimeout
	}
	o.mu.Lock()
	o.queue = append(o.queue, observerCall{m: m, req: req, r: r, deadline: c.o.clock.Now().Add(timeout)})
	start := !o.running
	o.running = true
	o.mu.Unlock()
	if start {
		c.wg.Add(1)
		go c.runObserver(o)
	}
}

// runObserver runs an observer's queued calls in order until none is
// left.
func (c *Client) runObserver(o *observer) {
	defer c.wg.Done()
	for {
		o.mu.Lock()
		if len(o.queue) == 0 {
			o.running = false
			o.mu.Unlock()
			return
		}
		call := o.queue[0]
		o.queue[0] = observerCall{}
		o.queue = o.queue[1:]
		o.mu.Unlock()
		c.runObserverCall(o, call)
	}
}

// runObserverCall runs one call and answers it.
func (c *Client) runObserverCall(o *observer, call observerCall) {
	ctx, cancel := clockwork.WithDeadline(c.ctx, c.o.clock, call.deadline)
	defer cancel()
	out, err := invokeObserver(ctx, o, call)
	if !call.r.Expects() {
		if err != nil {
			c.log.Debug("a one-way call to an observer failed", zap.Stringer("observer", o.id), zap.String("method", call.m.Name), zap.Error(err))
		}
		return
	}
	resp := &granaryv1.Envelope{}
	if err == nil && out != nil {
		if resp.Payload, err = proto.Marshal(out); err != nil {
			err = status.Errorf(codes.Internal, "granary: encoding the reply of observer %s.%s: %v", o.id, call.m.Name, err)
		}
	}
	if err != nil {
		resp.Payload = nil
		transport.SetStatus(resp, err)
	}
	call.r.Reply(resp)
}

// invokeObserver calls the observer's method, turning a panic into an
// Internal error.
func invokeObserver(ctx context.Context, o *observer, call observerCall) (out proto.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, status.Errorf(codes.Internal, "granary: observer %s.%s panicked: %v", o.id, call.m.Name, p)
		}
	}()
	return call.m.Observe(o.impl, ctx, call.req)
}
