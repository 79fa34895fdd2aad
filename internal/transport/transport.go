package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/security"
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
	// and its reconnect attempts): the silo there is gone. The Transport
	// calls it once no peer it knows and no stream it dialled uses addr.
	Forget(addr string)
}

// A Handler receives the envelopes other silos send to this one.
type Handler interface {
	// Deliver hands over a REQUEST, ONE_WAY, CANCEL or DIRECTORY envelope
	// from silo (or client) from. env is the transport's and is reused
	// once Deliver returns; what its fields hold (strings, the payload,
	// sub-messages) the Handler may keep. For a REQUEST or DIRECTORY
	// envelope, r.Reply must be called exactly once with the answer; for
	// a ONE_WAY or CANCEL one, r expects nothing. A CANCEL's call ID is
	// that of a REQUEST from the same sender. Called on the stream's reader
	// goroutine, in arrival order: it must not block.
	Deliver(from string, env *granaryv1.Envelope, r Responder)
}

// A StreamWatcher is a Handler that wants to know when it may have lost
// its way to a peer: StreamsEnded(peer) is called when the last stream
// the peer dialled to this end has ended, when the stream this end
// dialled to the peer has ended, and when the peer said it is going away.
// A gateway drops a client's registration by it; a client moves its home
// gateway. Any goroutine; it must not block.
type StreamWatcher interface {
	StreamsEnded(peer string)
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

	acceptSeq uint64 // numbers the accepted streams, in order; mu

	// nextID numbers the requests this transport sends, on every stream:
	// a call ID names one request for the transport's life, so a CANCEL
	// sent on a newer stream to the same peer cannot hit another call.
	nextID atomic.Uint64

	mu        sync.Mutex
	closed    bool
	goingAway bool                          // GoAway was called: every accepted stream gets a GO_AWAY
	peers     map[string]*peer              // by member ID
	dialed    map[*endpoint]bool            // streams this silo dialled and not yet broken
	accepted  map[string]map[*endpoint]bool // streams peers dialled, by peer
	// addrs counts the uses of each address: the peers at it and the
	// dialled streams to it not yet broken. The network forgets an
	// address when its count drops to zero, and not before: a new
	// incarnation of a silo (a new member ID) may listen at the address
	// of the old one while the old one's streams are still being failed.
	addrs map[string]int

	// wg counts the goroutines of every endpoint (the writers and readers
	// of dialled and accepted streams) and the sweeper.
	wg        sync.WaitGroup
	stopSweep chan struct{}

	stats counters // bytes, frames and envelopes sent and received

	// failHook, when set, runs in endpoint.fail on the failing goroutine
	// once the endpoint's failure can be seen by callers and before the
	// endpoint is detached. Tests set it, before the first stream, to
	// hold a failure in that window; nil otherwise.
	failHook func(*endpoint)
}

// peer is another silo this one may call.
type peer struct {
	addr string
	// ep is the current dialled stream, or nil. It may have failed
	// without being detached yet (fail publishes the failure first):
	// endpointFor never hands out a failed one.
	ep *endpoint
	// leaving: the peer said it is shutting down (GO_AWAY): calls to it
	// are refused as not sent.
	leaving bool
	// The last failed dial, refused again at once until RedialBackoff
	// has passed. Recorded before any caller learns of the failure.
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
		addrs:     map[string]int{},
		stopSweep: make(chan struct{}),
	}
	t.wg.Add(1)
	go t.sweep()
	return t, nil
}

// SetPeer tells the transport where silo id listens. A new address for a
// known peer ends the streams this silo dialled to the old one, and the
// network forgets the old address once nothing uses it. Any goroutine.
func (t *Transport) SetPeer(id, addr string) {
	t.mu.Lock()
	p := t.peers[id]
	if p != nil && p.addr == addr {
		t.mu.Unlock()
		return
	}
	var old []*endpoint
	forget := false
	if p != nil {
		old = t.dialedToLocked(id)
		forget = t.releaseAddrLocked(p.addr)
	}
	t.peers[id] = &peer{addr: addr}
	t.addrs[addr]++
	t.mu.Unlock()
	for _, ep := range old {
		ep.fail(status.Errorf(codes.Unavailable, "granary: silo %s moved to %s", id, addr))
	}
	if forget {
		t.net.Forget(p.addr)
	}
}

// RemovePeer forgets silo id, naming why: no new call goes to it. A peer
// that failed (graceful false) has its streams closed, those it dialled
// and every one this silo dialled to it (also one it told to go away),
// and every call waiting on it fails at once with Unavailable. A peer
// that left gracefully keeps its streams until it closes them: it answers
// what it was sent before it goes. The network forgets the peer's
// address once no other peer and no stream uses it. Any goroutine.
func (t *Transport) RemovePeer(id string, why string, graceful bool) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	forget := false
	if p != nil {
		forget = t.releaseAddrLocked(p.addr)
	}
	var eps []*endpoint
	if !graceful {
		for ep := range t.accepted[id] {
			eps = append(eps, ep)
		}
		eps = append(eps, t.dialedToLocked(id)...)
	}
	t.mu.Unlock()
	err := status.Errorf(codes.Unavailable, "granary: silo %s is gone: %s", id, why)
	for _, ep := range eps {
		ep.fail(err)
	}
	if forget {
		t.net.Forget(p.addr)
	}
}

// dialedToLocked returns every unbroken stream this silo dialled to silo
// id: its current one and one that its GO_AWAY detached from it. mu held.
func (t *Transport) dialedToLocked(id string) []*endpoint {
	var eps []*endpoint
	for ep := range t.dialed {
		if ep.peer == id {
			eps = append(eps, ep)
		}
	}
	return eps
}

// releaseAddrLocked drops one use of addr and reports whether the network
// is to forget it: nothing uses it any more and the transport is not
// closed (its owner closes the network then). mu held.
func (t *Transport) releaseAddrLocked(addr string) bool {
	n := t.addrs[addr]
	switch {
	case n <= 0:
		panic(fmt.Sprintf("transport: releasing address %q, which has %d uses", addr, n))
	case n == 1:
		delete(t.addrs, addr)
		return !t.closed
	default:
		t.addrs[addr] = n - 1
		return false
	}
}

// Call sends a REQUEST or DIRECTORY envelope to silo to and calls done
// exactly once with the response envelope (whose code says how the call
// went) or an error; see the package contract. It returns the request's
// call ID, or 0 when it was refused before it got one. The response envelope is
// the transport's and is reused once done returns (what its fields hold
// may be kept). deadline bounds the wait for room in a full send queue
// and, plus ResponseGrace, the wait for the response; zero means none.
// Call sets env's call ID and has encoded env when it returns, so the
// caller may reuse it. It may block while the send queue is full. Any
// goroutine.
func (t *Transport) Call(to string, env *granaryv1.Envelope, deadline time.Time, done func(*granaryv1.Envelope, error)) uint64 {
	ep, err := t.endpointFor(to)
	if err != nil {
		done(nil, err)
		return 0
	}
	return ep.call(env, deadline, done)
}

// CallAccepted is Call on a stream that peer dialled to this end, not on
// one this end dials: how a gateway calls a client, which it cannot dial.
// It fails with a NotSentError when peer has no stream up.
func (t *Transport) CallAccepted(peer string, env *granaryv1.Envelope, deadline time.Time, done func(*granaryv1.Envelope, error)) uint64 {
	ep, err := t.acceptedFrom(peer)
	if err != nil {
		done(nil, err)
		return 0
	}
	return ep.call(env, deadline, done)
}

// SendAccepted is Send on a stream that peer dialled to this end.
func (t *Transport) SendAccepted(peer string, env *granaryv1.Envelope, deadline time.Time) error {
	ep, err := t.acceptedFrom(peer)
	if err != nil {
		return err
	}
	return ep.send(env, deadline)
}

// acceptedFrom returns the newest unbroken stream that peer dialled: a
// peer that dialled again left the older one, which may be dying.
func (t *Transport) acceptedFrom(peer string) (*endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var newest *endpoint
	for ep := range t.accepted[peer] {
		if !ep.broken() && (newest == nil || ep.acceptSeq > newest.acceptSeq) {
			newest = ep
		}
	}
	if newest == nil {
		return nil, &NotSentError{Peer: peer, Msg: fmt.Sprintf("granary: %s has no stream to this end", peer)}
	}
	return newest, nil
}

// Connected reports whether peer has a stream it dialled to this end up.
func (t *Transport) Connected(peer string) bool {
	_, err := t.acceptedFrom(peer)
	return err == nil
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
// none or the current one has failed. It fails at once for an unknown
// peer and, within RedialBackoff, for one whose last dial failed.
func (t *Transport) endpointFor(id string) (*endpoint, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, status.Errorf(codes.Unavailable, "granary: %v", ErrClosed)
	}
	p := t.peers[id]
	if p == nil {
		return nil, &NotSentError{Peer: id, Msg: fmt.Sprintf("granary: no route to silo %s: it is not a live member of the cluster", id)}
	}
	if p.leaving {
		return nil, &NotSentError{Peer: id, Leaving: true, Msg: fmt.Sprintf("granary: silo %s is shutting down", id)}
	}
	if p.ep != nil {
		if !p.ep.broken() {
			return p.ep, nil
		}
		// Its failure is published (done closes with err) before the
		// failing goroutine detaches it, and a caller may already have
		// been told: a call made after that must not be failed with the
		// same error. A failed dial has recorded its backoff by now.
		p.ep = nil
	}
	if p.failErr != nil && t.clock.Since(p.failedAt) < t.cfg.RedialBackoff {
		return nil, p.failErr
	}
	ep := newEndpoint(t, id, p.addr, true)
	p.ep = ep
	t.dialed[ep] = true
	t.addrs[ep.addr]++
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ep.writeLoop()
	}()
	return ep, nil
}

// dialFailed records ep's failed dial, err, for RedialBackoff. The
// writer calls it before it fails ep, so that a caller told of the
// failure finds the backoff in force, timed from the dial. A dial that
// was no longer the peer's current one (the peer moved, was removed, or
// the endpoint was failed and replaced) counts for nothing.
func (t *Transport) dialFailed(ep *endpoint, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[ep.peer]; p != nil && p.ep == ep {
		p.failedAt = t.clock.Now()
		p.failErr = err
	}
}

// detach forgets a broken endpoint, so the next call dials anew. The
// network forgets the address of a dialled endpoint once nothing else
// uses it (the last stream to a peer that was removed, say). Once, from
// fail.
func (t *Transport) detach(ep *endpoint) {
	t.mu.Lock()
	if !ep.dialed {
		last := false
		if m := t.accepted[ep.peer]; m != nil {
			delete(m, ep)
			if len(m) == 0 {
				delete(t.accepted, ep.peer)
				last = true
			}
		}
		t.mu.Unlock()
		if last {
			t.streamsEnded(ep.peer)
		}
		return
	}
	delete(t.dialed, ep)
	if p := t.peers[ep.peer]; p != nil && p.ep == ep {
		p.ep = nil
	}
	forget := t.releaseAddrLocked(ep.addr)
	t.mu.Unlock()
	if forget {
		t.net.Forget(ep.addr) // not under mu: a network may take its time to close a channel
	}
	t.streamsEnded(ep.peer)
}

// streamsEnded tells a Handler that watches streams.
func (t *Transport) streamsEnded(peer string) {
	if w, ok := t.h.(StreamWatcher); ok {
		w.StreamsEnded(peer)
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
	eps := t.acceptedLocked(nil)
	t.mu.Unlock()
	for _, ep := range eps {
		ep.sendGoAway()
	}
	// Streams accepted meanwhile got theirs in Serve: wait for those too,
	// until a pass finds every stream answered.
	waited := map[*endpoint]bool{}
	for len(eps) > 0 {
		for _, ep := range eps {
			select {
			case <-ep.acked:
			case <-ep.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			waited[ep] = true
		}
		t.mu.Lock()
		eps = t.acceptedLocked(waited)
		t.mu.Unlock()
	}
	return nil
}

// acceptedLocked lists the accepted streams not in skip. mu held.
func (t *Transport) acceptedLocked(skip map[*endpoint]bool) []*endpoint {
	var eps []*endpoint
	for _, m := range t.accepted {
		for ep := range m {
			if !skip[ep] {
				eps = append(eps, ep)
			}
		}
	}
	return eps
}

// checkSize refuses an envelope larger than MaxMessageSize.
func (t *Transport) checkSize(size int, to string) error {
	if size > t.cfg.MaxMessageSize {
		return status.Errorf(codes.ResourceExhausted,
			"granary: a message of %d bytes to silo %s exceeds the limit of %d bytes (MaxMessageSize)", size, to, t.cfg.MaxMessageSize)
	}
	return nil
}

// Serve runs a stream another silo dialled: the network calls it for
// each stream it accepts. The first envelope must be a hello of this
// cluster; otherwise the stream is refused. Serve returns once the
// stream's endpoint fails: the stream broke or the other silo closed it,
// RemovePeer declared that silo failed, or Shutdown or Close ended it. It
// has closed conn by then and delivers nothing after it returns; the
// stream's reader and writer goroutines end as soon as conn's Recv and
// Send return (a gRPC stream ends when its handler returns), and Close
// waits for them. It returns the endpoint's error, which a gRPC handler
// sends to the dialling silo as the stream's status.
func (t *Transport) Serve(conn Conn) error { return t.serve(conn, nil) }

// serve is Serve, also returning when ended closes: the stream ended
// under it without a Recv to notice (a gRPC server stopping while the
// reader has already seen the dialling silo's last request).
func (t *Transport) serve(conn Conn, ended <-chan struct{}) error {
	f, err := conn.Recv()
	if err != nil {
		return err
	}
	hello, rest, ok := openingHello(f)
	if !ok {
		t.cfg.Rejections.Reject(t.cfg.listener(), security.ReasonMalformedFrame, remoteAddr(conn), errNoHello)
		return status.Error(codes.InvalidArgument, "granary: a silo stream must open with a hello")
	}
	if hello.Hello.ClusterId != t.cfg.ClusterID {
		t.log.Warn("refused a stream from another cluster", zap.String("cluster", hello.Hello.ClusterId), zap.String("silo", hello.Hello.Silo), zap.String("remote", remoteAddr(conn)))
		return status.Errorf(codes.PermissionDenied, "granary: silo %s is in cluster %q, not %q", t.cfg.Self, t.cfg.ClusterID, hello.Hello.ClusterId)
	}
	ep := newEndpoint(t, hello.Hello.Silo, "", false)
	ep.conn = conn
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return status.Errorf(codes.Unavailable, "granary: %v", ErrClosed)
	}
	t.acceptSeq++
	ep.acceptSeq = t.acceptSeq
	m := t.accepted[ep.peer]
	if m == nil {
		m = map[*endpoint]bool{}
		t.accepted[ep.peer] = m
	}
	m[ep] = true
	goingAway := t.goingAway
	// The writer and the reader are the transport's: they may outlive
	// this call until the stream ends, which this call's return may be
	// what does (a writer blocked on flow control, a reader in Recv).
	t.wg.Add(2)
	t.mu.Unlock()
	if goingAway {
		ep.sendGoAway()
	}

	go func() {
		defer t.wg.Done()
		ep.writeLoop()
	}()
	for _, b := range rest {
		ep.deliverOne(b) // the reader has not started: ep.rx is free
	}
	ep.rxEnvs++ // the hello
	ep.countReceived(len(f))
	proto.Reset(&ep.rx)
	go func() {
		defer t.wg.Done()
		ep.readLoop()
	}()
	select {
	case <-ep.done:
	case <-ended:
		ep.fail(status.Errorf(codes.Unavailable, "granary: stream with silo %s ended", ep.peer))
	}
	ep.stopDelivering()
	return ep.failure()
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
		eps := t.endpointsLocked()
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
	eps := t.endpointsLocked()
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

// endpointsLocked lists every stream, dialled and accepted. mu held.
func (t *Transport) endpointsLocked() []*endpoint {
	eps := make([]*endpoint, 0, len(t.dialed)+len(t.accepted))
	for ep := range t.dialed {
		eps = append(eps, ep)
	}
	for _, m := range t.accepted {
		for ep := range m {
			eps = append(eps, ep)
		}
	}
	return eps
}

// isGoingAway reports whether GoAway was called.
func (t *Transport) isGoingAway() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.goingAway
}

// Close ends every stream, fails what waits on them with Unavailable, and
// waits for the goroutines of every stream: those this silo dialled and
// those other silos dialled, whose Serve calls return (and with a gRPC
// server, whose streams end) at once. Idempotent.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	eps := t.endpointsLocked()
	t.mu.Unlock()
	close(t.stopSweep)
	err := status.Errorf(codes.Unavailable, "granary: silo %s: %v", t.cfg.Self, ErrClosed)
	for _, ep := range eps {
		ep.fail(err)
	}
	t.wg.Wait()
	return nil
}

var errNoHello = errors.New("transport: a stream must open with a hello")

// rejectMalformed counts and logs (rate-limited) a frame or envelope that
// does not decode, from peer over conn. Without Rejections it logs each.
func (t *Transport) rejectMalformed(peer string, conn Conn, err error) {
	if t.cfg.Rejections == nil {
		t.log.Warn("malformed frame", zap.String("peer", peer), zap.String("remote", remoteAddr(conn)), zap.Error(err))
		return
	}
	t.cfg.Rejections.Reject(t.cfg.listener(), security.ReasonMalformedFrame, peer+" "+remoteAddr(conn), err)
}

// remoteAddr is the network address conn came from, or "" when unknown
// (a dialled stream, the in-memory network).
func remoteAddr(conn Conn) string {
	if r, ok := conn.(interface{ RemoteAddr() string }); ok {
		return r.RemoteAddr()
	}
	return ""
}
