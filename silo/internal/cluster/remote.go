package cluster

import (
	"sync"
	"time"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/grainrt"
	"github.com/granaryio/granary/internal/transport"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/internal/local"
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

// maxDirectoryRetries bounds how often a call retries a directory request
// that failed while a membership change spread: the silos' rings
// disagreed, or the new owner of the grain was still recovering entries
// (directory.Config.RecoveryWindow). With retryBackoff the retries span
// about a second.
const MaxDirectoryRetries = 24

// RetryBackoff is the wait before retry n (from 0): 5 ms doubling, at
// most 50 ms.
func RetryBackoff(n uint8) time.Duration {
	return min(5*time.Millisecond<<min(n, 4), 50*time.Millisecond)
}

// retryLater runs retry after a short backoff, unless the call has used
// its retries or its deadline would pass first; it reports whether it
// will.
func (cl *Cluster) retryLater(c *local.Call, retry func()) bool {
	if c.Retries >= MaxDirectoryRetries || cl.Closed.Load() || cl.s.Stopping.Load() && c.Raw == nil {
		return false
	}
	d := RetryBackoff(c.Retries)
	if cl.s.Since()+d >= c.Due {
		return false
	}
	c.Retries++
	cl.s.Clock.AfterFunc(d, retry)
	return true
}

// place picks a silo for a grain that has no activation anywhere and
// sends the call there, or activates the grain here. It reports where the
// call went, for the calls queued behind it to follow.
func (cl *Cluster) place(c *local.Call, t *local.GrainType) resolution {
	v := cl.View.Load()
	req := placement.Request{Grain: c.ID, Local: cl.SelfID, Candidates: v.Hosts[c.ID.Type]}
	stopping := cl.s.Stopping.Load()
	if stopping {
		// This silo activates nothing any more, whatever its view says.
		var others []placement.Candidate
		for _, cand := range req.Candidates {
			if cand.ID != cl.SelfID {
				others = append(others, cand)
			}
		}
		req.Candidates = others
	}
	if t != nil {
		req.Strategy, req.Role = strategyOf(t.Opts)
		for _, cand := range req.Candidates {
			if cand.ID == cl.SelfID {
				req.LocalHosts = true
			}
		}
	}
	to, err := cl.placer.Place(req)
	if err != nil {
		if status.Code(err) == codes.Unavailable && len(req.Candidates) == 0 && t == nil {
			err = local.UnknownType(c.ID)
		}
		cl.s.Fail(nil, c, err)
		return resolution{}
	}
	if to == cl.SelfID {
		return cl.routeHere(c)
	}
	cl.placer.Placed(to)
	return cl.forwardTo(directory.Entry{Silo: to}, c, true)
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

// Forward sends a call to the silo that has, or is to have, its
// activation: the directory entry via names it (with no activation when
// placement chose the silo: placed). The reply settles the call. A
// failure to reach the silo drops the cached entry that sent the call
// there; a call that never left is routed again, and the entry, which
// names a silo that is gone or going, is unregistered first.
func (cl *Cluster) Forward(via directory.Entry, c *local.Call, placed bool) {
	to := via.Silo
	if c.Hops > maxForwards {
		cl.s.Fail(nil, c, status.Errorf(codes.Unavailable,
			"granary: %s: the call was passed between silos %d times without finding the activation (the cluster is changing; retry)", c.ID, c.Hops))
		return
	}
	o := NewOutgoing()
	defer o.Free()
	if err := cl.envelope(c, placed, o); err != nil {
		cl.s.Fail(nil, c, err)
		return
	}
	if c.OneWay {
		if err := cl.Tport.Send(to, o.Env, c.Deadline()); err != nil {
			cl.log.Debug("a one-way call was not sent", zap.Stringer("grain", c.ID), zap.String("to", to), zap.Error(err))
			cl.notSent(c, via, err)
			return
		}
		c.Release()
		return
	}
	var w *local.CancelWatch
	cctx := c.Cancel // c may be released before Call returns
	if cctx != nil {
		o.Env.Cancellable = true
		w = new(local.CancelWatch)
	}
	cl.Inflight.Add()
	id := cl.Tport.Call(to, o.Env, c.Deadline(), func(resp *granaryv1.Envelope, err error) {
		defer cl.Inflight.Done()
		if w != nil {
			w.Done()
		}
		if err != nil {
			cl.notSent(c, via, err)
			return
		}
		c.ServedBy = to
		if resp.ActivationSilo != "" && resp.ActivationSilo != to {
			cl.Dir.Invalidate(c.DirID(), directory.Entry{}) // it was passed on
			c.ServedBy = resp.ActivationSilo
		}
		if err := transport.StatusOf(resp); err != nil {
			cl.s.Fail(nil, c, err)
			return
		}
		out := c.Method.NewResponse()
		if err := proto.Unmarshal(resp.Payload, out); err != nil {
			cl.s.Fail(nil, c, status.Errorf(codes.Internal, "granary: the reply of %s.%s from silo %s does not decode: %v", c.ID, c.Method.Name, to, err))
			return
		}
		c.Settle(nil, out, nil)
		c.Release()
	})
	if w != nil {
		w.Watch(cctx, id, func(env *granaryv1.Envelope, deadline time.Time) error { return cl.Tport.Send(to, env, deadline) })
	}
}

// notSent handles a call forward could not deliver to via.Silo: one that
// never left is routed again at once when that silo is gone or going (its
// entry unregistered first), or shortly while it may be alive behind a
// broken link; any other fails.
func (cl *Cluster) notSent(c *local.Call, via directory.Entry, err error) {
	cl.Dir.Invalidate(c.DirID(), directory.Entry{})
	reroute := func() { c.PlacedHere = false; cl.s.Route(nil, c) }
	switch {
	case transport.NotSent(err) && cl.View.Load().gone(via.Silo) && c.Retries < MaxDirectoryRetries && !cl.Closed.Load():
		// The unregistration reaches the entry's owner before the lookup
		// that follows it. (A silo this one has not heard of yet is not
		// gone: it may have just joined.)
		c.Retries++
		if via.Activation != 0 {
			cl.Dir.Unregister(c.DirID(), via)
		}
		reroute()
	case transport.NotSent(err) && cl.retryLater(c, reroute):
	default:
		cl.s.Fail(nil, c, err)
	}
}

// Envelopes and payload buffers for Outgoing calls and replies: the
// transport encodes an envelope before Call, Send or Reply returns, so
// both go back to their pools at once.
var (
	envPool = sync.Pool{New: func() any { return new(granaryv1.Envelope) }}
	bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}
)

// Outgoing is an envelope being sent and the buffer its payload was
// encoded into.
type Outgoing struct {
	Env *granaryv1.Envelope
	buf *[]byte
}

func NewOutgoing() Outgoing {
	return Outgoing{Env: envPool.Get().(*granaryv1.Envelope), buf: bufPool.Get().(*[]byte)}
}

// Encode marshals m into the buffer as the envelope's payload.
func (o Outgoing) Encode(m proto.Message) error {
	b, err := proto.MarshalOptions{}.MarshalAppend((*o.buf)[:0], m)
	*o.buf = b
	o.Env.Payload = b
	return err
}

// Free returns the envelope and buffer to their pools.
func (o Outgoing) Free() {
	proto.Reset(o.Env)
	envPool.Put(o.Env)
	if cap(*o.buf) <= 64<<10 {
		bufPool.Put(o.buf)
	}
}

// envelope encodes a call for another silo into o.
func (cl *Cluster) envelope(c *local.Call, placed bool, o Outgoing) error {
	env := o.Env
	env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST
	if c.OneWay {
		env.Kind = granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY
	}
	env.GrainType, env.GrainKey = c.ID.Type, c.ID.Key
	env.Method, env.MethodIndex = c.Method.Name, uint32(c.Method.Index)
	env.Observer = c.Method.Observe != nil
	env.Hops, env.Placed = c.Hops, placed
	switch {
	case c.Raw != nil:
		env.Payload = c.Raw // relayed as it came
	case c.Req != nil:
		if err := o.Encode(c.Req); err != nil {
			return status.Errorf(codes.InvalidArgument, "granary: encoding the request to %s.%s: %v", c.ID, c.Method.Name, err)
		}
	}
	left := c.Due - cl.s.CallNow()
	if left <= 0 {
		return local.DeadlineError(c)
	}
	env.TimeoutNanos = int64(left)
	if c.Headers != nil {
		kv := grainrt.AppendHeaders(nil, c.Headers)
		env.Headers = make([]*granaryv1.Header, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			env.Headers = append(env.Headers, &granaryv1.Header{Key: kv[i], Value: kv[i+1]})
		}
	}
	for l := c.Chain; l != nil; l = l.Next {
		if l.Remote != nil {
			env.Chain = append(env.Chain, l.Remote)
			continue
		}
		env.Chain = append(env.Chain, &granaryv1.ChainLink{Silo: cl.SelfID, Activation: l.Act.ActID, Seq: l.Seq(), Grain: l.Act.ID.String(), Reentry: l.WireReentry()})
	}
	return nil
}

// Deliver takes an envelope from another silo: a directory request, or
// a call, which is routed here as a local call would be. While the silo
// sheds load, a new call is refused with the error of local.Config's
// Shed; directory traffic, cancellations and reminder notices never are.
// The stream's reader goroutine; it does not block.
func (cl *Cluster) Deliver(from string, env *granaryv1.Envelope, r transport.Responder) {
	switch env.Kind {
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_DIRECTORY:
		cl.handleDirectory(from, env, r)
		return
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_CANCEL:
		cl.cancels.Cancel(local.RemoteCall{From: from, ID: env.CallId})
		return
	case granaryv1.EnvelopeKind_ENVELOPE_KIND_REMINDER:
		if rem := cl.s.Rem; rem != nil {
			id := grain.ID{Type: env.GrainType, Key: env.GrainKey}
			rem.Svc.Changed(id, directory.Position(id))
		}
		return
	}
	s := cl.s
	fresh := cl.fresh(env)
	if s.Overload.Shedding.Load() && s.Cfg.Shed != nil && (env.Kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_REQUEST || env.Kind == granaryv1.EnvelopeKind_ENVELOPE_KIND_ONE_WAY) {
		if fresh {
			err := s.Cfg.Shed(cl.SelfID, from, !r.Expects())
			if r.Expects() {
				r.Reply(transport.SetStatus(&granaryv1.Envelope{}, err))
			}
			return
		}
	}
	refuse := transport.Refuser(r, cl.log, "dropped a one-way call from another silo", from)
	id := grain.ID{Type: env.GrainType, Key: env.GrainKey}
	var m *grain.MethodDesc
	if env.Observer {
		m = s.RelayMethod(local.RelayKey{Type: id.Type, Method: env.Method, Index: env.MethodIndex, Observer: true})
	} else {
		t := s.Types[env.GrainType]
		if t == nil {
			refuse(codes.NotFound, "granary: silo %s does not host grain type %q", cl.SelfID, env.GrainType)
			return
		}
		var err error
		if m = local.RuntimeMethod(env.Method); m != nil {
			// a reminder's tick or a stream's delivery, from a silo
		} else if m, err = t.Method(id, env, codes.NotFound); err != nil {
			refuse(status.Code(err), "%s", status.Convert(err).Message())
			return
		}
	}
	if len(env.Chain) >= s.Cfg.MaxCallChain {
		refuse(codes.ResourceExhausted, "granary: call chain deeper than %d grains (MaxCallChain) calling %s", s.Cfg.MaxCallChain, id)
		return
	}
	// Were it passed on from here, this silo would be one more hop.
	if !r.Expects() && !env.Observer && s.PostIncoming(env, id, m, env.Hops+1, fresh) {
		return
	}
	c := s.Incoming(from, env, id, m, r, local.RemoteWaiter, &cl.cancels, &cl.Inflight)
	if !fresh {
		c.Arrived = 0 // admitted work: its wait is neither bounded nor timed
	}
	c.Chain, c.Depth = cl.chainFrom(env.Chain), len(env.Chain)
	c.Hops = env.Hops + 1 // were it passed on from here, this silo would be one more hop
	if env.Placed {
		c.PlacedHere = true
	}
	s.Route(nil, c)
}

// fresh reports whether env, a call from another silo, is new work for
// this silo, which load shedding and the queue wait limit may refuse. Not
// a reminder tick or a stream's delivery, which the runtime sends; not a call another silo
// passed on (Hops), which a silo took already; not a call to a client's
// observer, which runs no grain here and whose caller runs already; and
// not a call whose chain comes through this silo, which a request running
// here waits for.
func (cl *Cluster) fresh(env *granaryv1.Envelope) bool {
	if env.Hops != 0 || env.Observer || local.RuntimeMethod(env.Method) != nil {
		return false
	}
	for _, l := range env.Chain {
		if l.Silo == cl.SelfID {
			return false
		}
	}
	return true
}

// chainFrom rebuilds a call chain that came from another silo: links to
// this silo's activations point at them again, so that admission sees a
// chain that comes back here.
func (cl *Cluster) chainFrom(links []*granaryv1.ChainLink) *local.ChainLink {
	var head, tail *local.ChainLink
	for _, pl := range links {
		l := local.NewChainLink(nil, pl.Seq, nil, local.ReentryFromWire(pl))
		l.Remote = pl
		if pl.Silo == cl.SelfID {
			if id, err := grain.ParseID(pl.Grain); err == nil {
				if a := cl.s.ActivationByID(id, pl.Activation); a != nil {
					l.Act, l.Remote = a, nil
				}
			}
		}
		if head == nil {
			head = l
		} else {
			tail.Next = l
		}
		tail = l
	}
	return head
}

// Reply answers a call that came from another silo; settle calls it once
// the outcome is in.
func (cl *Cluster) Reply(c *local.Call) {
	defer cl.Inflight.Done()
	servedBy := ""
	if c.ServedBy != "" && c.ServedBy != cl.SelfID {
		servedBy = c.ServedBy // it was passed on; empty means here
	}
	Answer(c, servedBy)
}

// Answer sends c's outcome back through its responder to the process
// that sent it (another silo or a client), naming servedBy as the silo
// that ran it when that is not the answering one.
func Answer(c *local.Call, servedBy string) {
	c.ForgetCancel()
	o := NewOutgoing()
	defer o.Free()
	resp := o.Env
	resp.ActivationSilo = servedBy
	switch {
	case c.Err != nil:
		transport.SetStatus(resp, c.Err)
	case c.Resp != nil:
		if err := o.Encode(c.Resp); err != nil {
			resp.Payload = nil
			resp.Code, resp.Message = uint32(codes.Internal), "granary: encoding the reply: "+err.Error()
		}
	}
	c.Responder.Reply(resp)
}

// RemindersChanged tells the silo that owns ring position h, id's, that
// id's reminders changed; this silo, when it owns it.
func (cl *Cluster) RemindersChanged(id grain.ID, h uint64) {
	owner := cl.Dir.Ring().Owner(h)
	if owner == "" || owner == cl.SelfID {
		cl.s.Rem.Svc.Changed(id, h)
		return
	}
	env := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_REMINDER, GrainType: id.Type, GrainKey: id.Key}
	if err := cl.Tport.Send(owner, env, cl.s.Clock.Now().Add(directoryTimeout)); err != nil {
		cl.log.Debug("reminder change notice not sent; the owner finds it at its next refresh",
			zap.Stringer("grain", id), zap.String("owner", owner), zap.Error(err))
	}
}

// Send carries a directory request to another silo: the directory's
// Sender.
func (cl *Cluster) Send(to string, req *directory.Request, done func(*directory.Response, error)) {
	env := &granaryv1.Envelope{Kind: granaryv1.EnvelopeKind_ENVELOPE_KIND_DIRECTORY, Directory: dirRequestToProto(req)}
	cl.Tport.Call(to, env, cl.s.Clock.Now().Add(directoryTimeout), func(resp *granaryv1.Envelope, err error) {
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
func (cl *Cluster) handleDirectory(from string, env *granaryv1.Envelope, r transport.Responder) {
	if !r.Expects() {
		return
	}
	req, err := dirRequestFromProto(env.Directory)
	if err != nil {
		r.Reply(transport.SetStatus(&granaryv1.Envelope{}, err))
		return
	}
	cl.Inflight.Add() // it may be passed on: a leaving silo waits for it
	cl.Dir.Handle(from, req, func(resp *directory.Response, err error) {
		defer cl.Inflight.Done()
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

// Register records a new activation in the directory before it starts:
// the first registration of a grain wins, and an activation that loses
// never runs, and sends the requests it holds to the winner.
func (cl *Cluster) Register(a *local.Activation) {
	mine := directory.Entry{Silo: cl.SelfID, Activation: a.ActID}
	cl.Dir.Register(a.ID, mine, func(winner directory.Entry, err error) {
		switch {
		case err != nil && a.Retries < MaxDirectoryRetries && !cl.s.Stopping.Load() && !cl.Closed.Load():
			d := RetryBackoff(a.Retries)
			a.Retries++
			cl.s.Clock.AfterFunc(d, func() { cl.Register(a) })
		case err != nil:
			a.Abandon(directory.Entry{}, status.Errorf(codes.Unavailable, "granary: registering %s in the directory: %s", a.ID, status.Convert(err).Message()))
		case winner == mine:
			a.Registered.Store(true)
			cl.s.StartActivation(a)
		default:
			a.Abandon(winner, nil)
		}
	})
}
