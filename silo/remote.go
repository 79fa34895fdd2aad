package silo

import (
	"sync"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/placement"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxForwards bounds how many times a call may be passed on from silo to
// silo because its activation was elsewhere (a stale cache, a lost
// registration, a silo shutting down) before it fails.
const maxForwards = 2

// directoryTimeout bounds a directory request to another silo.
const directoryTimeout = 10 * time.Second

// resolve routes a call whose grain has no activation on this silo: to
// the silo the directory names, else to the silo placement picks. t is
// nil when this silo does not host the type. The call's callee ownership
// passes on with it.
//
// A call that another silo passed on here, believing its activation was
// here, asks the grain's owner rather than this silo's cache: after a
// membership change two silos' caches can each name the other, and
// trusting them would bounce the call until its hop bound, and every
// call after it, for as long as both entries live.
func (cl *cluster) resolve(c *call, t *grainType) {
	lookup := cl.dir.Lookup
	if c.hops > 0 {
		lookup = cl.dir.LookupOwner
	} else if e, ok := cl.dir.CachedLookup(c.id); ok && e.Silo != cl.self {
		cl.forward(e, c, false)
		return
	}
	lookup(c.id, func(e directory.Entry, found bool, err error) {
		switch {
		case err != nil && cl.retryLater(c, func() { cl.resolve(c, t) }):
		case err != nil:
			cl.s.fail(nil, c, status.Errorf(codes.Unavailable, "granary: locating %s: %v", c.id, status.Convert(err).Message()))
		case found && e.Silo != cl.self:
			cl.forward(e, c, false)
		case found && cl.s.activationByID(c.id, e.Activation) != nil:
			// Made here since the call missed the catalog.
			c.placedHere = true
			cl.s.route(nil, c)
		default:
			if found {
				// The entry names an activation of this silo that is
				// gone: its unregistration is late or was lost. (An
				// activation is in the catalog before it registers.)
				cl.dir.Invalidate(c.id, e)
				cl.dir.Unregister(c.id, e)
			}
			cl.place(c, t)
		}
	})
}

// maxDirectoryRetries bounds how often a call retries a directory request
// that failed while a membership change spread: the silos' rings
// disagreed, or the new owner of the grain was still recovering entries
// (directory.Config.RecoveryWindow). With retryBackoff the retries span
// about a second.
const maxDirectoryRetries = 24

// retryBackoff is the wait before retry n (from 0): 5 ms doubling, at
// most 50 ms.
func retryBackoff(n uint8) time.Duration {
	return min(5*time.Millisecond<<min(n, 4), 50*time.Millisecond)
}

// retryLater runs retry after a short backoff, unless the call has used
// its retries or its deadline would pass first; it reports whether it
// will.
func (cl *cluster) retryLater(c *call, retry func()) bool {
	if c.retries >= maxDirectoryRetries || cl.closed.Load() || cl.s.stopping.Load() && c.raw == nil {
		return false
	}
	d := retryBackoff(c.retries)
	if cl.s.since()+d >= c.due {
		return false
	}
	c.retries++
	cl.s.clock.AfterFunc(d, retry)
	return true
}

// place picks a silo for a grain that has no activation anywhere and
// sends the call there, or activates the grain here.
func (cl *cluster) place(c *call, t *grainType) {
	v := cl.view.Load()
	req := placement.Request{Grain: c.id, Local: cl.self, Candidates: v.hosts[c.id.Type]}
	stopping := cl.s.stopping.Load()
	if stopping {
		// This silo activates nothing any more, whatever its view says.
		var others []placement.Candidate
		for _, cand := range req.Candidates {
			if cand.ID != cl.self {
				others = append(others, cand)
			}
		}
		req.Candidates = others
	}
	if t != nil {
		req.Strategy, req.Role = strategyOf(t.opts)
		for _, cand := range req.Candidates {
			if cand.ID == cl.self {
				req.LocalHosts = true
			}
		}
	}
	to, err := cl.placer.Place(req)
	if err != nil {
		if status.Code(err) == codes.Unavailable && len(req.Candidates) == 0 && t == nil {
			err = unknownType(c.id)
		}
		cl.s.fail(nil, c, err)
		return
	}
	if to == cl.self {
		c.placedHere = true
		cl.s.route(nil, c)
		return
	}
	cl.placer.Placed(to)
	cl.forward(directory.Entry{Silo: to}, c, true)
}

// strategyOf maps a type's options onto a placement strategy.
func strategyOf(o grain.TypeOptions) (placement.Strategy, string) {
	switch {
	case o.StatelessWorker:
		return placement.StatelessWorker, ""
	case o.Placement == grain.PlacementSiloRole:
		return placement.SiloRole, o.SiloRole
	}
	return placement.Strategy(o.Placement), "" // the first five agree
}

// forward sends a call to the silo that has, or is to have, its
// activation: the directory entry via names it (with no activation when
// placement chose the silo: placed). The reply settles the call. A
// failure to reach the silo drops the cached entry that sent the call
// there; a call that never left is routed again, and the entry, which
// names a silo that is gone or going, is unregistered first.
func (cl *cluster) forward(via directory.Entry, c *call, placed bool) {
	to := via.Silo
	if c.hops > maxForwards {
		cl.s.fail(nil, c, status.Errorf(codes.Unavailable,
			"granary: %s: the call was passed between silos %d times without finding the activation (the cluster is changing; retry)", c.id, c.hops))
		return
	}
	o := newOutgoing()
	defer o.free()
	if err := cl.envelope(c, placed, o); err != nil {
		cl.s.fail(nil, c, err)
		return
	}
	if c.oneWay {
		if err := cl.tport.Send(to, o.env, c.deadline()); err != nil {
			cl.log.Debug("a one-way call was not sent", zap.Stringer("grain", c.id), zap.String("to", to), zap.Error(err))
			cl.notSent(c, via, err)
			return
		}
		c.release()
		return
	}
	var w *cancelWatch
	cctx := c.cancel // c may be released before Call returns
	if cctx != nil {
		o.env.Cancellable = true
		w = new(cancelWatch)
	}
	cl.inflight.add()
	id := cl.tport.Call(to, o.env, c.deadline(), func(resp *granaryv1.Envelope, err error) {
		defer cl.inflight.done()
		if w != nil {
			w.done()
		}
		if err != nil {
			cl.notSent(c, via, err)
			return
		}
		c.servedBy = to
		if resp.ActivationSilo != "" && resp.ActivationSilo != to {
			cl.dir.Invalidate(c.dirID(), directory.Entry{}) // it was passed on
			c.servedBy = resp.ActivationSilo
		}
		if err := transport.StatusOf(resp); err != nil {
			cl.s.fail(nil, c, err)
			return
		}
		out := c.method.NewResponse()
		if err := proto.Unmarshal(resp.Payload, out); err != nil {
			cl.s.fail(nil, c, status.Errorf(codes.Internal, "granary: the reply of %s.%s from silo %s does not decode: %v", c.id, c.method.Name, to, err))
			return
		}
		c.settle(nil, out, nil)
		c.release()
	})
	if w != nil {
		w.watch(cctx, id, func(env *granaryv1.Envelope, deadline time.Time) error { return cl.tport.Send(to, env, deadline) })
	}
}

// notSent handles a call forward could not deliver to via.Silo: one that
// never left is routed again at once when that silo is gone or going (its
// entry unregistered first), or shortly while it may be alive behind a
// broken link; any other fails.
func (cl *cluster) notSent(c *call, via directory.Entry, err error) {
	cl.dir.Invalidate(c.dirID(), directory.Entry{})
	reroute := func() { c.placedHere = false; cl.s.route(nil, c) }
	switch {
	case transport.NotSent(err) && cl.view.Load().gone(via.Silo) && c.retries < maxDirectoryRetries && !cl.closed.Load():
		// The unregistration reaches the entry's owner before the lookup
		// that follows it. (A silo this one has not heard of yet is not
		// gone: it may have just joined.)
		c.retries++
		if via.Activation != 0 {
			cl.dir.Unregister(c.dirID(), via)
		}
		reroute()
	case transport.NotSent(err) && cl.retryLater(c, reroute):
	default:
		cl.s.fail(nil, c, err)
	}
}

// Envelopes and payload buffers for outgoing calls and replies: the
// transport encodes an envelope before Call, Send or Reply returns, so
// both go back to their pools at once.
var (
	envPool = sync.Pool{New: func() any { return new(granaryv1.Envelope) }}
	bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}
)

// outgoing is an envelope being sent and the buffer its payload was
// encoded into.
type outgoing struct {
	env *granaryv1.Envelope
	buf *[]byte
}

func newOutgoing() outgoing {
	return outgoing{env: envPool.Get().(*granaryv1.Envelope), buf: bufPool.Get().(*[]byte)}
}

// encode marshals m into the buffer as the envelope's payload.
func (o outgoing) encode(m proto.Message) error {
	b, err := proto.MarshalOptions{}.MarshalAppend((*o.buf)[:0], m)
	*o.buf = b
	o.env.Payload = b
	return err
}

// free returns the envelope and buffer to their pools.
func (o outgoing) free() {
	proto.Reset(o.env)
	envPool.Put(o.env)
	if cap(*o.buf) <= 64<<10 {
		bufPool.Put(o.buf)
	}
}

// envelope encodes a call for another silo into o.
func (cl *cluster) envelope(c *call, placed bool, o outgoing) error {
	env := o.env
	env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST
	if c.oneWay {
		env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY
	}
	env.GrainType, env.GrainKey = c.id.Type, c.id.Key
	env.Method, env.MethodIndex = c.method.Name, uint32(c.method.Index)
	env.Observer = c.method.Observe != nil
	env.Hops, env.Placed = c.hops, placed
	switch {
	case c.raw != nil:
		env.Payload = c.raw // relayed as it came
	case c.req != nil:
		if err := o.encode(c.req); err != nil {
			return status.Errorf(codes.InvalidArgument, "granary: encoding the request to %s.%s: %v", c.id, c.method.Name, err)
		}
	}
	left := c.due - cl.s.callNow()
	if left <= 0 {
		return deadlineError(c)
	}
	env.TimeoutNanos = int64(left)
	if c.headers != nil {
		kv := grainrt.AppendHeaders(nil, c.headers)
		env.Headers = make([]*granaryv1.Header, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			env.Headers = append(env.Headers, &granaryv1.Header{Key: kv[i], Value: kv[i+1]})
		}
	}
	for l := c.chain; l != nil; l = l.next {
		if l.remote != nil {
			env.Chain = append(env.Chain, l.remote)
			continue
		}
		env.Chain = append(env.Chain, &granaryv1.ChainLink{Silo: cl.self, Activation: l.act.actID, Seq: l.seq, Grain: l.act.id.String()})
	}
	return nil
}

// Deliver takes an envelope from another silo: a directory request, or
// a call, which is routed here as a local call would be. The stream's
// reader goroutine; it does not block.
func (cl *cluster) Deliver(from string, env *granaryv1.Envelope, r transport.Responder) {
	switch env.Kind {
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_DIRECTORY:
		cl.handleDirectory(from, env, r)
		return
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_CANCEL:
		cl.cancels.cancel(remoteCall{from, env.CallId})
		return
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_REMINDER:
		if rem := cl.s.rem; rem != nil {
			id := grain.ID{Type: env.GrainType, Key: env.GrainKey}
			rem.svc.Changed(id, directory.Position(id))
		}
		return
	}
	s := cl.s
	refuse := transport.Refuser(r, cl.log, "dropped a one-way call from another silo", from)
	id := grain.ID{Type: env.GrainType, Key: env.GrainKey}
	var m *grain.MethodDesc
	if env.Observer {
		m = s.relayMethod(relayKey{id.Type, env.Method, env.MethodIndex, true})
	} else {
		t := s.types[env.GrainType]
		if t == nil {
			refuse(codes.NotFound, "granary: silo %s does not host grain type %q", cl.self, env.GrainType)
			return
		}
		var err error
		if env.Method == reminderMethodName {
			m = &reminderMethod // a tick from the silo that owns the reminder
		} else if m, err = t.method(id, env, codes.NotFound); err != nil {
			refuse(status.Code(err), "%s", status.Convert(err).Message())
			return
		}
	}
	if len(env.Chain) >= s.cfg.MaxCallChain {
		refuse(codes.ResourceExhausted, "granary: call chain deeper than %d grains (MaxCallChain) calling %s", s.cfg.MaxCallChain, id)
		return
	}
	c := s.incoming(from, env, id, m, r, remoteWaiter, &cl.cancels, &cl.inflight)
	c.chain, c.depth = cl.chainFrom(env.Chain), len(env.Chain)
	c.hops = env.Hops + 1 // were it passed on from here, this silo would be one more hop
	if env.Placed {
		c.placedHere = true
	}
	s.route(nil, c)
}

// method returns the method of t that env names, or the error that
// refuses the call: missing, for a method t does not have, or
// InvalidArgument, for a key not of t's kind.
func (t *grainType) method(id grain.ID, env *granaryv1.Envelope, missing codes.Code) (*grain.MethodDesc, error) {
	idx := int(env.MethodIndex)
	if idx >= len(t.desc.Methods) || t.desc.Methods[idx].Name != env.Method {
		return nil, status.Errorf(missing, "granary: grain type %s has no method %q at index %d", id.Type, env.Method, env.MethodIndex)
	}
	if err := t.opts.KeyKind.CheckKey(id.Key); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "granary: calling %s: %v (type %s takes %s keys)", id, err, id.Type, t.opts.KeyKind)
	}
	return &t.desc.Methods[idx], nil
}

// incoming makes the call record of a request or one-way call that came
// from another process (a silo, or a client through the gateway): its
// request stays encoded for its turn to decode; a request is answered
// through r by waiter, counted in inflight, and, when its sender may
// cancel it, given a context in cancels.
func (s *Runtime) incoming(from string, env *granaryv1.Envelope, id grain.ID, m *grain.MethodDesc, r transport.Responder, waiter waiterKind, cancels *cancelTable, inflight *inflightCount) *call {
	oneWay := !r.Expects()
	refs := int32(2)
	if oneWay {
		refs = 1
	}
	c := s.newCall(refs)
	c.id, c.method, c.raw, c.oneWay = id, m, env.Payload, oneWay
	if c.raw == nil {
		c.raw = []byte{}
	}
	c.due = s.callNow() + s.callTimeout(time.Duration(env.TimeoutNanos))
	if len(env.Headers) > 0 {
		kv := make([]string, 0, 2*len(env.Headers))
		for _, h := range env.Headers {
			kv = append(kv, h.Key, h.Value)
		}
		c.headers = grainrt.HeadersFromPairs(kv)
	}
	if !oneWay {
		c.waiter, c.responder = waiter, r
		if env.Cancellable {
			cancels.add(c, remoteCall{from, env.CallId})
		}
		inflight.add()
	}
	return c
}

// chainFrom rebuilds a call chain that came from another silo: links to
// this silo's activations point at them again, so that admission sees a
// chain that comes back here.
func (cl *cluster) chainFrom(links []*granaryv1.ChainLink) *chainLink {
	var head, tail *chainLink
	for _, pl := range links {
		l := &chainLink{seq: pl.Seq, remote: pl}
		if pl.Silo == cl.self {
			if id, err := grain.ParseID(pl.Grain); err == nil {
				if a := cl.s.activationByID(id, pl.Activation); a != nil {
					l.act, l.remote = a, nil
				}
			}
		}
		if head == nil {
			head = l
		} else {
			tail.next = l
		}
		tail = l
	}
	return head
}

// reply answers a call that came from another silo; settle calls it once
// the outcome is in.
func (cl *cluster) reply(c *call) {
	defer cl.inflight.done()
	servedBy := ""
	if c.servedBy != "" && c.servedBy != cl.self {
		servedBy = c.servedBy // it was passed on; empty means here
	}
	answer(c, servedBy)
}

// answer sends c's outcome back through its responder to the process
// that sent it (another silo or a client), naming servedBy as the silo
// that ran it when that is not the answering one.
func answer(c *call, servedBy string) {
	c.forgetCancel()
	o := newOutgoing()
	defer o.free()
	resp := o.env
	resp.ActivationSilo = servedBy
	switch {
	case c.err != nil:
		transport.SetStatus(resp, c.err)
	case c.resp != nil:
		if err := o.encode(c.resp); err != nil {
			resp.Payload = nil
			resp.Code, resp.Message = uint32(codes.Internal), "granary: encoding the reply: "+err.Error()
		}
	}
	c.responder.Reply(resp)
}

// remindersChanged tells the silo that owns ring position h, id's, that
// id's reminders changed; this silo, when it owns it.
func (cl *cluster) remindersChanged(id grain.ID, h uint64) {
	owner := cl.dir.Ring().Owner(h)
	if owner == "" || owner == cl.self {
		cl.s.rem.svc.Changed(id, h)
		return
	}
	env := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REMINDER, GrainType: id.Type, GrainKey: id.Key}
	if err := cl.tport.Send(owner, env, cl.s.clock.Now().Add(directoryTimeout)); err != nil {
		cl.log.Debug("reminder change notice not sent; the owner finds it at its next refresh",
			zap.Stringer("grain", id), zap.String("owner", owner), zap.Error(err))
	}
}

// Send carries a directory request to another silo: the directory's
// Sender.
func (cl *cluster) Send(to string, req *directory.Request, done func(*directory.Response, error)) {
	env := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_DIRECTORY, Directory: dirRequestToProto(req)}
	cl.tport.Call(to, env, cl.s.clock.Now().Add(directoryTimeout), func(resp *granaryv1.Envelope, err error) {
		if err == nil {
			err = transport.StatusOf(resp)
		}
		switch {
		case err != nil:
			done(nil, err)
		default:
			done(dirResponseFromProto(resp.DirectoryReply), nil)
		}
	})
}

// handleDirectory serves a directory request from another silo.
func (cl *cluster) handleDirectory(from string, env *granaryv1.Envelope, r transport.Responder) {
	if !r.Expects() {
		return
	}
	req, err := dirRequestFromProto(env.Directory)
	if err != nil {
		r.Reply(transport.SetStatus(&granaryv1.Envelope{}, err))
		return
	}
	cl.inflight.add() // it may be passed on: a leaving silo waits for it
	cl.dir.Handle(from, req, func(resp *directory.Response, err error) {
		defer cl.inflight.done()
		if err != nil {
			r.Reply(transport.SetStatus(&granaryv1.Envelope{}, err))
			return
		}
		r.Reply(&granaryv1.Envelope{DirectoryReply: dirResponseToProto(resp)})
	})
}

func dirRequestToProto(req *directory.Request) *granaryv1.DirectoryRequest {
	out := &granaryv1.DirectoryRequest{Op: granaryv1.DirectoryOp(req.Op), Hops: uint32(req.Hops)}
	for _, it := range req.Items {
		out.Entries = append(out.Entries, entryToProto(it.ID, it.Entry))
	}
	return out
}

func dirRequestFromProto(pr *granaryv1.DirectoryRequest) (*directory.Request, error) {
	if pr == nil {
		return nil, status.Error(codes.InvalidArgument, "granary: a directory envelope without a request")
	}
	if pr.Hops > 64 {
		return nil, status.Errorf(codes.InvalidArgument, "granary: a directory request with %d hops", pr.Hops)
	}
	req := &directory.Request{Op: directory.Op(pr.Op), Hops: int(pr.Hops), Items: make([]directory.Item, 0, len(pr.Entries))}
	for _, e := range pr.Entries {
		req.Items = append(req.Items, itemFromProto(e))
	}
	return req, nil
}

func dirResponseToProto(resp *directory.Response) *granaryv1.DirectoryResponse {
	out := &granaryv1.DirectoryResponse{Found: resp.Found}
	if !resp.Entry.IsZero() {
		out.Entry = entryToProto(grain.ID{}, resp.Entry)
	}
	for i, it := range resp.Rejected {
		out.Rejected = append(out.Rejected, entryToProto(it.ID, it.Entry))
		if i < len(resp.Winners) {
			out.Winners = append(out.Winners, entryToProto(grain.ID{}, resp.Winners[i]))
		}
	}
	for _, it := range resp.Unplaced {
		out.Unplaced = append(out.Unplaced, entryToProto(it.ID, it.Entry))
	}
	return out
}

func dirResponseFromProto(pr *granaryv1.DirectoryResponse) *directory.Response {
	resp := &directory.Response{Found: pr.GetFound()}
	if e := pr.GetEntry(); e != nil {
		resp.Entry = itemFromProto(e).Entry
	}
	for i, e := range pr.GetRejected() {
		resp.Rejected = append(resp.Rejected, itemFromProto(e))
		var w directory.Entry
		if i < len(pr.GetWinners()) {
			w = itemFromProto(pr.Winners[i]).Entry
		}
		resp.Winners = append(resp.Winners, w)
	}
	for _, e := range pr.GetUnplaced() {
		resp.Unplaced = append(resp.Unplaced, itemFromProto(e))
	}
	return resp
}

func itemFromProto(e *granaryv1.DirectoryEntry) directory.Item {
	return directory.Item{ID: grain.ID{Type: e.GrainType, Key: e.GrainKey}, Entry: directory.Entry{Silo: e.Silo, Activation: e.Activation}}
}

func entryToProto(id grain.ID, e directory.Entry) *granaryv1.DirectoryEntry {
	return &granaryv1.DirectoryEntry{GrainType: id.Type, GrainKey: id.Key, Silo: e.Silo, Activation: e.Activation}
}

// register records a new activation in the directory before it starts:
// the first registration of a grain wins, and an activation that loses
// never runs, and sends the requests it holds to the winner.
func (cl *cluster) register(a *activationRec) {
	mine := directory.Entry{Silo: cl.self, Activation: a.actID}
	cl.dir.Register(a.id, mine, func(winner directory.Entry, err error) {
		switch {
		case err != nil && a.retries < maxDirectoryRetries && !cl.s.stopping.Load() && !cl.closed.Load():
			d := retryBackoff(a.retries)
			a.retries++
			cl.s.clock.AfterFunc(d, func() { cl.register(a) })
		case err != nil:
			a.abandon(directory.Entry{}, status.Errorf(codes.Unavailable, "granary: registering %s in the directory: %s", a.id, status.Convert(err).Message()))
		case winner == mine:
			a.registered.Store(true)
			cl.s.startActivation(a)
		default:
			a.abandon(winner, nil)
		}
	})
}
