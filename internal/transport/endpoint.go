package transport

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// An endpoint is this silo's end of one stream. A dialled endpoint sends
// requests and receives their responses; an accepted one receives requests
// and sends responses. Requests may also go the other way (a gateway
// calling a client's observers on the stream the client dialled): each
// end answers the requests it receives and matches the responses it
// receives to the requests it sent. Each has a send queue that callers fill and one
// writer goroutine that empties it, and one reader.
type endpoint struct {
	t      *Transport
	peer   string // the other silo's member ID
	addr   string // dialled endpoints: the peer's address
	dialed bool
	conn   Conn // dialled endpoints: set by the writer once connected
	// acceptSeq orders the accepted endpoints of a transport: the newest
	// of a peer's is the one to call it on.
	acceptSeq uint64

	wake chan struct{} // capacity 1: the writer has work
	done chan struct{} // closed when the endpoint breaks
	// acked, on an accepted endpoint, is closed when the dialling silo
	// has answered this silo's GO_AWAY: no request follows.
	acked     chan struct{}
	ackedOnce sync.Once

	mu      sync.Mutex
	err     error    // why the endpoint broke; nothing is queued after
	frames  [][]byte // full frames waiting for the writer, oldest first
	cur     []byte   // the frame being filled
	envs    []int    // the number of envelopes in each of frames
	curEnvs int      // the number of envelopes in cur
	queued  int      // bytes in frames and cur
	spare   [][]byte // sent frames, for reuse
	spacec  chan struct{}
	waiting bool // a sender waits on spacec for room
	sending bool // the writer holds frames it took and has not sent yet
	// takenEnvs is the number of envelopes in the frames the writer took
	// last: set by take, so it counts them until the writer's next take
	// (after it wrote them) or the endpoint breaks. For Stats.
	takenEnvs int
	// flushc is closed when the queue is empty and the writer holds
	// nothing: what was queued has been written. Made by flush.
	flushc chan struct{}
	// finishSend: once the queue is written, the writer half-closes the
	// stream and ends (a dialled endpoint told to go away). Set together
	// with queueing the answer to the GO_AWAY; enqueue refuses everything
	// after it.
	finishSend bool
	pending    map[uint64]*pendingCall
	// dialCancel ends a dial in progress.
	dialCancel context.CancelFunc

	rx     granaryv1.Envelope // the reader's, reused for each envelope it decodes
	rxEnvs uint64             // envelopes decoded since countReceived; the reader's
	names  names              // the reader's copies of the names it decoded

	// deliverMu is held by the reader while it delivers a frame, and
	// stopped is set under it when the reader is to deliver nothing more:
	// Serve takes it before it returns, so an accepted endpoint delivers
	// nothing after its Serve call, though its reader may still be
	// blocked in Recv until the stream ends.
	deliverMu sync.Mutex
	stopped   bool
}

// pendingCall is a request sent on an endpoint, waiting for its
// response.
type pendingCall struct {
	done     func(*granaryv1.Envelope, error)
	deadline time.Time // zero: none
}

var pendingPool = sync.Pool{New: func() any { return new(pendingCall) }}

// finish calls done once and returns the record to its pool. Whoever
// removed it from the pending map calls it.
func (p *pendingCall) finish(env *granaryv1.Envelope, err error) {
	done := p.done
	p.free()
	done(env, err)
}

func (p *pendingCall) free() {
	*p = pendingCall{}
	pendingPool.Put(p)
}

func newEndpoint(t *Transport, peer, addr string, dialed bool) *endpoint {
	ep := &endpoint{
		t:      t,
		peer:   peer,
		addr:   addr,
		dialed: dialed,
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		spacec: make(chan struct{}),
		acked:  make(chan struct{}),
	}
	ep.pending = make(map[uint64]*pendingCall)
	return ep
}

// failure returns why the endpoint broke, or nil. Any goroutine.
func (ep *endpoint) failure() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.err
}

// broken reports whether the endpoint has failed. Any goroutine.
func (ep *endpoint) broken() bool {
	select {
	case <-ep.done:
		return true
	default:
		return false
	}
}

// call sends a request and records it as pending, and returns its call
// ID. Any goroutine.
func (ep *endpoint) call(env *granaryv1.Envelope, deadline time.Time, done func(*granaryv1.Envelope, error)) uint64 {
	id := ep.t.nextID.Add(1)
	env.CallId = id
	bp, err := ep.encode(env)
	if err != nil {
		done(nil, err)
		return id
	}
	defer putScratch(bp)
	p := pendingPool.Get().(*pendingCall)
	p.done, p.deadline = done, deadline
	if err := ep.enqueue(*bp, deadline, id, p); err != nil {
		p.free()
		done(nil, err)
	}
	return id
}

// send queues an envelope that gets no response: a one-way request on a
// dialled endpoint, or a response on an accepted one. Any goroutine.
func (ep *endpoint) send(env *granaryv1.Envelope, deadline time.Time) error {
	bp, err := ep.encode(env)
	if err != nil {
		return err
	}
	defer putScratch(bp)
	return ep.enqueue(*bp, deadline, 0, nil)
}

// encode encodes env for the send queue, refusing one larger than
// MaxMessageSize before spending the encoding on it.
func (ep *endpoint) encode(env *granaryv1.Envelope) (*[]byte, error) {
	size, own := sizeEnvelope(env)
	if err := ep.t.checkSize(size, ep.peer); err != nil {
		return nil, err
	}
	bp, err := encodeSized(env, size, own)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "granary: encoding a message to silo %s: %v", ep.peer, err)
	}
	return bp, nil
}

// enqueue appends an encoded envelope to the send queue, first waiting for
// room while the queue is full, until deadline (zero: until the endpoint
// breaks). A pending call p is recorded under id in the same critical
// section, so a failure of the endpoint either refuses the envelope or
// fails the call. Any goroutine.
func (ep *endpoint) enqueue(b []byte, deadline time.Time, id uint64, p *pendingCall) error {
	ep.mu.Lock()
	for ep.err == nil && !ep.finishSend && ep.queued > 0 && ep.queued+len(b) > ep.t.cfg.SendQueueBytes {
		ep.waiting = true
		spacec := ep.spacec
		ep.mu.Unlock()
		if !ep.waitForRoom(spacec, deadline) {
			return status.Errorf(codes.ResourceExhausted,
				"granary: the send queue to silo %s stayed full (%d bytes, SendQueueBytes) until the call's deadline", ep.peer, ep.t.cfg.SendQueueBytes)
		}
		ep.mu.Lock()
	}
	if ep.err != nil {
		err := ep.err
		ep.mu.Unlock()
		return err
	}
	if ep.finishSend {
		// The answer to the peer's GO_AWAY is queued: the peer counts
		// nothing sent after it, and the writer half-closes the stream
		// once it is written. The caller took this endpoint before the
		// peer was marked as leaving; what it sends goes elsewhere.
		ep.mu.Unlock()
		return &NotSentError{Peer: ep.peer, Leaving: true, Msg: fmt.Sprintf("granary: silo %s is shutting down", ep.peer)}
	}
	if p != nil {
		ep.pending[id] = p
	}
	ep.appendLocked(b)
	ep.mu.Unlock()
	ep.wakeWriter()
	return nil
}

// appendLocked adds an encoded envelope to the frame being filled. mu
// held.
func (ep *endpoint) appendLocked(b []byte) {
	if len(ep.cur) > 0 && len(ep.cur)+len(b) > ep.t.cfg.MaxBatchBytes {
		ep.frames = append(ep.frames, ep.cur)
		ep.envs = append(ep.envs, ep.curEnvs)
		ep.cur, ep.curEnvs = nil, 0
	}
	if ep.cur == nil {
		ep.cur = ep.newBufLocked()
	}
	ep.cur = append(ep.cur, b...)
	ep.curEnvs++
	ep.queued += len(b)
}

// wakeWriter tells the writer there is work. Any goroutine.
func (ep *endpoint) wakeWriter() {
	select {
	case ep.wake <- struct{}{}:
	default:
	}
}

// waitForRoom waits until the writer frees room (true), or the deadline
// passes or the endpoint breaks (false for the deadline; true for a break,
// which enqueue then reports).
func (ep *endpoint) waitForRoom(spacec chan struct{}, deadline time.Time) bool {
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		d := deadline.Sub(ep.t.clock.Now())
		if d <= 0 {
			return false
		}
		tm := ep.t.clock.NewTimer(d)
		defer tm.Stop()
		timeout = tm.Chan()
	}
	select {
	case <-spacec:
		return true
	case <-ep.done:
		return true
	case <-timeout:
		return false
	}
}

// Spare frames. A burst queues frames faster than the writer sends them,
// each filled to MaxBatchBytes; reusing sent ones saves allocating each
// frame of a flood and growing it by doubling from a few kilobytes.
// Between bursts the writer keeps only a few.
const (
	burstSpares = 16
	idleSpares  = 4
)

func (ep *endpoint) newBufLocked() []byte {
	if n := len(ep.spare); n > 0 {
		b := ep.spare[n-1]
		ep.spare = ep.spare[:n-1]
		return b[:0]
	}
	if len(ep.frames) > 0 {
		// A burst: this frame will fill as the ones queued before it did.
		return make([]byte, 0, ep.t.cfg.MaxBatchBytes)
	}
	return make([]byte, 0, 4096)
}

// take removes every queued frame for the writer, with the number of
// envelopes in each, and wakes senders waiting for room. Writer only.
func (ep *endpoint) take(out [][]byte, envs []int) ([][]byte, []int) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	out = append(out, ep.frames...)
	envs = append(envs, ep.envs...)
	clear(ep.frames)
	ep.frames, ep.envs = ep.frames[:0], ep.envs[:0]
	if len(ep.cur) > 0 {
		out = append(out, ep.cur)
		envs = append(envs, ep.curEnvs)
		ep.cur, ep.curEnvs = nil, 0
	}
	ep.queued = 0
	ep.takenEnvs = 0
	for _, n := range envs {
		ep.takenEnvs += n
	}
	if ep.waiting {
		ep.waiting = false
		close(ep.spacec)
		ep.spacec = make(chan struct{})
	}
	ep.sending = len(out) > 0
	if !ep.sending {
		ep.trimSparesLocked() // the burst is sent
		if ep.flushc != nil {
			close(ep.flushc)
			ep.flushc = nil
		}
	}
	return out, envs
}

// sendFinished reports whether the writer, having written everything, is
// to half-close the stream.
func (ep *endpoint) sendFinished() bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.finishSend && ep.queued == 0
}

// flush waits until everything queued so far has been written, the
// endpoint broke, or ctx ended. Any goroutine.
func (ep *endpoint) flush(ctx context.Context) {
	ep.mu.Lock()
	if ep.err != nil || !ep.sending && ep.queued == 0 {
		ep.mu.Unlock()
		return
	}
	if ep.flushc == nil {
		ep.flushc = make(chan struct{})
	}
	flushed := ep.flushc
	ep.mu.Unlock()
	ep.wakeWriter()
	select {
	case <-flushed:
	case <-ep.done:
	case <-ctx.Done():
	}
}

// recycle keeps sent frames for reuse, up to burstSpares. Writer only.
func (ep *endpoint) recycle(frames [][]byte) {
	ep.mu.Lock()
	for _, f := range frames {
		if len(ep.spare) < burstSpares && cap(f) <= 1<<20 {
			ep.spare = append(ep.spare, f[:0])
		}
	}
	ep.mu.Unlock()
}

// trimSparesLocked lets all but idleSpares spare frames go, once a burst
// is sent. mu held.
func (ep *endpoint) trimSparesLocked() {
	if len(ep.spare) > idleSpares {
		clear(ep.spare[idleSpares:])
		ep.spare = ep.spare[:idleSpares]
	}
}

// writeLoop sends what is queued until the endpoint breaks. A dialled
// endpoint first connects and says hello. The writer goroutine only.
func (ep *endpoint) writeLoop() {
	if ep.dialed && !ep.connect() {
		return
	}
	var batch [][]byte
	var envs []int
	for {
		select {
		case <-ep.wake:
		case <-ep.done:
			return
		}
		for {
			// Let the senders that are runnable queue theirs first: a
			// writer woken by the first envelope of a burst would
			// otherwise send it alone, a frame (and a syscall) each.
			runtime.Gosched()
			batch, envs = ep.take(batch[:0], envs[:0])
			if len(batch) == 0 {
				if ep.sendFinished() {
					if err := ep.conn.CloseSend(); err != nil {
						ep.t.log.Debug("half-closing a stream failed", zap.String("peer", ep.peer), zap.Error(err))
					}
					return
				}
				break
			}
			for i, f := range batch {
				if err := ep.conn.Send(f); err != nil {
					ep.fail(status.Errorf(codes.Unavailable, "granary: stream to silo %s broke: %v", ep.peer, err))
					return
				}
				ep.t.stats.sent(len(f), envs[i])
			}
			ep.recycle(batch)
			clear(batch)
		}
	}
}

// connect dials the peer, sends the hello and starts the reader. It
// reports whether the endpoint is up. The writer goroutine only.
func (ep *endpoint) connect() bool {
	t := ep.t
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.DialTimeout)
	ep.mu.Lock()
	if ep.err != nil {
		ep.mu.Unlock()
		cancel()
		return false
	}
	ep.dialCancel = cancel // a failure during the dial ends it
	ep.mu.Unlock()
	conn, err := t.net.Dial(ctx, ep.addr)
	cancel()
	if err != nil {
		err := &NotSentError{Peer: ep.peer, Msg: fmt.Sprintf("granary: cannot reach silo %s at %s: %v", ep.peer, ep.addr, err)}
		t.dialFailed(ep, err)
		ep.fail(err)
		return false
	}
	hello := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_HELLO, Hello: &granaryv1.Hello{ClusterId: t.cfg.ClusterID, Silo: t.cfg.Self}}
	bp, _, err := encodeEnvelope(hello)
	if err == nil {
		err = conn.Send(*bp)
		if err == nil {
			t.stats.sent(len(*bp), 1)
		}
		putScratch(bp)
	}
	ep.mu.Lock()
	ep.conn = conn
	broken := ep.err != nil
	ep.mu.Unlock()
	if err != nil || broken {
		conn.Close()
		if err != nil {
			ep.fail(status.Errorf(codes.Unavailable, "granary: stream to silo %s broke at hello: %v", ep.peer, err))
		}
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ep.readLoop()
	}()
	return true
}

// readLoop delivers what arrives until the stream ends, or, on an
// accepted endpoint, until Serve stops it. The reader goroutine only.
func (ep *endpoint) readLoop() {
	for {
		f, err := ep.conn.Recv()
		if err != nil {
			if err == io.EOF && !ep.dialed && ep.t.isGoingAway() {
				// The dialling silo has sent its last request (after this
				// one's go-away, or it closed); the answers still go out
				// until Shutdown ends the stream, and Serve waits for
				// that.
				ep.markAcked()
				return
			}
			ep.fail(status.Errorf(codes.Unavailable, "granary: stream with silo %s ended: %v", ep.peer, err))
			return
		}
		ep.deliverMu.Lock()
		if ep.stopped {
			ep.deliverMu.Unlock()
			return
		}
		ep.deliverFrame(f)
		ep.countReceived(len(f))
		ep.deliverMu.Unlock()
	}
}

// countReceived counts a frame of n bytes the reader has delivered, and
// the envelopes deliverOne decoded from it. The reader goroutine only (or
// serve, before it starts the reader).
func (ep *endpoint) countReceived(n int) {
	ep.t.stats.received(n, ep.rxEnvs)
	ep.rxEnvs = 0
}

// stopDelivering waits for the frame the reader is delivering, if any,
// and has it deliver nothing more. Serve only.
func (ep *endpoint) stopDelivering() {
	ep.deliverMu.Lock()
	ep.stopped = true
	ep.deliverMu.Unlock()
}

// deliverFrame hands each envelope of a frame to its receiver. The reader
// goroutine only.
//
// One Envelope is reused for every envelope the reader decodes: receivers
// may keep what its fields hold (each decode makes new strings, slices
// and sub-messages, and the reset before it drops the old ones) but not
// the Envelope itself.
func (ep *endpoint) deliverFrame(f []byte) {
	err := splitFrame(f, ep.deliverOne)
	proto.Reset(&ep.rx)
	if err != nil {
		ep.t.rejectMalformed(ep.peer, ep.conn, fmt.Errorf("dropped the rest of a %d-byte frame: %w", len(f), err))
	}
}

// deliverOne decodes one envelope into ep.rx and routes it. The reader
// goroutine only (or serve, before it starts the reader).
func (ep *endpoint) deliverOne(b []byte) {
	ep.rxEnvs++
	if err := decodeEnvelope(b, &ep.rx, &ep.names); err != nil {
		ep.malformed(b, err)
		return
	}
	ep.deliver(&ep.rx)
}

// deliver routes one decoded envelope.
func (ep *endpoint) deliver(env *granaryv1.Envelope) {
	k := env.GetKind()
	switch {
	case k == granaryv1.EnvelopeKind_ENVELOPE_KIND_RESPONSE:
		p := ep.takePending(env.CallId)
		if p == nil {
			return // it timed out, or the stream that sent it was failed
		}
		p.finish(env, nil)
	case k == granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST,
		!ep.dialed && (k == granaryv1.EnvelopeKind_ENVELOPE_KIND_DIRECTORY || k == granaryv1.EnvelopeKind_ENVELOPE_KIND_HOME):
		ep.t.h.Deliver(ep.peer, env, Responder{ep: ep, id: env.CallId})
	case k == granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY,
		!ep.dialed && (k == granaryv1.EnvelopeKind_ENVELOPE_KIND_CANCEL || k == granaryv1.EnvelopeKind_ENVELOPE_KIND_REMINDER):
		ep.t.h.Deliver(ep.peer, env, Responder{})
	case ep.dialed && k == granaryv1.EnvelopeKind_ENVELOPE_KIND_GO_AWAY:
		// The peer is shutting down: no new call goes to it, the answer
		// is the last request-direction envelope, and then this end stops
		// sending; the answers to what was sent before still come.
		ep.t.peerLeaving(ep)
		ep.answerGoAway()
		ep.t.streamsEnded(ep.peer)
	case !ep.dialed && k == granaryv1.EnvelopeKind_ENVELOPE_KIND_GO_AWAY:
		ep.markAcked()
	default:
		ep.t.log.Warn("dropped an envelope of a kind this end of the stream does not take",
			zap.String("peer", ep.peer), zap.Stringer("kind", k), zap.Bool("dialled", ep.dialed))
		ep.refuse(k, env.CallId, status.Newf(codes.InvalidArgument, "granary: silo %s does not take %v envelopes on this stream", ep.t.cfg.Self, k))
	}
}

// answerGoAway queues the answer to the peer's GO_AWAY and has the writer
// half-close the stream once it is written. The answer is queued and
// finishSend set in one critical section, the one enqueue checks, so a
// request racing it is either queued before the answer (and counted by
// the peer) or refused as not sent. The answer does not wait for room in
// a full queue: it is a few bytes, and the reader must not block. The
// reader goroutine of a dialled endpoint only.
func (ep *endpoint) answerGoAway() {
	bp, _, err := encodeEnvelope(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_GO_AWAY})
	if err != nil {
		panic(fmt.Sprintf("transport: encoding the answer to a go-away from silo %s: %v", ep.peer, err))
	}
	defer putScratch(bp)
	ep.mu.Lock()
	if ep.err != nil || ep.finishSend {
		ep.mu.Unlock()
		return
	}
	ep.appendLocked(*bp)
	ep.finishSend = true
	ep.mu.Unlock()
	ep.wakeWriter()
}

// malformed handles an envelope that does not decode: logged, and its
// sender answered when its call ID can be read.
func (ep *endpoint) malformed(b []byte, err error) {
	kind, id, ok := peekHeader(b)
	ep.t.rejectMalformed(ep.peer, ep.conn, fmt.Errorf("dropped a %d-byte envelope: %w", len(b), err))
	if !ok {
		return
	}
	if kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_RESPONSE {
		if p := ep.takePending(id); p != nil {
			p.finish(nil, status.Errorf(codes.Internal, "granary: the response from silo %s is malformed: %v", ep.peer, err))
		}
		return
	}
	ep.refuse(kind, id, status.Newf(codes.InvalidArgument, "granary: malformed envelope: %v", err))
}

// refuse answers a request envelope with an error status.
func (ep *endpoint) refuse(kind granaryv1.EnvelopeKind, id uint64, st *status.Status) {
	switch {
	case id == 0:
		return
	case kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST:
	case !ep.dialed && (kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_DIRECTORY || kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_HOME):
	default:
		return
	}
	Responder{ep: ep, id: id}.Reply(&granaryv1.Envelope{Code: uint32(st.Code()), Message: st.Message()})
}

// fail breaks the endpoint: nothing more is queued, the stream closes and
// every pending call fails with err. The first failure wins. Any
// goroutine.
func (ep *endpoint) fail(err error) {
	ep.mu.Lock()
	if ep.err != nil {
		ep.mu.Unlock()
		return
	}
	ep.err = err
	pending := ep.pending
	ep.pending = nil
	conn, dialCancel := ep.conn, ep.dialCancel
	close(ep.done)
	ep.frames, ep.cur, ep.spare, ep.queued = nil, nil, nil, 0
	ep.envs, ep.curEnvs, ep.takenEnvs = nil, 0, 0
	ep.mu.Unlock()
	// From here callers can see the failure (enqueue returns err), while
	// the peer may still name this endpoint until detach: endpointFor
	// skips a failed one.
	if h := ep.t.failHook; h != nil {
		h(ep)
	}
	if dialCancel != nil {
		dialCancel()
	}
	if conn != nil {
		conn.Close()
	}
	ep.t.detach(ep)
	for _, p := range pending {
		p.finish(nil, err)
	}
}

// expire fails the pending calls whose deadline and grace have passed.
func (ep *endpoint) expire(now time.Time) {
	var late []*pendingCall
	ep.mu.Lock()
	for id, p := range ep.pending {
		if !p.deadline.IsZero() && now.After(p.deadline.Add(ep.t.cfg.ResponseGrace)) {
			late = append(late, p)
			delete(ep.pending, id)
		}
	}
	ep.mu.Unlock()
	for _, p := range late {
		p.finish(nil, status.Errorf(codes.DeadlineExceeded, "granary: no response from silo %s by the call's deadline", ep.peer))
	}
}

// takePending removes and returns the pending call id, or nil.
func (ep *endpoint) takePending(id uint64) *pendingCall {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	p := ep.pending[id]
	delete(ep.pending, id)
	return p
}

// pendingCount is the number of calls waiting for a response.
func (ep *endpoint) pendingCount() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.pending)
}

// unsentCount is the number of envelopes queued and not yet written:
// waiting in the queue, or taken by the writer and not yet sent (those
// it has just written count until its next take). Any goroutine.
func (ep *endpoint) unsentCount() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	n := ep.curEnvs + ep.takenEnvs
	for _, e := range ep.envs {
		n += e
	}
	return n
}

// sendGoAway tells the dialling silo of an accepted endpoint that this
// one is shutting down.
func (ep *endpoint) sendGoAway() {
	if err := ep.send(&granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_GO_AWAY}, time.Time{}); err != nil {
		ep.markAcked() // broken: nothing more arrives either
	}
}

// markAcked closes acked, once.
func (ep *endpoint) markAcked() { ep.ackedOnce.Do(func() { close(ep.acked) }) }

// A Responder answers one request that arrived on a stream. The zero
// Responder (for a one-way envelope) answers nothing.
type Responder struct {
	ep *endpoint
	id uint64
}

// Reply sends resp back on the stream the request came in on, as a
// response to it. A stream that broke meanwhile drops it: the caller has
// been told already. Any goroutine; once.
func (r Responder) Reply(resp *granaryv1.Envelope) {
	if r.ep == nil {
		return
	}
	resp.Kind, resp.CallId = granaryv1.EnvelopeKind_ENVELOPE_KIND_RESPONSE, r.id
	if err := r.ep.send(resp, time.Time{}); err != nil && !r.ep.broken() {
		// Too large, most likely. An error status too large with its
		// details still goes, without them; anything else is answered
		// with the error instead.
		if resp.Code != uint32(codes.OK) && len(resp.Payload) > 0 {
			resp.Payload = nil
			if r.ep.send(resp, time.Time{}) == nil || r.ep.broken() {
				return
			}
		}
		st, _ := status.FromError(err)
		r.ep.send(&granaryv1.Envelope{Kind: resp.Kind, CallId: r.id, Code: uint32(st.Code()), Message: st.Message()}, time.Time{})
	}
}

// Expects reports whether the request expects a reply.
func (r Responder) Expects() bool { return r.ep != nil }
