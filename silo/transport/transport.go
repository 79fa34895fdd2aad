package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A Conn is one bidirectional stream of frames between two silos.
type Conn interface {
	// Send sends one frame. One goroutine at a time. The Conn does not
	// keep frame after Send returns.
	Send(frame []byte) error
	// Recv returns the next frame. One goroutine at a time.
	Recv() ([]byte, error)
	// CloseSend ends this end's sending: the other end reads what was
	// sent, then io.EOF. The writer goroutine only.
	CloseSend() error
	// Close ends the stream; a Recv blocked on it returns an error. What
	// was sent before reaches the other end if the network can deliver
	// it. Any goroutine; idempotent.
	Close() error
}

// A Network opens streams to other silos. The other side hands each
// stream it accepts to its Transport's Serve.
type Network interface {
	// Dial opens a stream to the silo listening at addr; ctx bounds the
	// dial only, not the stream.
	Dial(ctx context.Context, addr string) (Conn, error)
	// Forget releases whatever the network keeps for addr (a gRPC channel
	// and its reconnect attempts): the silo there is gone.
	Forget(addr string)
}

// A Handler receives the envelopes other silos send to this one.
type Handler interface {
	// Deliver hands over a REQUEST, ONE_WAY or DIRECTORY envelope from
	// silo from. env is the transport's and is reused once Deliver
	// returns; what its fields hold (strings, the payload, sub-messages)
	// the Handler may keep. For a REQUEST or DIRECTORY
	// envelope, r.Reply must be called exactly once with the answer; for
	// a ONE_WAY one, r expects nothing. Called on the stream's reader
	// goroutine, in arrival order: it must not block.
	Deliver(from string, env *granaryv1.Envelope, r Responder)
}

// ErrClosed is the cause of the errors after Close.
var ErrClosed = errors.New("transport: closed")

// A Transport carries this silo's calls to other silos and delivers
// theirs to its Handler.
type Transport struct {
	cfg   Config
	net   Network
	h     Handler
	log   *zap.Logger
	clock clockwork.Clock

	mu        sync.Mutex
	closed    bool
	goingAway bool                          // GoAway was called: every accepted stream gets a GO_AWAY
	peers     map[string]*peer              // by member ID
	dialed    map[*endpoint]bool            // streams this silo dialled and not yet broken
	accepted  map[string]map[*endpoint]bool // streams peers dialled, by peer

	wg        sync.WaitGroup // dialled endpoints' goroutines and the sweeper
	stopSweep chan struct{}
}

// peer is another silo this one may call.
type peer struct {
	addr string
	ep   *endpoint // the current dialled stream, or nil
	// leaving: the peer said it is shutting down (GO_AWAY): calls to it
	// are refused as not sent.
	leaving bool
	// The last failed dial, refused again at once until RedialBackoff
	// has passed.
	failedAt time.Time
	failErr  error
}

// New makes a Transport that dials through net and delivers to h.
func New(cfg Config, net Network, h Handler) (*Transport, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if net == nil || h == nil {
		return nil, errors.New("transport: New needs a Network and a Handler")
	}
	t := &Transport{
		cfg:       cfg,
		net:       net,
		h:         h,
		log:       cfg.Logger,
		clock:     cfg.Clock,
		peers:     map[string]*peer{},
		dialed:    map[*endpoint]bool{},
		accepted:  map[string]map[*endpoint]bool{},
		stopSweep: make(chan struct{}),
	}
	t.wg.Add(1)
	go t.sweep()
	return t, nil
}

// SetPeer tells the transport where silo id listens. A new address for a
// known peer ends its old stream. Any goroutine.
func (t *Transport) SetPeer(id, addr string) {
	t.mu.Lock()
	p := t.peers[id]
	if p != nil && p.addr == addr {
		t.mu.Unlock()
		return
	}
	var old *endpoint
	if p != nil {
		old = p.ep
	}
	t.peers[id] = &peer{addr: addr}
	t.mu.Unlock()
	if old != nil {
		old.fail(status.Errorf(codes.Unavailable, "granary: silo %s moved to %s", id, addr))
	}
}

// RemovePeer forgets silo id, naming why: no new call goes to it. A peer
// that failed (graceful false) has its streams closed, and every call
// waiting on it fails at once with Unavailable. A peer that left
// gracefully keeps its streams until it closes them: it answers what it
// was sent before it goes. Any goroutine.
func (t *Transport) RemovePeer(id string, why string, graceful bool) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	var eps []*endpoint
	if !graceful {
		for ep := range t.accepted[id] {
			eps = append(eps, ep)
		}
		if p != nil && p.ep != nil {
			eps = append(eps, p.ep)
		}
	}
	t.mu.Unlock()
	err := status.Errorf(codes.Unavailable, "granary: silo %s is gone: %s", id, why)
	for _, ep := range eps {
		ep.fail(err)
	}
	if p != nil && !graceful {
		t.net.Forget(p.addr)
	}
}

// Call sends a REQUEST or DIRECTORY envelope to silo to and calls done
// exactly once with the response envelope (whose code says how the call
// went) or an error; see the package contract. The response envelope is
// the transport's and is reused once done returns (what its fields hold
// may be kept). deadline bounds the wait for room in a full send queue
// and, plus ResponseGrace, the wait for the response; zero means none.
// Call sets env's call ID and has encoded env when it returns, so the
// caller may reuse it. It may block while the send queue is full. Any
// goroutine.
func (t *Transport) Call(to string, env *granaryv1.Envelope, deadline time.Time, done func(*granaryv1.Envelope, error)) {
	ep, err := t.endpointFor(to)
	if err != nil {
		done(nil, err)
		return
	}
	ep.call(env, deadline, done)
}

// Send sends a ONE_WAY envelope to silo to. It returns an error only for
// what fails before the envelope is queued. It has encoded env when it
// returns. Any goroutine.
func (t *Transport) Send(to string, env *granaryv1.Envelope, deadline time.Time) error {
	ep, err := t.endpointFor(to)
	if err != nil {
		return err
	}
	return ep.send(env, deadline)
}

// endpointFor returns the stream to silo id, dialling one if there is
// none. It fails at once for an unknown peer and, within RedialBackoff,
// for one whose last dial failed.
func (t *Transport) endpointFor(id string) (*endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, status.Errorf(codes.Unavailable, "granary: %v", ErrClosed)
	}
	p := t.peers[id]
	if p == nil {
		return nil, &NotSentError{Peer: id, Msg: fmt.Sprintf("granary: no route to silo %s: it is not a live member of the cluster", id), Gone: true}
	}
	if p.leaving {
		return nil, &NotSentError{Peer: id, Msg: fmt.Sprintf("granary: silo %s is shutting down", id), Gone: true}
	}
	if p.ep != nil {
		return p.ep, nil
	}
	if p.failErr != nil && t.clock.Since(p.failedAt) < t.cfg.RedialBackoff {
		return nil, p.failErr
	}
	ep := newEndpoint(t, id, p.addr, true)
	p.ep = ep
	t.dialed[ep] = true
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ep.writeLoop()
	}()
	return ep, nil
}

// dialFailed records a failed dial for RedialBackoff.
func (t *Transport) dialFailed(ep *endpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[ep.peer]; p != nil && p.addr == ep.addr {
		p.failedAt = t.clock.Now()
		p.failErr = ep.err
	}
}

// detach forgets a broken endpoint, so the next call dials anew. The
// network forgets the address of a peer that was removed gracefully once
// its last stream ends.
func (t *Transport) detach(ep *endpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ep.dialed {
		delete(t.dialed, ep)
		p := t.peers[ep.peer]
		switch {
		case p != nil && p.ep == ep:
			p.ep = nil
		case p == nil && !t.closed:
			t.mu.Unlock() // a network may take its time to close a channel
			t.net.Forget(ep.addr)
			t.mu.Lock()
		}
		return
	}
	if m := t.accepted[ep.peer]; m != nil {
		delete(m, ep)
		if len(m) == 0 {
			delete(t.accepted, ep.peer)
		}
	}
}

// peerLeaving marks the peer of a dialled endpoint as shutting down.
func (t *Transport) peerLeaving(ep *endpoint) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[ep.peer]; p != nil && p.addr == ep.addr {
		p.leaving = true
		if p.ep == ep {
			p.ep = nil // the stream stays up for the responses
		}
	}
}

// GoAway tells every silo that dialled this one that it is shutting
// down, and waits until each has answered: from then on no request
// arrives, and the silo can finish what it has and close. Streams dialled
// later get the same at once. It returns ctx's error if ctx ends first.
// Any goroutine.
func (t *Transport) GoAway(ctx context.Context) error {
	t.mu.Lock()
	t.goingAway = true
	var eps []*endpoint
	for _, m := range t.accepted {
		for ep := range m {
			eps = append(eps, ep)
		}
	}
	t.mu.Unlock()
	for _, ep := range eps {
		ep.sendGoAway()
	}
	// Streams accepted meanwhile got theirs in Serve: wait for those too,
	// until a pass finds every stream answered.
	waited := map[*endpoint]bool{}
	for {
		t.mu.Lock()
		eps = eps[:0]
		for _, m := range t.accepted {
			for ep := range m {
				if !waited[ep] {
					eps = append(eps, ep)
				}
			}
		}
		t.mu.Unlock()
		if len(eps) == 0 {
			return nil
		}
		for _, ep := range eps {
			select {
			case <-ep.acked:
			case <-ep.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			waited[ep] = true
		}
	}
}

// checkSize refuses an envelope larger than MaxMessageSize.
func (t *Transport) checkSize(size int, to string) error {
	if size > t.cfg.MaxMessageSize {
		return status.Errorf(codes.ResourceExhausted,
			"granary: a message of %d bytes to silo %s exceeds the limit of %d bytes (MaxMessageSize)", size, to, t.cfg.MaxMessageSize)
	}
	return nil
}

// Serve runs a stream another silo dialled, until it ends: the network
// calls it for each stream it accepts. The first envelope must be a hello
// of this cluster; otherwise the stream is refused.
func (t *Transport) Serve(conn Conn) error {
	f, err := conn.Recv()
	if err != nil {
		return err
	}
	var hello *granaryv1.Envelope
	var rest [][]byte
	if err := splitFrame(f, func(b []byte) {
		if hello == nil {
			hello = new(granaryv1.Envelope)
			if proto.Unmarshal(b, hello) != nil {
				hello.Reset()
			}
			return
		}
		rest = append(rest, b)
	}); err != nil || hello == nil || hello.Kind != granaryv1.EnvelopeKind_ENVELOPE_KIND_HELLO || hello.Hello == nil || hello.Hello.Silo == "" {
		t.log.Warn("refused a stream that did not open with a hello")
		return status.Error(codes.InvalidArgument, "granary: a silo stream must open with a hello")
	}
	if hello.Hello.ClusterId != t.cfg.ClusterID {
		t.log.Warn("refused a stream from another cluster", zap.String("cluster", hello.Hello.ClusterId), zap.String("silo", hello.Hello.Silo))
		return status.Errorf(codes.PermissionDenied, "granary: silo %s is in cluster %q, not %q", t.cfg.Self, t.cfg.ClusterID, hello.Hello.ClusterId)
	}
	ep := newEndpoint(t, hello.Hello.Silo, "", false)
	ep.conn = conn
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return status.Errorf(codes.Unavailable, "granary: %v", ErrClosed)
	}
	m := t.accepted[ep.peer]
	if m == nil {
		m = map[*endpoint]bool{}
		t.accepted[ep.peer] = m
	}
	m[ep] = true
	goingAway := t.goingAway
	t.mu.Unlock()
	if goingAway {
		ep.sendGoAway()
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ep.writeLoop()
	}()
	for _, b := range rest {
		env := new(granaryv1.Envelope)
		if err := proto.Unmarshal(b, env); err != nil {
			ep.malformed(b, err)
			continue
		}
		ep.deliver(env)
	}
	ep.readLoop()
	wg.Wait()
	return nil
}

// sweep forgets calls whose response is long overdue.
func (t *Transport) sweep() {
	defer t.wg.Done()
	tk := t.clock.NewTicker(t.cfg.SweepInterval)
	defer tk.Stop()
	for {
		select {
		case <-t.stopSweep:
			return
		case <-tk.Chan():
		}
		now := t.clock.Now()
		t.mu.Lock()
		eps := make([]*endpoint, 0, len(t.dialed))
		for ep := range t.dialed {
			eps = append(eps, ep)
		}
		t.mu.Unlock()
		for _, ep := range eps {
			ep.expire(now)
		}
	}
}

// Shutdown writes out what is queued on every stream (the answers to
// requests this silo has finished, above all), until ctx ends, and then
// closes the transport. Any goroutine.
func (t *Transport) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	var eps []*endpoint
	for ep := range t.dialed {
		eps = append(eps, ep)
	}
	for _, m := range t.accepted {
		for ep := range m {
			eps = append(eps, ep)
		}
	}
	t.mu.Unlock()
	for _, ep := range eps {
		ep.flush(ctx)
	}
	// End the accepted streams from this side, after their answers: a
	// gRPC stream whose handler returns sends its end after its data.
	done := status.Errorf(codes.Unavailable, "granary: silo %s shut down", t.cfg.Self)
	for _, ep := range eps {
		if !ep.dialed {
			ep.fail(done)
		}
	}
	return t.Close()
}

// isGoingAway reports whether GoAway was called.
func (t *Transport) isGoingAway() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.goingAway
}

// Close ends every stream, fails what waits on them with Unavailable, and
// waits for the goroutines of the streams this silo dialled. Streams that
// other silos dialled end when they close them or when the server that
// runs Serve stops. Idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	var eps []*endpoint
	for ep := range t.dialed {
		eps = append(eps, ep)
	}
	for _, m := range t.accepted {
		for ep := range m {
			eps = append(eps, ep)
		}
	}
	t.mu.Unlock()
	close(t.stopSweep)
	err := status.Errorf(codes.Unavailable, "granary: silo %s: %v", t.cfg.Self, ErrClosed)
	for _, ep := range eps {
		ep.fail(err)
	}
	t.wg.Wait()
	return nil
}

// Stats is a snapshot of the transport's counters.
type Stats struct {
	Peers   int // known peers
	Streams int // streams up, both directions
	Pending int // calls waiting for a response
}

// Stats returns the transport's counters. Any goroutine.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	st := Stats{Peers: len(t.peers)}
	var eps []*endpoint
	for ep := range t.dialed {
		eps = append(eps, ep)
	}
	for _, m := range t.accepted {
		st.Streams += len(m)
	}
	t.mu.Unlock()
	st.Streams += len(eps)
	for _, ep := range eps {
		st.Pending += ep.pendingCount()
	}
	return st
}
